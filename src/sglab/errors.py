"""The one exception type for errors a user can cause."""


class SglabError(Exception):
    """A problem with user input (config, files, run ids, ...).

    The message says what was wrong and what to do. The CLI prints it without a
    traceback and exits with status 2.
    """


class RunBusyError(SglabError):
    """The run directory is held by another live process (see ``sglab.train.lock``)."""


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped training after a complete step; every run was checkpointed there."""

    def __init__(self, step: int, run_ids: list[str]):
        self.step, self.run_ids = step, run_ids
        how = (f"sglab train --resume {run_ids[0]}" if len(run_ids) == 1
               else "the same command (runs " + ", ".join(run_ids) + ")")
        super().__init__(f"interrupted at step {step}; resume with: {how}")
