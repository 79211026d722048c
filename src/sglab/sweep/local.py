"""Run many configs on this machine: in this process (one worker) or a process pool.

Finished runs are skipped and unfinished ones resume from their checkpoints, so a
killed sweep is continued by running it again. Compatible runs train together as
ensembles (see :mod:`sglab.sweep.jobs`) unless ``ensemble=False``.

Placement: small CPU models use one core badly with several threads, and two-thread
OpenMP stalls when a neighbour process is busy, so the default is one single-threaded
worker per available core (fewer when there are fewer jobs, each then getting the
spare cores as threads). OpenMP spin-waiting is turned off (``OMP_WAIT_POLICY=PASSIVE``)
so busy neighbours do not stall each other. ``workers`` / ``threads`` override it.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from contextlib import contextmanager, suppress
from pathlib import Path

from sglab.config import RunConfig
from sglab.errors import SweepInterrupted, TrainingInterrupted
from sglab.store import RunStore
from sglab.sweep.jobs import (
    NOT_STARTED,
    available_cores,
    describe_jobs,
    executions,
    gpu_member_limits,
    plan_jobs,
    run_job,
    summary_line,
    sweep_run_ids,
)
from sglab.sweep.progress import PROGRESS_SECONDS, Heartbeat, progress_line
from sglab.train.interrupt import first_ctrl_c

_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


def die_with_parent(parent_pid: int) -> None:
    """Make this (worker) process end when the process ``parent_pid`` ends, even by SIGKILL.

    On Linux the kernel sends SIGKILL on the parent's death (``prctl(PR_SET_PDEATHSIG)``);
    elsewhere a watchdog thread checks the parent once a second. A worker killed this way
    leaves its run as a SIGKILL would: resumable from its last checkpoint.
    """
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0:
            if os.getppid() != parent_pid:  # the parent died before prctl took effect
                os._exit(1)
            return

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, name="sglab-parent-watchdog", daemon=True).start()


def plan_placement(n_jobs: int, workers: int | None = None,
                   threads: int | None = None) -> tuple[int, int, str]:
    """(workers, threads per worker, why) for ``n_jobs`` jobs on this machine."""
    cores = available_cores()
    if workers is None:
        workers = max(min(cores, n_jobs), 1)
        why = f"{cores} core(s): one worker per core"
    else:
        why = "workers given"
    if threads is None:
        threads = max(cores // workers, 1)
    else:
        why += ", threads given"
    return workers, threads, why


def run_configs(configs: list[RunConfig], runs_dir: str | Path, workers: int | None = None,
                threads: int | None = None, tag: str | None = None, quiet: bool = False,
                printer=print, ensemble: bool = True,
                progress_seconds: float = PROGRESS_SECONDS) -> list[dict]:
    """Train every config (skipping finished ones); returns summaries in input order.
    No configs (an analysis-only experiment): a no-op returning ``[]``. With ``quiet``
    trainers a progress line (:mod:`sglab.sweep.progress`) comes every
    ``progress_seconds`` (0: never)."""
    if not configs:
        return []
    runs_dir = str(runs_dir)
    cores = available_cores()
    jobs = plan_jobs(configs, runs_dir, ensemble=ensemble, min_jobs=workers or cores,
                     max_members=gpu_member_limits(configs, workers or 1, printer))
    workers, threads, why = plan_placement(len(jobs), workers, threads)
    printer(f"sweep: {len(configs)} runs as {describe_jobs(jobs)}; "
            f"{workers} worker(s) x {threads} thread(s) ({why})")
    RunStore(runs_dir).ensure()
    results: list[dict | None] = [None] * len(configs)
    payloads = [[configs[i].to_dict() for i in job] for job in jobs]
    modes = executions(configs, ensemble)
    run_ids = sweep_run_ids(configs, ensemble, modes)
    done, started = 0, time.time()

    def collect(job, summaries):
        nonlocal done
        for index, summary in zip(job, summaries):
            results[index] = summary
            done += 1
            printer(f"sweep: {done}/{len(configs)} done: {summary_line(summary)}")

    def progress() -> str:
        return progress_line([run_id for run_id, result in zip(run_ids, results) if result is None],
                             runs_dir, done, len(configs), started)

    with Heartbeat(printer, progress, progress_seconds if quiet else 0):
        if workers == 1:
            for k, (job, payload) in enumerate(zip(jobs, payloads)):
                try:
                    summaries = run_job(payload, runs_dir, threads, tag, quiet, modes[job[0]])
                except TrainingInterrupted as exc:  # rerunning the sweep resumes every run
                    raise SweepInterrupted(exc.run_ids,
                                           sum(len(j) for j in jobs[k + 1:])) from None
                collect(job, summaries)
            return results  # type: ignore[return-value]
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(workers, mp_context=context, initializer=start_worker,
                                 initargs=(os.getpid(),)) as pool:
            with _spawning_ignores_ctrl_c():
                futures = {pool.submit(run_job, payload, runs_dir, threads, tag, quiet,
                                       modes[job[0]]): job for job, payload in zip(jobs, payloads)}
            _collect_pool(pool, futures, collect, printer, run_ids)
    return results  # type: ignore[return-value]


def start_worker(parent_pid: int) -> None:
    """Set up a pool worker: it dies with the sweep process (:func:`die_with_parent`), and a
    Ctrl-C (SIGINT, which the terminal sends to every process of the sweep) or the sweep's
    SIGUSR1 asks it to stop after the current step with a checkpoint
    (:func:`sglab.train.schedule.request_stop`) instead of killing it, idle or not."""
    from sglab.train.schedule import request_stop

    die_with_parent(parent_pid)
    for signum in (signal.SIGINT, signal.SIGUSR1):
        signal.signal(signum, lambda *_: request_stop())


@contextmanager
def _spawning_ignores_ctrl_c() -> Iterator[None]:
    """Ignore SIGINT while the pool spawns its workers (they start on ``submit``): a spawned
    process inherits the ignoring, so a Ctrl-C while a worker still imports cannot kill it
    (which would break the pool) before :func:`start_worker` installs its handler."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _collect_pool(pool: ProcessPoolExecutor, futures: dict, collect, printer,
                  run_ids: list[str]) -> None:
    """Hand each job's summaries to ``collect`` as its future completes. On Ctrl-C the jobs
    not started are cancelled, every worker is told to stop after its current step with a
    checkpoint (SIGUSR1, for a SIGINT sent to this process alone), and once they have, a
    :class:`SweepInterrupted` says how to resume."""
    pending = set(futures)
    interrupted: list[str] = []
    not_started = 0
    with first_ctrl_c() as pressed:
        stopping = False
        while pending:
            done, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
            if pressed.is_set() and not stopping:
                stopping = True
                printer("Ctrl-C: every worker stops after its current step with a checkpoint; "
                        "jobs not started are left (Ctrl-C again to stop at once)")
                for future in list(pending):
                    if future.cancel():
                        pending.discard(future)
                        not_started += len(futures[future])
                for pid in list(getattr(pool, "_processes", None) or {}):
                    with suppress(OSError):
                        os.kill(pid, signal.SIGUSR1)
            for future in done:
                job = futures[future]
                try:
                    summaries = future.result()
                except TrainingInterrupted as exc:
                    interrupted += exc.run_ids
                    continue
                except KeyboardInterrupt:  # stopped at once (a second Ctrl-C in the worker)
                    interrupted += [run_ids[i] for i in job]
                    continue
                left = [s for s in summaries if s.get("status") == NOT_STARTED]
                not_started += len(left)
                if not left:
                    collect(job, summaries)
    if stopping or interrupted or not_started:  # (a worker alone may have been interrupted)
        raise SweepInterrupted(interrupted, not_started)
