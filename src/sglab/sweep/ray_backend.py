"""Run a sweep's or an experiment's jobs as Ray tasks (``sglab sweep|run ... --backend ray
[--address ADDR]``).

The same job plan and the same job function as the local backend
(:mod:`sglab.sweep.jobs`): each job (a run or an ensemble) is one Ray task asking for
its threads as CPUs (and a GPU when the runs train on CUDA, see :func:`wants_gpu`).
Results go to the run store at ``runs_dir``, which must be a path every Ray node can write
(a shared file system on a cluster). A task whose worker dies is retried by Ray, and the retry
resumes from the runs' last checkpoints. Ray is an optional extra:
``pip install 'sglab[ray]'``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sglab.config import RunConfig
from sglab.errors import SglabError
from sglab.store import RunStore
from sglab.sweep.jobs import describe_jobs, executions, plan_jobs, run_job, summary_line, sweep_run_ids
from sglab.sweep.progress import PROGRESS_SECONDS, progress_line


def import_ray():
    try:
        import ray
    except ImportError:
        raise SglabError("the Ray backend needs Ray: pip install 'sglab[ray]' "
                         "(or pip install ray), then rerun with --backend ray") from None
    return ray


@contextmanager
def ray_session(address: str | None = None, log_to_driver: bool = False) -> Iterator[None]:
    """Connect to Ray for the block (a cluster at ``address``, else a local instance) and
    disconnect after it; inside a connection that is already open, just use that one."""
    ray = import_ray()
    if ray.is_initialized():
        yield
        return
    ray.init(address=address, include_dashboard=False, log_to_driver=log_to_driver,
             configure_logging=False)
    try:
        yield
    finally:
        ray.shutdown()


def wants_gpu(config: RunConfig, cluster_gpus: int) -> bool:
    """A job asks Ray for a GPU when its runs train on CUDA: ``train.device=cuda``, or
    ``auto`` (the default) on a cluster that has GPUs. Without the request Ray hides every GPU
    from the task, and an ``auto`` run would train on the CPU."""
    return config.train.device == "cuda" or (config.train.device == "auto" and cluster_gpus > 0)


def run_configs_ray(configs: list[RunConfig], runs_dir: str | Path, address: str | None = None,
                    threads: int | None = None, tag: str | None = None, quiet: bool = True,
                    printer=print, ensemble: bool = True, max_retries: int = 3,
                    poll_seconds: float = 10.0,
                    progress_seconds: float = PROGRESS_SECONDS) -> list[dict]:
    """Train every config on a Ray cluster (or a local Ray instance when address is None)."""
    if not configs:
        return []
    ray = import_ray()
    runs_dir = str(Path(runs_dir).resolve())
    RunStore(runs_dir).ensure()
    with ray_session(address, log_to_driver=not quiet):
        resources = ray.cluster_resources()
        cluster_cpus, cluster_gpus = int(resources.get("CPU", 1)), int(resources.get("GPU", 0))
        threads = threads or 1
        jobs = plan_jobs(configs, runs_dir, ensemble=ensemble,
                         min_jobs=max(cluster_cpus // threads, 1))
        printer(f"sweep (ray): {len(configs)} runs as {describe_jobs(jobs)}; "
                f"{cluster_cpus} CPU(s) and {cluster_gpus} GPU(s) in the cluster, {threads} CPU(s) "
                "per job" + (", one GPU per CUDA job" if cluster_gpus else ""))
        remote = ray.remote(run_job)
        modes = executions(configs, ensemble)
        run_ids = sweep_run_ids(configs, ensemble, modes)
        pending = {}
        for job in jobs:
            gpus = 1 if any(wants_gpu(configs[i], cluster_gpus) for i in job) else 0
            options = remote.options(num_cpus=threads, num_gpus=gpus, max_retries=max_retries,
                                     retry_exceptions=False)
            ref = options.remote([configs[i].to_dict() for i in job], runs_dir, threads, tag, quiet,
                                 modes[job[0]])
            pending[ref] = job
        results: list[dict | None] = [None] * len(configs)
        done, last_report, started = 0, time.monotonic(), time.time()
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=poll_seconds)
            for ref in ready:
                job = pending.pop(ref)
                try:
                    summaries = ray.get(ref)
                except Exception as exc:  # retries exhausted (e.g. a node died repeatedly)
                    summaries = [{"run_id": run_ids[i], "status": "failed",
                                  "error": f"{type(exc).__name__}: {exc}"} for i in job]
                for index, summary in zip(job, summaries):
                    results[index] = summary
                    done += 1
                    printer(f"sweep (ray): {done}/{len(configs)} done: {summary_line(summary)}")
            if time.monotonic() - last_report > progress_seconds:
                left = [run_id for run_id, result in zip(run_ids, results) if result is None]
                printer(progress_line(left, runs_dir, done, len(configs), started,
                                      prefix="sweep (ray)")
                        + f" ({len(pending)} job(s) running or queued)")
                last_report = time.monotonic()
        return results  # type: ignore[return-value]
