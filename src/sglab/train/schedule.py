"""The training schedule, shared by lone runs and ensembles.

:func:`run_schedule` drives one or several runs step by step: learning rate, logging,
evaluation, model selection, early stop, checkpoints, snapshots and the final summary.
Only the optimizer step differs between a lone run and an ensemble; it is supplied as a
:class:`Stepper` (``Trainer`` uses ``LoneStep``, ``EnsembleTrainer`` a vmapped step
over stacked parameters). Each run's files are kept by its own :class:`Trainer`.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Protocol

import torch

from sglab.errors import TrainingInterrupted
from sglab.train.interrupt import first_ctrl_c
from sglab.train.run_log import RunLog

if TYPE_CHECKING:  # only for type hints: loop.py imports this module
    from sglab.train.loop import Trainer

Printer = Callable[[str], None]


def learning_rate(step: int, cfg) -> float:
    """Linear warmup, then cosine decay from lr to min_lr at the last step (nanoGPT)."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    if cfg.lr_schedule == "constant":
        return cfg.lr
    span = max(cfg.steps - cfg.warmup_steps, 1)
    progress = min((step - cfg.warmup_steps) / span, 1.0)
    return cfg.min_lr + 0.5 * (1 + math.cos(math.pi * progress)) * (cfg.lr - cfg.min_lr)


def format_seconds(seconds: float) -> str:
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}h{rest // 60:02d}m" if hours else f"{rest // 60}m{rest % 60:02d}s"


class RunProgress:
    """One run being trained: its Trainer (files), task, model, optimizer, data order,
    and how far it has come (step, best and target records, metric lines written)."""

    def __init__(self, trainer: Trainer, task, model: torch.nn.Module,
                 optimizer: torch.optim.Optimizer, generator: torch.Generator,
                 device: torch.device, norm_names: list[str]):
        self.trainer, self.task, self.model = trainer, task, model
        self.optimizer, self.generator, self.device = optimizer, generator, device
        self.cfg = trainer.config.train
        self.norm_names = norm_names
        self.step, self.elapsed, self.metric_lines = 0, 0.0, 0
        self.best: dict | None = None
        self.target: dict | None = None
        self.launched = time.perf_counter()
        self.base: dict = {}
        self.log: RunLog | None = None  # open while the run trains
        self.lr = 0.0
        self.window_loss = torch.zeros((), device=device)
        self.window_steps = 0
        self.window_tokens = 0
        self.train_tokens = 0  # tokens of the logged windows (for throughput)

    def write_record(self, record: dict) -> None:
        """Append one line to metrics.jsonl (counted, so a resume can cut back to it)."""
        self.log.write(record)
        self.metric_lines += 1

    def loss_problem(self, checked_every_step: bool) -> str | None:
        """Why training cannot go on (the training loss is nan or inf), or None.
        ``checked_every_step``: the loss was finite up to the previous step."""
        total = float(self.window_loss)  # syncs the device
        if math.isfinite(total):
            return None
        first = self.step - self.window_steps + 1
        where = (f"at step {self.step}" if self.window_steps == 1 or checked_every_step
                 else f"between steps {first} and {self.step}")
        clip = ("off" if self.cfg.grad_clip is None else f"{self.cfg.grad_clip:g}")
        return (f"training loss became {total} {where} (lr {self.lr:.3g}, grad_clip {clip}); "
                "the run stopped as failed. Lower train.lr, or set train.grad_clip (e.g. 1.0), "
                "and train again")

    @property
    def run_id(self) -> str:
        return self.trainer.run_id

    def seconds(self) -> float:
        """Seconds since launch, across resumes (time-to-target counts from launch)."""
        return time.perf_counter() - self.launched + self.elapsed

    def restored(self, state: dict | None) -> None:
        """Take the progress stored in a checkpoint (None: a fresh start)."""
        if state is not None:
            self.step, self.elapsed = state["step"], state["elapsed"]
            self.best, self.target = state.get("best"), state.get("target")
            self.metric_lines = state.get("metric_lines", 0)
            window = state.get("loss_window")
            if window is not None:  # the training-loss window that was open at the checkpoint
                self.window_loss = window["loss_sum"].to(self.device)
                self.window_steps, self.window_tokens = window["steps"], window["tokens"]
        self.launched = time.perf_counter()

    def window_state(self) -> dict:
        return {"loss_sum": self.window_loss.detach().cpu().clone(), "steps": self.window_steps,
                "tokens": self.window_tokens}

    def take_window(self) -> tuple[float, int, int]:
        """(mean loss, steps, tokens) since the last call; starts a new window."""
        mean = float(self.window_loss) / max(self.window_steps, 1)  # syncs the device
        taken = (mean, self.window_steps, self.window_tokens)
        self.window_loss.zero_()
        self.window_steps, self.window_tokens = 0, 0
        return taken


class Stepper(Protocol):
    """The part of training that differs between a lone run and an ensemble."""

    def step(self, runs: list[RunProgress], lrs: list[float]) -> tuple[list[torch.Tensor], list[int]]:
        """One optimizer step of every run; returns each run's loss (a detached scalar
        tensor) and the number of input tokens it trained on."""

    def sync(self, index: int) -> None:
        """Make ``runs[index].model`` and ``.optimizer`` hold the run's current state
        (before it is evaluated, checkpointed or snapshotted)."""

    def remove(self, indices: list[int]) -> None:
        """These runs (indices into the list last passed to :meth:`step`) have left."""


class _Throughput:
    """Training time and steps over the logged windows; evaluation and checkpoint time
    (``pause``) is left out."""

    def __init__(self):
        self.window_start = time.perf_counter()
        self.window_steps = 0
        self.paused = 0.0
        self.seconds = 0.0
        self.steps = 0

    def peek(self) -> tuple[float, int]:
        """(seconds, steps) of the window so far; it stays open."""
        return (max(time.perf_counter() - self.window_start - self.paused, 1e-9),
                self.window_steps)

    def close_window(self) -> tuple[float, int]:
        """(seconds, steps) of the window just ended; a new one starts."""
        seconds = max(time.perf_counter() - self.window_start - self.paused, 1e-9)
        steps = self.window_steps
        self.seconds += seconds
        self.steps += steps
        self.window_start, self.window_steps, self.paused = time.perf_counter(), 0, 0.0
        return seconds, steps

    def tokens_per_second(self, tokens: int) -> float | None:
        return tokens / self.seconds if self.seconds else None

    def steps_per_second(self) -> float | None:
        return self.steps / self.seconds if self.seconds else None


def run_schedule(runs: list[RunProgress], stepper: Stepper, printer: Printer,
                 ensemble_size: int | None = None) -> dict[str, dict]:
    """Train every run to its last step (or early stop); returns summaries by run id.

    Every run is prepared (:meth:`Trainer.prepare`: restored from its checkpoint, run
    directory started) and all runs stand at the same step. ``ensemble_size`` is written
    into the summaries of ensemble members. Ctrl-C stops after the current step with
    every run checkpointed there (:class:`TrainingInterrupted`); a second Ctrl-C stops at once.
    """
    return _Schedule(runs, stepper, printer, ensemble_size).run()


class _Schedule:
    def __init__(self, runs: list[RunProgress], stepper: Stepper, printer: Printer,
                 ensemble_size: int | None):
        self.active = list(runs)
        self.stepper, self.print = stepper, printer
        self.extra = {} if ensemble_size is None else {"ensemble_size": ensemble_size}
        self.clock = _Throughput()
        self.finished: dict[str, dict] = {}
        # on CPU the loss is checked after every step (reading it costs nothing), so a
        # non-finite loss is reported at its exact step; on a GPU at every log, evaluation
        # and checkpoint (where the device is synchronised anyway)
        self.check_every_step = bool(runs) and runs[0].device.type == "cpu"
        self.last_line = time.perf_counter()  # when progress was last printed

    def run(self) -> dict[str, dict]:
        self._leave([k for k, run in enumerate(self.active) if run.step >= run.cfg.steps],
                    lambda k, run: self._finish(run, stopped_early=False))  # summary not yet written
        try:
            for run in self.active:
                run.log = RunLog(run.trainer.metrics_path, run.step)
                if run.step == 0 and 0 in run.cfg.snapshot_steps:
                    run.trainer.snapshot(run.model, 0)
            with _stop_on_ctrl_c(self.print) as interrupted:
                while self.active:
                    self._step()
                    if interrupted.is_set() and self.active:
                        self._checkpoint_and_stop()
        finally:
            for run in self.active:
                if run.log is not None:
                    run.log.close()
        return self.finished

    def _leave(self, indices: list[int], then: Callable[[int, RunProgress], None]) -> None:
        """Runs ``indices`` of the active ones leave training; ``then(index, run)`` is
        called on each."""
        if not indices:
            return
        for k in indices:
            if self.active[k].log is not None:
                self.active[k].log.close()
            then(k, self.active[k])
        self.active = [run for k, run in enumerate(self.active) if k not in indices]
        self.stepper.remove(indices)

    def _finish(self, run: RunProgress, stopped_early: bool) -> None:
        self.finished[run.run_id] = run.trainer.finish(
            run.base, run.step, stopped_early, run.seconds(),
            self.clock.tokens_per_second(run.train_tokens), self.clock.steps_per_second(),
            run.best, run.target, **self.extra)

    def _fail(self, run: RunProgress, problem: str) -> None:
        self.print(f"[{run.run_id}] {problem}")
        self.finished[run.run_id] = run.trainer.fail(run.base, run.step, problem)

    def _step(self) -> None:
        active, clock = self.active, self.clock
        lrs = [learning_rate(run.step, run.cfg) for run in active]
        losses, tokens = self.stepper.step(active, lrs)
        for run, lr, loss, n in zip(active, lrs, losses, tokens):
            run.step += 1
            run.lr = lr
            run.window_loss += loss
            run.window_steps += 1
            run.window_tokens += n
        clock.window_steps += 1

        problems = {k: run.loss_problem(self.check_every_step) for k, run in enumerate(active)
                    if self.check_every_step or _bookkeeping_step(run)}
        problems = {k: problem for k, problem in problems.items() if problem is not None}
        self._leave(sorted(problems), lambda k, run: self._fail(run, problems[k]))
        active = self.active
        if not active:
            return

        logging = [run for run in active
                   if run.step % run.cfg.log_interval == 0 or run.step >= run.cfg.steps]
        if logging:
            _log(logging, clock, self.print, len(active))
            self.last_line = time.perf_counter()
        elif time.perf_counter() - self.last_line >= PROGRESS_SECONDS:
            _progress(active, clock, self.print)
            self.last_line = time.perf_counter()

        pause_start = time.perf_counter()
        leaving, stopped = [], set()
        for k, run in enumerate(active):
            last = run.step >= run.cfg.steps
            evaluate = run.step % run.cfg.eval_interval == 0 or last
            checkpoint = run.step % run.cfg.checkpoint_interval == 0 or last
            snapshot = run.step in run.cfg.snapshot_steps
            stop = False
            if evaluate or checkpoint or snapshot:
                self.stepper.sync(k)
            if snapshot:
                run.trainer.snapshot(run.model, run.step)
            if evaluate:
                run.best, run.target, stop = run.trainer.evaluation(run, last)
            if checkpoint or stop:
                run.trainer.save(run)
            if last or stop:
                leaving.append(k)
                if stop:
                    stopped.add(k)
        self._leave(leaving, lambda k, run: self._finish(run, k in stopped))
        clock.paused += time.perf_counter() - pause_start

    def _checkpoint_and_stop(self) -> None:
        for k, run in enumerate(self.active):
            self.stepper.sync(k)
            run.trainer.save(run)
            run.trainer.interrupted(run.base, run.step)
        raise TrainingInterrupted(self.active[0].step, [run.run_id for run in self.active])


_STOP_REQUESTED = threading.Event()
_RUNNING: list[threading.Event] = []  # the stop events of the schedules running now


def request_stop() -> None:
    """Stop every schedule of this process, running or still to come, after its current step
    with a checkpoint, as a first Ctrl-C does (:class:`TrainingInterrupted`). A sweep's pool
    workers call it when the sweep is interrupted (:mod:`sglab.sweep.local`); it only sets
    events, so a signal handler may call it."""
    _STOP_REQUESTED.set()
    for event in list(_RUNNING):
        event.set()


def stop_requested() -> bool:
    """Whether :func:`request_stop` was called in this process."""
    return _STOP_REQUESTED.is_set()


@contextmanager
def _stop_on_ctrl_c(printer: Printer) -> Iterator[threading.Event]:
    """An event set by the first Ctrl-C (SIGINT) or by :func:`request_stop`; the next Ctrl-C
    raises KeyboardInterrupt at once. Outside the main thread (where signals cannot be
    handled) only :func:`request_stop` sets it."""
    interrupted = threading.Event()
    if _STOP_REQUESTED.is_set():
        interrupted.set()
    _RUNNING.append(interrupted)
    try:
        with first_ctrl_c(interrupted, on_press=lambda: printer(
                "Ctrl-C: stopping after this step with a checkpoint (Ctrl-C again to stop at "
                "once)")):
            yield interrupted
    finally:
        _RUNNING.remove(interrupted)


def _bookkeeping_step(run: RunProgress) -> bool:
    """Whether this step of the run logs, evaluates, checkpoints or snapshots."""
    step, cfg = run.step, run.cfg
    return (step >= cfg.steps or step % cfg.log_interval == 0 or step % cfg.eval_interval == 0
            or step % cfg.checkpoint_interval == 0 or step in cfg.snapshot_steps)


#: Between two logged steps further apart than this many seconds, a progress line (printed
#: only; nothing is recorded) says how far the runs are.
PROGRESS_SECONDS = 60.0


def _progress(active: list[RunProgress], clock: _Throughput, printer: Printer) -> None:
    """Print where the runs stand between their logged steps, at the current window's rate."""
    seconds, steps = clock.peek()
    step, longest = active[0].step, max(run.cfg.steps for run in active)
    eta = format_seconds((longest - step) * seconds / max(steps, 1))
    who = f"[{active[0].run_id}]" if len(active) == 1 else f"[ensemble x{len(active)}]"
    printer(f"{who} step {step}/{longest} | {steps / seconds:.1f} steps/s | ETA {eta} (loss "
            f"logged every {min(run.cfg.log_interval for run in active)} steps)")


def _log(logging: list[RunProgress], clock: _Throughput, printer: Printer, n_active: int) -> None:
    """Print the progress line and append each run's training-loss record to metrics.jsonl."""
    seconds, steps = clock.close_window()
    windows = [run.take_window() for run in logging]
    tokens = sum(window[2] for window in windows)
    for run, window in zip(logging, windows):
        run.train_tokens += window[2]
        run.write_record({"kind": "train", "step": run.step, "train/loss": window[0],
                          "lr": run.lr, "seconds": round(run.seconds(), 3)})
    longest = max(run.cfg.steps for run in logging)
    step = logging[0].step
    eta = format_seconds((longest - step) * seconds / max(steps, 1))
    speed = f"{steps / seconds:.1f} steps/s {tokens / seconds / 1e3:.1f}k tok/s"
    if n_active == 1 and len(logging) == 1:
        printer(f"[{logging[0].run_id}] step {step}/{longest} loss {windows[0][0]:.4f} "
                f"lr {logging[0].lr:.2e} | {speed} | ETA {eta}")
    else:
        mean = sum(window[0] for window in windows) / len(windows)
        printer(f"[ensemble x{n_active}] step {step}/{longest} mean loss {mean:.4f} | {speed}, "
                f"{n_active * steps / seconds:.1f} member-steps/s | ETA {eta}")


__all__ = ["RunProgress", "Stepper", "format_seconds", "learning_rate", "request_stop",
           "run_schedule", "stop_requested"]
