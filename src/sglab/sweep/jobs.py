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
from sglab.io import print_line
from sglab.train.ensemble_cost import (
    MAX_ENSEMBLE_MEMBERS,
    count_parameters,
    ensembles_pay_off,
    estimated_member_bytes,
    member_tokens_per_step,
    members_for_memory,
)


def available_cores() -> int:
    """CPU cores this process may use (respects CPU affinity, e.g. in containers)."""
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except AttributeError:  # not on Linux
        return max(os.cpu_count() or 1, 1)


def gpu_member_limits(configs: list[RunConfig], workers: int,
                      printer=print) -> dict[str, int] | int:
    """Ensemble sizes for a sweep on a GPU: per ensemble key, as many members as fit in the
    free GPU memory shared by ``workers`` (estimated from one member's parameters and
    tokens per step, :func:`estimated_member_bytes`). On a CPU: ``MAX_ENSEMBLE_MEMBERS``."""
    import torch

    from sglab.train.ensemble import ensemble_key

    if not torch.cuda.is_available() or not any(c.train.device != "cpu" for c in configs):
        return MAX_ENSEMBLE_MEMBERS
    budget = int(0.8 * torch.cuda.mem_get_info()[0] / max(workers, 1))
    limits: dict[str, int] = {}
    for config in configs:
        key = ensemble_key(config)
        if key is None or key in limits or not ensembles_pay_off(config):
            continue
        parameters = count_parameters(config)
        member = estimated_member_bytes(config, parameters, member_tokens_per_step(config))
        limits[key] = members_for_memory(member, budget)
        printer(f"sweep: {config.model.name} ({parameters:,} parameters, ~{member / 2**20:.0f} "
                f"MiB a member): up to {limits[key]} members per ensemble in "
                f"{budget / 2**30:.1f} GiB of GPU memory per worker")
    return limits


def executions(configs: list[RunConfig], ensemble: bool) -> list[str]:
    """How a sweep trains each config: as an ensemble member when another config of the
    sweep shares its :func:`ensemble_key` and ensembles pay off on its device
    (:func:`ensembles_pay_off`; also when the planner then splits the group so that a job
    holds one member), else alone. It depends on the sweep's configs and the device kind,
    never on the number of workers, and so does every run id."""
    from sglab.train.ensemble import ensemble_key

    keys: list[str | None] = []
    for config in configs:
        key = ensemble_key(config) if ensemble else None
        # only then ensembles_pay_off, which may build the task to count a step's tokens
        keys.append(key if key is not None and ensembles_pay_off(config) else None)
    sizes = Counter(key for key in keys if key is not None)
    return ["ensemble" if key is not None and sizes[key] > 1 else "alone" for key in keys]


def sweep_run_ids(configs: list[RunConfig], ensemble: bool,
                  modes: list[str] | None = None) -> list[str]:
    """The run id each config of a sweep trains under (see :func:`executions`; ``modes``:
    their result, when the caller has it already)."""
    from sglab.train.loop import execution_run_id

    modes = executions(configs, ensemble) if modes is None else modes
    return [execution_run_id(config, execution) for config, execution in zip(configs, modes)]


def _is_finished(run_id: str, runs_dir: Path) -> bool:
    import json

    path = runs_dir / run_id / "summary.json"
    try:
        return json.loads(path.read_text()).get("status") == "finished"
    except (OSError, ValueError):
        return False


def plan_jobs(configs: list[RunConfig], runs_dir: str | Path, ensemble: bool = True,
              min_jobs: int = 1,
              max_members: int | dict[str, int] = MAX_ENSEMBLE_MEMBERS) -> list[list[int]]:
    """Group config indices into jobs.

    Unfinished runs with equal :func:`ensemble_key` form ensembles of at most
    ``max_members`` (one number, or one per ensemble key: :func:`gpu_member_limits`); the
    largest ensembles are split until there are at least
    ``min_jobs`` jobs (so that every worker has work). Finished runs become jobs of
    their own (they are only re-recorded, which is instant). Jobs come biggest first
    (:func:`expected_work`), finished ones last.
    """
    from sglab.train.ensemble import ensemble_key

    runs_dir = Path(runs_dir)
    groups: dict[str, list[int]] = {}
    jobs: list[list[int]] = []
    run_ids, modes = sweep_run_ids(configs, ensemble), executions(configs, ensemble)
    finished = [_is_finished(run_id, runs_dir) for run_id in run_ids]
    for i, config in enumerate(configs):
        if modes[i] == "alone" or finished[i]:
            jobs.append([i])
        else:
            groups.setdefault(ensemble_key(config), []).append(i)
    if isinstance(max_members, dict):  # per group (e.g. sized for GPU memory)
        limits = {key: max_members.get(key, MAX_ENSEMBLE_MEMBERS) for key in groups}
    else:
        limits = {key: max_members for key in groups}
    for key, members in groups.items():
        n_chunks = -(-len(members) // limits[key])
        if n_chunks > 1:  # split anyway: into a multiple of the workers, so none idles
            n_chunks = -(-n_chunks // min_jobs) * min_jobs
        jobs.extend(members[c::n_chunks] for c in range(n_chunks))
    while jobs and len(jobs) < min_jobs:
        largest = max(jobs, key=len)
        if len(largest) < 2:
            break
        jobs.remove(largest)
        jobs.extend([largest[: len(largest) // 2], largest[len(largest) // 2:]])
    # longest first, so that the last job to start is a short one (ties: config order)
    work = [0 if done else expected_work(config) for done, config in zip(finished, configs)]
    return sorted(jobs, key=lambda job: (-sum(work[i] for i in job), job[0]))


def expected_work(config: RunConfig) -> int:
    """A rough size of a run's training, by which a sweep starts its biggest jobs first
    (workers take jobs in order; with the biggest last, one worker trains it alone at the
    end while the others idle): steps x batch rows x layer applications per step
    (``model.n_layers``, the shared layer's training steps for the NDR; 1 for a model
    without layers). It ignores width and sequence length, which vary less within one
    experiment than steps and depth do."""
    layers = getattr(config.model, "n_layers", None) or 1
    return config.train.steps * config.train.batch_size * layers


NOT_STARTED = "not started"  # the status of a job's runs when its sweep was interrupted first


def out_of_memory_hint(exc: BaseException) -> str:
    """What to do about an out-of-memory error (torch's CUDA or CPU allocator), else ''."""
    text = str(exc).lower()
    if isinstance(exc, MemoryError) or "out of memory" in text or "not enough memory" in text:
        return ("; the batch did not fit in memory: lower train.batch_size (and "
                "train.eval_batch_size) or the model size, then rerun")
    return ""


def _quiet_on_closed_output():
    """A printer to stdout that falls silent once stdout is closed (a sweep piped to ``head``):
    a run must not fail because nobody reads its progress lines."""
    closed = False

    def printer(line: str) -> None:
        nonlocal closed
        if closed:
            return
        try:
            print_line(line)
        except BrokenPipeError:
            closed = True

    return printer


def run_job(config_data: list[dict], runs_dir: str, threads: int | None, tag: str | None,
            quiet: bool, execution: str = "alone") -> list[dict]:
    """Train one job in this process; returns one summary per run. ``execution`` (see
    :func:`executions`): ``ensemble`` trains the configs as members of one ensemble, even
    a job of one; ``alone`` trains each as a lone run."""
    import torch

    from sglab.config import validate
    from sglab.errors import RunBusyError, SglabError
    from sglab.store import RunStore
    from sglab.train.ensemble import EnsembleTrainer
    from sglab.train.extend import extend_shorter_twin
    from sglab.train.loop import Trainer
    from sglab.train.schedule import stop_requested

    if threads:
        torch.set_num_threads(threads)
    configs = [validate(RunConfig, data) for data in config_data]
    printer = None if quiet else _quiet_on_closed_output()
    store = RunStore(runs_dir)
    trainers = [Trainer(c, runs_dir, store=store, printer=printer, tag=tag, execution=execution)
                for c in configs]
    if stop_requested():  # the sweep was interrupted before this job started: leave it
        return [{"run_id": t.run_id, "status": NOT_STARTED} for t in trainers]
    try:
        if execution == "alone":
            for trainer in trainers:  # a finished shorter twin: train it on, not from step 0
                twin = extend_shorter_twin(runs_dir, trainer.config)
                if twin and printer:
                    printer(f"[{trainer.run_id}] extends the finished run {twin}")
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
                       "error": f"{type(exc).__name__}: {exc}" + out_of_memory_hint(exc),
                       "traceback": traceback.format_exc()}
            try:
                trainer.run_dir.mkdir(parents=True, exist_ok=True)
                trainer._write_summary(summary)
            except (OSError, SglabError):  # e.g. a dangling link or a full disk: report it
                pass
            summaries.append(summary)
        return summaries


def describe_jobs(jobs: list[list[int]]) -> str:
    ensembles = [job for job in jobs if len(job) > 1]
    if not ensembles:
        return f"{len(jobs)} job(s), no ensembles"
    sizes = sorted({len(job) for job in ensembles})
    return (f"{len(jobs)} job(s): {len(ensembles)} ensemble(s) of "
            f"{'/'.join(map(str, sizes))} runs, {len(jobs) - len(ensembles)} single run(s)")


def target_value(summary: dict) -> tuple[str | None, float | None]:
    """The run's target metric (summaries before it was recorded: ``test/exact_match``)
    and its value at the last evaluation."""
    metric = summary.get("target_metric", "test/exact_match")
    return metric, (summary.get("final") or {}).get(metric) if metric else None


def summary_line(summary: dict) -> str:
    metric, value = target_value(summary)
    shown = f" {metric} {value:.4f}" if isinstance(value, (int, float)) else ""
    if summary.get("status") == "failed" and summary.get("error"):
        shown += f" ({summary['error'].splitlines()[0]})"
    return f"{summary.get('run_id')} {summary.get('status')}{shown}"
