"""Sweep jobs: which runs train together, and the function that trains one job.

A job is one run, or several runs trained as one ensemble (same shapes, differing only
in seed and scalar hyperparameters; see :mod:`sglab.train.ensemble`). Every backend
(local process pool, Ray) executes the same :func:`run_job`, so a job behaves the same
wherever it runs: finished runs are skipped, unfinished ones resume from their
checkpoints, and a failure is recorded in the run's summary instead of stopping the
other runs.
"""

from __future__ import annotations

import os
import traceback
from collections import Counter
from pathlib import Path

from sglab.config import RunConfig

MAX_ENSEMBLE_MEMBERS = 8


def available_cores() -> int:
    """CPU cores this process may use (respects CPU affinity, e.g. in containers)."""
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except AttributeError:  # not on Linux
        return max(os.cpu_count() or 1, 1)


def executions(configs: list[RunConfig], ensemble: bool) -> list[str]:
    """How a sweep trains each config: as an ensemble member when another config of the
    sweep shares its :func:`ensemble_key` (also when the planner then splits the group so
    that a job holds one member), else alone. It depends on the sweep's configs only,
    never on the number of workers, and so does every run id."""
    from sglab.train.ensemble import ensemble_key

    keys = [ensemble_key(config) if ensemble else None for config in configs]
    sizes = Counter(key for key in keys if key is not None)
    return ["ensemble" if key is not None and sizes[key] > 1 else "alone" for key in keys]


def sweep_run_ids(configs: list[RunConfig], ensemble: bool) -> list[str]:
    """The run id each config of a sweep trains under (see :func:`executions`)."""
    from sglab.train.loop import execution_run_id

    return [execution_run_id(config, execution)
            for config, execution in zip(configs, executions(configs, ensemble))]


def _is_finished(run_id: str, runs_dir: Path) -> bool:
    import json

    path = runs_dir / run_id / "summary.json"
    try:
        return json.loads(path.read_text()).get("status") == "finished"
    except (OSError, ValueError):
        return False


def plan_jobs(configs: list[RunConfig], runs_dir: str | Path, ensemble: bool = True,
              min_jobs: int = 1, max_members: int = MAX_ENSEMBLE_MEMBERS) -> list[list[int]]:
    """Group config indices into jobs.

    Unfinished runs with equal :func:`ensemble_key` form ensembles of at most
    ``max_members``; the largest ensembles are split until there are at least
    ``min_jobs`` jobs (so that every worker has work). Finished runs become jobs of
    their own (they are only re-recorded, which is instant).
    """
    from sglab.train.ensemble import ensemble_key

    runs_dir = Path(runs_dir)
    groups: dict[str, list[int]] = {}
    jobs: list[list[int]] = []
    run_ids, modes = sweep_run_ids(configs, ensemble), executions(configs, ensemble)
    for i, config in enumerate(configs):
        if modes[i] == "alone" or _is_finished(run_ids[i], runs_dir):
            jobs.append([i])
        else:
            groups.setdefault(ensemble_key(config), []).append(i)
    for members in groups.values():
        n_chunks = -(-len(members) // max_members)
        if n_chunks > 1:  # split anyway: into a multiple of the workers, so none idles
            n_chunks = -(-n_chunks // min_jobs) * min_jobs
        jobs.extend(members[c::n_chunks] for c in range(n_chunks))
    while jobs and len(jobs) < min_jobs:
        largest = max(jobs, key=len)
        if len(largest) < 2:
            break
        jobs.remove(largest)
        jobs.extend([largest[: len(largest) // 2], largest[len(largest) // 2:]])
    return sorted(jobs, key=lambda job: job[0])


def run_job(config_data: list[dict], runs_dir: str, threads: int | None, tag: str | None,
            quiet: bool, execution: str = "alone") -> list[dict]:
    """Train one job in this process; returns one summary per run. ``execution`` (see
    :func:`executions`): ``ensemble`` trains the configs as members of one ensemble, even
    a job of one; ``alone`` trains each as a lone run."""
    import torch

    from sglab.config import validate
    from sglab.errors import RunBusyError
    from sglab.store import RunStore
    from sglab.train.ensemble import EnsembleTrainer
    from sglab.train.loop import Trainer

    if threads:
        torch.set_num_threads(threads)
    configs = [validate(RunConfig, data) for data in config_data]
    printer = None if quiet else (lambda line: print(line, flush=True))
    store = RunStore(runs_dir)
    trainers = [Trainer(c, runs_dir, store=store, printer=printer, tag=tag, execution=execution)
                for c in configs]
    try:
        if execution == "alone":
            return [trainer.run(resume=True) for trainer in trainers]
        return EnsembleTrainer(configs, runs_dir, store=store, printer=printer, tag=tag).run()
    except RunBusyError as exc:  # another process trains it: leave its files alone
        return [{"run_id": t.run_id, "status": "busy", "error": str(exc)} for t in trainers]
    except Exception as exc:  # record and go on with the other jobs
        summaries = []
        for trainer in trainers:
            previous = trainer.read_summary() or {}
            if previous.get("status") == "finished":
                summaries.append(previous)
                continue
            summary = {"run_id": trainer.run_id, "status": "failed",
                       "error": f"{type(exc).__name__}: {exc}",
                       "traceback": traceback.format_exc()}
            trainer.run_dir.mkdir(parents=True, exist_ok=True)
            trainer._write_summary(summary)
            summaries.append(summary)
        return summaries


def describe_jobs(jobs: list[list[int]]) -> str:
    ensembles = [job for job in jobs if len(job) > 1]
    if not ensembles:
        return f"{len(jobs)} job(s), no ensembles"
    sizes = sorted({len(job) for job in ensembles})
    return (f"{len(jobs)} job(s): {len(ensembles)} ensemble(s) of "
            f"{'/'.join(map(str, sizes))} runs, {len(jobs) - len(ensembles)} single run(s)")


def summary_line(summary: dict) -> str:
    metric = (summary.get("final") or {}).get("test/exact_match")
    shown = f" test/exact_match {metric:.4f}" if metric is not None else ""
    if summary.get("status") == "failed" and summary.get("error"):
        shown += f" ({summary['error'].splitlines()[0]})"
    return f"{summary.get('run_id')} {summary.get('status')}{shown}"
