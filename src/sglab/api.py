"""The Python API: train a run, open a stored run, list runs.

>>> import sglab
>>> summary = sglab.train_run({"task": {"name": "addition"}, "train": {"steps": 500}}, "runs")
>>> run = sglab.load_run(f"runs/{summary['run_id']}")
>>> run.metrics[-1]["test/exact_match"], run.training_loss[-1]["train/loss"]
>>> model = run.model("best")
>>> sglab.runs("runs", where=["task=addition", "final.test/exact_match>0.9"])

Training from Python behaves as ``sglab train``: the run is indexed in the run store,
a finished run is not retrained, and torch's global thread count is restored afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sglab.config import RunConfig, build_run_config
from sglab.errors import SglabError
from sglab.store import COLUMNS, RunStore, read_metrics


def train_run(config: RunConfig | dict, runs_dir: str | Path = "runs",
              overrides: list[str] | None = None, resume: bool = True, quiet: bool = True,
              tag: str | None = None) -> dict:
    """Train ``config`` (a RunConfig, or a dict of the YAML config's shape plus dotted
    ``overrides``) into ``runs_dir/<run id>/`` and return its summary."""
    from sglab.train.loop import Trainer

    if isinstance(config, RunConfig):
        if overrides:
            config = build_run_config(config.to_dict(), list(overrides))
    elif isinstance(config, dict):
        config = build_run_config(config, list(overrides or []))
    else:
        raise SglabError(f"config must be a RunConfig or a dict, not {type(config).__name__}")
    printer = None if quiet else (lambda line: print(line, flush=True))
    return Trainer(config, runs_dir, store=RunStore(runs_dir), printer=printer,
                   tag=tag).run(resume=resume)


@dataclass
class Run:
    """A stored run: its directory, config, summary and records; the model on request."""

    path: Path
    config: RunConfig
    summary: dict[str, Any]
    metrics: list[dict[str, Any]] = field(repr=False)
    training_loss: list[dict[str, Any]] = field(repr=False)

    @property
    def run_id(self) -> str:
        return self.path.name

    def model(self, which: str = "last"):
        """The trained model (eval mode), weights from ``checkpoints/<which>.pt`` (``last``,
        ``best`` or ``step_<N>``), built without generating the task's data."""
        from sglab.train.loop import load_model

        return load_model(self.path, which)[1]


def load_run(path: str | Path) -> Run:
    """Open the run directory ``path``."""
    from sglab.train.loop import load_run_config, read_summary_file

    path = Path(path)
    config = load_run_config(path)
    summary = read_summary_file(path)
    if summary is None:
        raise SglabError(f"{str(path)!r} has no summary.json (the run never started)")
    return Run(path, config, summary, read_metrics(path), read_metrics(path, kind="train"))


def runs(runs_dir: str | Path = "runs", where: list[str] | None = None,
         as_frame: bool = False) -> Any:
    """Indexed runs matching every ``where`` filter (as ``sglab runs --where``): dicts with
    the store's columns plus ``config`` and ``summary``, as the runs stand now (a running
    run's last step; ``interrupted`` when its trainer is gone, as `sglab runs` shows them).

    ``as_frame=True``: a pandas DataFrame instead, one row per run, with the store's columns
    and the config and summary flattened into dotted columns (``config.model.positions.kind``,
    ``summary.final.iid_test/exact_match``). Needs pandas (``pip install pandas``)."""
    store = RunStore(runs_dir)
    rows = store.current(store.query(list(where or [])))
    if not as_frame:
        return rows
    try:
        import pandas
    except ImportError:
        raise SglabError("runs(..., as_frame=True) needs pandas, which is not installed: "
                         "pip install pandas (or pip install 'sglab[test]'); or call runs() "
                         "without as_frame for a list of dicts") from None
    columns = [*COLUMNS, "config", "summary"]
    if not rows:
        return pandas.DataFrame(columns=columns)
    return pandas.json_normalize(rows, sep=".")


__all__ = ["Run", "load_run", "runs", "train_run"]
