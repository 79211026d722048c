"""bAbI question answering for the DNC (thesis Sec. 2.3, Table 2.1), from local files.

``task.data_dir`` holds the en-10k v1.2 files in their published names,
``qa{N}_{name}_train.txt`` and ``qa{N}_{name}_test.txt`` (``tasks_1-20_v1-2/en-10k/`` of the
archive from research.facebook.com/downloads/babi; no download: the archive is not
fetched at run time). ``SHA256SUMS`` is checked as for the other published data sets
(written on first load). Only the tasks listed in ``task.tasks`` are read.

Each story is one sequence of lower-cased words ("." and "?" are tokens). After every
"?" come ``think_steps`` (3) null inputs and one null input per answer word; the targets
are the answer words there and ``IGNORE`` everywhere else, so the loss is cross-entropy on
answer words only. Answers with commas (tasks 8 and 19) become several words. Splits:
``train`` (train files less every ``valid_every``-th story), ``iid_valid`` (those stories),
``iid_test`` (test files); the two evaluation splits take the tasks in turn (story 1 of
every task, then story 2, ...), so ``train.eval_max_examples`` scores every task.
Metrics: ``exact_match`` (fraction of answer words right), ``error/task=N`` per task (wrong
answer words / answer words; solved if < 5%), ``loss``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import ClassVar, Literal

import torch
import torch.nn.functional as F
from pydantic import Field, field_validator

from sglab import registry
from sglab.config import TaskConfig
from sglab.errors import SglabError
from sglab.tasks.base import IGNORE, Batch, Task, Vocabulary
from sglab.tasks.published import Source, fetch, missing_files

TASK_NAMES = {
    1: "single-supporting-fact", 2: "two-supporting-facts", 3: "three-supporting-facts",
    4: "two-arg-relations", 5: "three-arg-relations", 6: "yes-no-questions", 7: "counting",
    8: "lists-sets", 9: "simple-negation", 10: "indefinite-knowledge", 11: "basic-coreference",
    12: "conjunction", 13: "compound-coreference", 14: "time-reasoning", 15: "basic-deduction",
    16: "basic-induction", 17: "positional-reasoning", 18: "size-reasoning", 19: "path-finding",
    20: "agents-motivations",
}
NULL = Vocabulary.PAD  # id 0: padding, thinking steps and answer inputs


def file_names(task: int) -> tuple[str, str]:
    stem = f"qa{task}_{TASK_NAMES[task]}"
    return f"{stem}_train.txt", f"{stem}_test.txt"


def require_files(data_dir: str | Path, tasks: list[int]) -> None:
    """An error naming every missing file and where to put it, before anything is built."""
    missing = missing_files(data_dir, [name for task in tasks for name in file_names(task)])
    if missing:
        shown = ", ".join(missing[:6]) + (f" and {len(missing) - 6} more" if len(missing) > 6 else "")
        raise SglabError(
            f"task.data_dir {str(data_dir)!r} lacks {len(missing)} bAbI file(s): {shown}. Unpack "
            f"tasks_1-20_v1-2.tar.gz (research.facebook.com/downloads/babi) and point "
            f"task.data_dir at its en-10k directory (--set task.data_dir=PATH), which holds "
            f"qa1_single-supporting-fact_train.txt ... qa20_agents-motivations_test.txt")


def interleave(stories: list[tuple[int, list]]) -> list[tuple[int, list]]:
    """(task, story) pairs reordered to take the tasks in turn: 1st story of every task, 2nd
    of every task, ... (the order within a task kept)."""
    by_task: dict[int, list] = {}
    for task, story in stories:
        by_task.setdefault(task, []).append((task, story))
    rounds = max((len(v) for v in by_task.values()), default=0)
    return [group[i] for i in range(rounds) for group in by_task.values() if i < len(group)]


class BabiConfig(TaskConfig):
    name: Literal["babi"] = "babi"
    data_dir: str = Field(..., description="Directory with the en-10k v1.2 qa*_train/test.txt files.")
    tasks: list[int] = Field(default_factory=lambda: list(range(1, 21)))
    think_steps: int = Field(3, ge=0, description="Null steps after every '?' (thesis T = 3).")
    valid_every: int = Field(20, ge=2, description="Every N-th training story goes to iid_valid.")
    split_metrics: ClassVar[tuple[str, ...]] = ("exact_match", "loss")

    @field_validator("tasks")
    @classmethod
    def _known_tasks(cls, tasks):
        unknown = [t for t in tasks if t not in TASK_NAMES]
        if unknown or not tasks:
            raise ValueError(f"tasks must be a non-empty list of bAbI task numbers 1-20 (got {tasks})")
        return tasks

    def evaluation_splits(self) -> list[str]:
        return ["iid_valid", "iid_test"]


def read_stories(path: Path) -> list[list[tuple[str, list[str] | None]]]:
    """Stories as lists of (sentence or question, answer words or None)."""
    stories: list[list[tuple[str, list[str] | None]]] = []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        number, _, rest = line.partition(" ")
        if number == "1":
            stories.append([])
        if "\t" in rest:
            question, answer = rest.split("\t")[:2]
            stories[-1].append((question, answer.split(",")))
        else:
            stories[-1].append((rest, None))
    return stories


def words(text: str) -> list[str]:
    return re.findall(r"[a-z]+|[.?]", text.lower())


@dataclass
class BabiSplit:
    tokens: torch.Tensor  # [stories, T]
    targets: torch.Tensor  # [stories, T], IGNORE except answer words
    task: torch.Tensor  # [stories]
    lengths: torch.Tensor  # [stories]


class BabiTask(Task):
    eval_splits = ["iid_valid", "iid_test"]

    def __init__(self, config: BabiConfig):
        self.config = config
        files = tuple(name for t in config.tasks for name in file_names(t))
        directory = fetch(config.data_dir, Source(files, None, "the bAbI archive "
                          "tasks_1-20_v1-2.tar.gz (directory en-10k), research.facebook.com"
                          "/downloads/babi"), printer=lambda _: None)
        encoded: dict[str, list] = {"train": [], "iid_valid": [], "iid_test": []}
        vocab_words: set[str] = set()
        for task in config.tasks:
            train_file, test_file = file_names(task)
            for split, file in (("train", train_file), ("iid_test", test_file)):
                for i, story in enumerate(read_stories(directory / file)):
                    target = "iid_valid" if split == "train" and i % config.valid_every == 0 else split
                    encoded[target].append((task, story))
                    for text, answer in story:
                        vocab_words.update(words(text) + (answer or []))
        self.vocab = Vocabulary([NULL, *sorted(vocab_words)])
        self.splits = {name: self._encode(stories if name == "train" else interleave(stories))
                       for name, stories in encoded.items()}

    def _encode(self, stories) -> BabiSplit:
        rows, targets = [], []
        for _, story in stories:
            row, target = [], []
            for text, answer in story:
                ids = self.vocab.encode(words(text))
                row += ids
                target += [IGNORE] * len(ids)
                if answer is not None:
                    row += [0] * (self.config.think_steps + len(answer))
                    target += [IGNORE] * self.config.think_steps + self.vocab.encode(answer)
            rows.append(row)
            targets.append(target)
        width = max((len(r) for r in rows), default=1)
        tokens = torch.zeros(len(rows), width, dtype=torch.long)
        wanted = torch.full((len(rows), width), IGNORE, dtype=torch.long)
        for i, (row, target) in enumerate(zip(rows, targets)):
            tokens[i, : len(row)] = torch.tensor(row)
            wanted[i, : len(target)] = torch.tensor(target)
        return BabiSplit(tokens, wanted, torch.tensor([t for t, _ in stories], dtype=torch.long),
                         torch.tensor([len(r) for r in rows], dtype=torch.long))

    @property
    def split_names(self) -> list[str]:
        return list(self.splits)

    @property
    def max_length(self) -> int:
        return max(s.tokens.shape[1] for s in self.splits.values())

    def check_model(self, model_config) -> None:
        if getattr(model_config, "io", "tokens") != "tokens":
            raise SglabError("task babi feeds word tokens: set model.io=tokens")

    @staticmethod
    def _rows(split: BabiSplit, index: torch.Tensor) -> Batch:
        used = int(split.lengths[index].max()) if len(index) else 0
        return Batch(split.tokens[index, :used], split.targets[index, :used])

    def train_batch(self, batch_size: int, generator: torch.Generator) -> Batch:
        train = self.splits["train"]
        return self._rows(train, torch.randint(len(train.tokens), (batch_size,), generator=generator))

    def eval_batches(self, split: str, batch_size: int,
                     max_examples: int | None = None) -> Iterator[Batch]:
        """The first ``max_examples`` stories (every task in turn), batched by length: the
        en-10k stories range from tens to hundreds of words, and the scores are sums, so the
        order only changes the padding. Each story carries its bAbI task number."""
        if split not in self.splits:
            raise SglabError(f"task babi has no split {split!r}; splits: {', '.join(self.splits)}")
        data = self.splits[split]
        n = len(data.tokens) if max_examples is None else min(len(data.tokens), max_examples)
        for index in torch.argsort(data.lengths[:n], stable=True).split(batch_size):
            yield replace(self._rows(data, index), examples={"task": data.task[index]})

    def score(self, logits: torch.Tensor, batch: Batch) -> dict:
        """Answer-word loss, and per story its wrong and scored answer words."""
        logits, targets = logits.cpu(), batch.targets.cpu()
        scored = targets != IGNORE
        return {"loss": float(F.cross_entropy(logits[scored], targets[scored], reduction="sum")),
                "count": int(scored.sum()),
                "wrong": ((logits.argmax(-1) != targets) & scored).sum(1).float(),
                "scored": scored.sum(1).float(), "task": batch.examples["task"]}

    def finalize(self, split: str, totals: dict) -> dict[str, float]:
        """``exact_match`` (share of answer words right), loss, error per bAbI task."""
        wrong = torch.zeros(21).index_add_(0, totals["task"], totals["wrong"])
        total = torch.zeros(21).index_add_(0, totals["task"], totals["scored"])
        metrics = {f"{split}/exact_match": 1 - float(wrong.sum() / total.sum().clamp_min(1)),
                   f"{split}/loss": totals["loss"] / max(totals["count"], 1)}
        for task in self.config.tasks:
            if total[task] > 0:
                metrics[f"{split}/error/task={task}"] = float(wrong[task] / total[task])
        return metrics


@registry.register("task", "babi", BabiConfig, "bAbI QA (en-10k v1.2, local files), story as one sequence")
def make_babi(config: BabiConfig) -> BabiTask:
    return BabiTask(config)


__all__ = ["BabiTask", "TASK_NAMES", "file_names", "interleave", "read_stories",
           "require_files", "words"]
