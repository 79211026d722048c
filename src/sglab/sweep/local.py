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
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

from sglab.config import RunConfig
from sglab.store import RunStore
from sglab.sweep.jobs import (
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
            for job, payload in zip(jobs, payloads):
                collect(job, run_job(payload, runs_dir, threads, tag, quiet, modes[job[0]]))
            return results  # type: ignore[return-value]
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(workers, mp_context=context, initializer=die_with_parent,
                                 initargs=(os.getpid(),)) as pool:
            futures = {pool.submit(run_job, payload, runs_dir, threads, tag, quiet,
                                   modes[job[0]]): job for job, payload in zip(jobs, payloads)}
            for future in as_completed(futures):
                collect(futures[future], future.result())
    return results  # type: ignore[return-value]
