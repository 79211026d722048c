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

import math
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sglab.config import RunConfig
from sglab.errors import SglabError
from sglab.store import RunStore
from sglab.sweep.jobs import describe_jobs, executions, plan_jobs, run_job, summary_line, sweep_run_ids
from sglab.sweep.progress import PROGRESS_SECONDS, progress_line
from sglab.train.run_log import ENV as TENSORBOARD_ENV


def import_ray():
    try:
        import ray
    except ImportError:
        raise SglabError("the Ray backend needs Ray: pip install 'sglab[ray]' "
                         "(or pip install ray), then rerun with --backend ray") from None
    return ray


CONNECT_TIMEOUT_ENV = "SGLAB_RAY_CONNECT_TIMEOUT"
CONNECT_TIMEOUT_S = 30.0  # how long a cluster address may take to answer


def connect_timeout() -> float:
    """Seconds a Ray address may take to accept a connection ($SGLAB_RAY_CONNECT_TIMEOUT)."""
    raw = os.environ.get(CONNECT_TIMEOUT_ENV, "").strip()
    if not raw:
        return CONNECT_TIMEOUT_S
    try:
        seconds = float(raw)
    except ValueError:
        seconds = -1.0
    if not math.isfinite(seconds) or seconds <= 0:
        raise SglabError(f"{CONNECT_TIMEOUT_ENV}={raw!r} is not a number of seconds > 0")
    return seconds


def _host_port(address: str) -> tuple[str, int] | None:
    """(host, port) that a Ray address is reached at (``ray://`` is Ray Client, port 10001
    by default; a bare address is a cluster's GCS, port 6379), or None for ``auto`` and
    ``local``, which name no host."""
    text = address.strip()
    if text in ("auto", "local", ""):
        return None
    default_port = 6379
    if "://" in text:
        scheme, text = text.split("://", 1)
        if scheme == "ray":
            default_port = 10001
    text = text.split("/", 1)[0]
    if text.startswith("["):  # [IPv6]:port
        host, _, rest = text[1:].partition("]")
        port_text = rest.lstrip(":")
    elif text.count(":") == 1:
        host, port_text = text.split(":")
    else:
        host, port_text = text, ""
    try:
        port = int(port_text) if port_text else default_port
    except ValueError:
        raise SglabError(f"--address {address!r}: {port_text!r} is not a port number; write "
                         "HOST:PORT, e.g. 10.0.0.5:6379 or ray://10.0.0.5:10001") from None
    return host, port


def check_reachable(address: str, timeout: float | None = None) -> None:
    """Raise a SglabError unless something accepts a connection at Ray ``address`` within
    ``timeout`` seconds (:func:`connect_timeout`). Ray itself retries a dead address for
    minutes, which looks like a hang."""
    where = _host_port(address)
    if where is None:
        return
    timeout = connect_timeout() if timeout is None else timeout
    started = time.monotonic()
    try:
        with socket.create_connection(where, timeout=timeout):
            pass
    except TimeoutError:
        problem = f"it did not answer within {timeout:g} s"
    except OSError as exc:
        problem = f"{exc.strerror or exc} after {time.monotonic() - started:.1f} s"
    else:
        return
    raise SglabError(
        f"cannot reach a Ray cluster at {address!r} ({where[0]}:{where[1]}): {problem}. Check the "
        "address (the head node's HOST:PORT, e.g. 10.0.0.5:6379, or ray://HOST:10001) and that "
        "the cluster is up, or drop --address (and unset RAY_ADDRESS) to start a local Ray "
        f"instance; {CONNECT_TIMEOUT_ENV} sets the wait")


@contextmanager
def ray_session(address: str | None = None, log_to_driver: bool = False) -> Iterator[None]:
    """Connect to Ray for the block (a cluster at ``address``, else a local instance) and
    disconnect after it; inside a connection that is already open, just use that one.

    Without ``address`` Ray joins the cluster named by $RAY_ADDRESS, or one started on this
    host with ``ray start``, if there is one; ``address="local"`` always starts a new local
    instance. An address that does not accept a connection within :func:`connect_timeout`
    seconds is a SglabError, not a wait of many minutes."""
    ray = import_ray()
    if ray.is_initialized():
        yield
        return
    target = address if address is not None else os.environ.get("RAY_ADDRESS")
    if target:
        check_reachable(target)
    try:
        # the run-log switch reaches the workers of a cluster as it reaches pool workers
        shared = {name: os.environ[name] for name in (TENSORBOARD_ENV,) if name in os.environ}
        ray.init(address=address, include_dashboard=False, log_to_driver=log_to_driver,
                 configure_logging=False,
                 runtime_env={"env_vars": shared} if shared else None)
    except (ConnectionError, TimeoutError, ValueError) as exc:
        text = " ".join(str(exc).split())[:300]
        raise SglabError(f"cannot connect to Ray at {target or 'a local instance'!r}: {text}; "
                         "check --address (and RAY_ADDRESS)") from None
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
