"""A sweep's progress line: which of its runs are training, how far each has got.

Runs of a sweep with quiet trainers (or spread over workers) print nothing until they
finish, which for the longest ones can be an hour. While such a sweep runs, a background
thread (:class:`Heartbeat`) prints one line every so often, read from the run store: the
runs done, and each run written to since the sweep started and not done yet, with its
last evaluated step and its target metric there (its last evaluation in ``metrics.jsonl``).
Reading only files the runs already write, it works the same for every backend whose run
store this process can read.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from sglab.store import read_metrics

PROGRESS_SECONDS = 120.0  # how often a quiet sweep says where it stands
SHOWN_RUNS = 4  # runs named in one line; the rest are counted


def run_progress(run_dir: Path) -> str:
    """``step S/N`` and the target metric at the run's last evaluation, for one run (the
    steps and the metric's name from its ``summary.json``)."""
    try:
        evaluations = read_metrics(run_dir, while_training=True)
    except ValueError:  # a line caught half-written: no record this time
        evaluations = []
    try:
        summary = json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        summary = {}
    if not evaluations:
        return "starting"
    record, steps, target_metric = evaluations[-1], summary.get("steps"), summary.get("target_metric")
    text = f"step {record['step']:,}" + (f"/{steps:,}" if isinstance(steps, int) else "")
    value = record.get(target_metric) if target_metric else None
    if isinstance(value, (int, float)):
        text += f" {target_metric} {value:.3f}"
    return text


def _written_since(run_dir: Path, since: float) -> bool:
    for name in ("metrics.jsonl", "summary.json"):
        try:
            if (run_dir / name).stat().st_mtime >= since:
                return True
        except OSError:
            continue
    return False


def progress_line(run_ids: Iterable[str], runs_dir: str | Path, done: int, total: int,
                  started: float, prefix: str = "sweep") -> str:
    """One line for a sweep: ``run_ids`` are the runs not yet done; those written to since
    ``started`` (a ``time.time()``) are the ones training."""
    runs_dir = Path(runs_dir)
    training = [run_id for run_id in run_ids if _written_since(runs_dir / run_id, started)]
    minutes = (time.time() - started) / 60
    line = f"{prefix}: {done}/{total} done after {minutes:.1f} min"
    if not training:
        return line + ", nothing has written a record yet"
    shown = [f"{run_id} {run_progress(runs_dir / run_id)}" for run_id in training[:SHOWN_RUNS]]
    more = len(training) - SHOWN_RUNS
    return (line + f"; training: {'; '.join(shown)}"
            + (f"; and {more} more" if more > 0 else ""))


class Heartbeat:
    """A daemon thread that prints ``line()`` every ``seconds`` until the block ends.

    ``with Heartbeat(print, make_line, 120): ...``; a failing ``line`` is reported once
    and stops the heartbeat, never the sweep."""

    def __init__(self, printer: Callable[[str], None], line: Callable[[], str],
                 seconds: float = PROGRESS_SECONDS):
        self.printer, self.line, self.seconds = printer, line, seconds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="sglab-sweep-progress",
                                        daemon=True)

    def _beat(self) -> None:
        while not self._stop.wait(self.seconds):
            try:
                self.printer(self.line())
            except Exception as error:  # noqa: BLE001 - progress must never stop a sweep
                self.printer(f"sweep: progress line failed ({error}); no more of them")
                return

    def __enter__(self) -> Heartbeat:
        if self.seconds and self.seconds > 0:
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
