"""Run many configs: in this process (one worker) or a pool of worker processes.

Finished runs are skipped and unfinished ones resume from their checkpoints, so a
killed sweep is continued by running it again. Each worker uses ``threads``
intra-op threads; on small CPU models several single-threaded workers beat one
multi-threaded process, and OpenMP spin-waiting is turned off
(``OMP_WAIT_POLICY=PASSIVE``) so busy neighbours do not stall each other.
"""

from __future__ import annotations

import multiprocessing
import os
import traceback
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

from sglab.config import RunConfig
from sglab.store import RunStore
from sglab.train.loop import Trainer


def default_workers() -> int:
    return max(os.cpu_count() or 1, 1)


def plan_threads(workers: int, threads: int | None) -> int:
    """Intra-op threads per worker: the cores divided among the workers unless given."""
    if threads:
        return threads
    return max((os.cpu_count() or 1) // max(workers, 1), 1)


def _run_one(config_data: dict, runs_dir: str, threads: int, tag: str | None,
             quiet: bool) -> dict:
    import torch

    from sglab.config import RunConfig, validate

    torch.set_num_threads(threads)
    config = validate(RunConfig, config_data)
    printer = (lambda line: None) if quiet else (lambda line: print(line, flush=True))
    trainer = Trainer(config, runs_dir, store=RunStore(runs_dir), printer=printer, tag=tag)
    try:
        return trainer.run(resume=True)
    except Exception as exc:  # record and go on with the other runs
        summary = {"run_id": trainer.run_id, "status": "failed",
                   "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
        trainer.run_dir.mkdir(parents=True, exist_ok=True)
        trainer._write_summary(summary)
        return summary


def run_configs(configs: list[RunConfig], runs_dir: str | Path, workers: int | None = None,
                threads: int | None = None, tag: str | None = None, quiet: bool = False,
                printer=print) -> list[dict]:
    """Train every config (skipping finished ones); returns summaries in input order."""
    runs_dir = str(runs_dir)
    workers = min(workers or default_workers(), max(len(configs), 1))
    threads = plan_threads(workers, threads)
    printer(f"sweep: {len(configs)} runs, {workers} worker(s) x {threads} thread(s)")
    RunStore(runs_dir).ensure()
    if workers == 1:
        return [_run_one(c.to_dict(), runs_dir, threads, tag, quiet) for c in configs]
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    results: list[dict | None] = [None] * len(configs)
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(workers, mp_context=context) as pool:
        futures = {pool.submit(_run_one, c.to_dict(), runs_dir, threads, tag, quiet): i
                   for i, c in enumerate(configs)}
        for done, future in enumerate(as_completed(futures), 1):
            index = futures[future]
            results[index] = summary = future.result()
            status = summary.get("status")
            metric = (summary.get("final") or {}).get("test/exact_match")
            shown = f" test/exact_match {metric:.4f}" if metric is not None else ""
            printer(f"sweep: {done}/{len(configs)} done: {summary['run_id']} {status}{shown}")
    return results  # type: ignore[return-value]
