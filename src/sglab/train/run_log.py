"""Where a run's records go while it trains: ``metrics.jsonl`` always, and TensorBoard
event files in ``<run>/tensorboard/`` when ``$SGLAB_TENSORBOARD`` is on (``sglab
--tensorboard ...`` sets it for the workers it starts).

TensorBoard is a view, not a record: the run id does not depend on it, ``metrics.jsonl``
stays the run's one source of truth, and a resumed run drops the events its checkpoint
did not keep (``purge_step``), as ``metrics.jsonl`` is cut back to the checkpoint.
Event files need the optional extra ``sglab[tensorboard]`` (tensorboardX).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from sglab.errors import SglabError
from sglab.io import json_line

ENV = "SGLAB_TENSORBOARD"


def tensorboard_on() -> bool:
    """Whether runs write TensorBoard event files (``$SGLAB_TENSORBOARD`` 1/true/on)."""
    value = os.environ.get(ENV, "").strip().lower()
    if value in ("", "0", "false", "off", "no"):
        return False
    if value in ("1", "true", "on", "yes"):
        return True
    raise SglabError(f"${ENV}={os.environ[ENV]!r} is not a switch; set it to 1 (write "
                     "TensorBoard event files) or 0 (do not), or unset it")


def _summary_writer(log_dir: Path, purge_step: int | None):
    try:
        from tensorboardX import SummaryWriter
    except ImportError as error:
        raise SglabError(f"${ENV} is on but tensorboardX is not installed ({error}); install "
                         "the extra: pip install 'sglab[tensorboard]', or unset "
                         f"${ENV}") from None
    # one event file per start of the run (two starts within a second must not share one)
    return SummaryWriter(str(log_dir), purge_step=purge_step, flush_secs=30,
                         filename_suffix=f".{os.getpid()}.step{purge_step or 0}")


class RunLog:
    """Appends a run's records to ``metrics.jsonl`` (and, when on, to TensorBoard).

    ``step``: the step the run starts or resumes from."""

    def __init__(self, metrics_path: Path, step: int, tensorboard: bool | None = None):
        on = tensorboard_on() if tensorboard is None else tensorboard
        # a resumed run keeps the records up to its checkpoint's step and drops the rest
        purge = step + 1 if step else None
        self.writer = _summary_writer(metrics_path.parent / "tensorboard", purge) if on else None
        self.file = metrics_path.open("a")

    def write(self, record: dict) -> None:
        self.file.write(json_line(record) + "\n")
        self.file.flush()
        if self.writer is not None:
            step = record["step"]
            for key, value in record.items():
                if (key != "step" and isinstance(value, int | float)
                        and not isinstance(value, bool) and math.isfinite(value)):
                    self.writer.add_scalar(key, value, step)

    def close(self) -> None:
        self.file.close()
        if self.writer is not None:
            self.writer.close()
