"""Where a list of run configs trains: the one switch that `sglab sweep` and `sglab run` share.

``local`` is the process pool on this machine (:mod:`sglab.sweep.local`); ``ray`` sends the
same jobs to a Ray cluster, or to a local Ray instance when no address is given
(:mod:`sglab.sweep.ray_backend`). Both plan jobs the same way (:mod:`sglab.sweep.jobs`) and
write to the same run store, so a run trained by one backend is reused by the other.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sglab.config import RunConfig
from sglab.errors import SglabError

BACKENDS = ("local", "ray")


def check_backend(backend: str, address: str | None = None, workers: int | None = None) -> None:
    """Reject a backend name or an option that does not apply to it, before anything runs."""
    if backend not in BACKENDS:
        raise SglabError(f"unknown backend {backend!r}; available: {', '.join(BACKENDS)}")
    if address and backend != "ray":
        raise SglabError("--address only applies to --backend ray")
    if workers and backend == "ray":
        raise SglabError("--workers does not apply to --backend ray (Ray places the jobs); "
                         "use --threads for the CPUs per job")


@contextmanager
def backend_session(backend: str, address: str | None = None) -> Iterator[None]:
    """Keep one Ray connection open across several calls of :func:`train_configs` (an
    experiment's stages); a no-op for the local backend or when Ray is already running."""
    if backend != "ray":
        yield
        return
    from sglab.sweep.ray_backend import ray_session

    with ray_session(address):
        yield


def train_configs(configs: list[RunConfig], runs_dir: str | Path, backend: str = "local",
                  address: str | None = None, workers: int | None = None,
                  threads: int | None = None, tag: str | None = None, quiet: bool = False,
                  printer=print, ensemble: bool = True) -> list[dict]:
    """Train (or reuse) every config on the chosen backend; summaries in input order."""
    check_backend(backend, address, workers)
    if backend == "ray":
        from sglab.sweep.ray_backend import run_configs_ray

        return run_configs_ray(configs, runs_dir, address=address, threads=threads, tag=tag,
                               quiet=quiet, printer=printer, ensemble=ensemble)
    from sglab.sweep.local import run_configs

    return run_configs(configs, runs_dir, workers=workers, threads=threads, tag=tag, quiet=quiet,
                       printer=printer, ensemble=ensemble)


__all__ = ["BACKENDS", "backend_session", "check_backend", "train_configs"]
