"""Tasks: vocabularies, deterministic data generation, named splits and scoring."""

from sglab.tasks.base import Batch, PromptAnswerTask, SequenceSplit, Task, Vocabulary, build_task

__all__ = ["Batch", "PromptAnswerTask", "SequenceSplit", "Task", "Vocabulary", "build_task"]
