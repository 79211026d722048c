"""The one exception type for errors a user can cause."""


class SglabError(Exception):
    """A problem with user input (config, files, run ids, ...).

    The message says what was wrong and what to do. The CLI prints it without a
    traceback and exits with status 2.
    """


class RunBusyError(SglabError):
    """The run directory is held by another live process (see ``sglab.train.lock``)."""


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped training after a complete step; every run was checkpointed there.

    Picklable (a pool worker's interruption reaches the sweep process that started it)."""

    def __init__(self, step: int, run_ids: list[str]):
        self.step, self.run_ids = step, list(run_ids)
        how = (f"sglab train --resume {run_ids[0]}" if len(run_ids) == 1
               else "the same command (runs " + ", ".join(run_ids) + ")")
        super().__init__(f"interrupted at step {step}; resume with: {how}")

    def __reduce__(self):
        return type(self), (self.step, self.run_ids)


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped a sweep: its running runs were checkpointed after their current step,
    the ones not started were left; rerunning the same command resumes them all."""

    def __init__(self, interrupted: list[str], not_started: int = 0):
        self.interrupted, self.not_started = list(interrupted), not_started
        parts = [f"{len(self.interrupted)} run(s) checkpointed"
                 + (f" ({', '.join(self.interrupted[:4])}"
                    + (f" and {len(self.interrupted) - 4} more" if len(self.interrupted) > 4 else "")
                    + ")" if self.interrupted else "")]
        if not_started:
            parts.append(f"{not_started} not started")
        super().__init__(f"interrupted: {', '.join(parts)}; resume with: the same command")

    def __reduce__(self):
        return type(self), (self.interrupted, self.not_started)
