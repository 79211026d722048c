"""Labelled runs: what an experiment declares (arms) and what its analysis reads.

An :class:`Arm` is one run to train: labels saying what role it plays
(``{"pe": "none", "ablated": "0,1"}``), a base config dict, the dotted overrides that
make it this arm, and a seed. The experiment runner trains every arm and hands the
analysis a :class:`RunSet` of :class:`FinishedRun` (labels, config, summary, lazily
read metrics and a lazily loaded model), so no analysis has to recover a run's role
from its config.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from sglab.config import (
    LEGACY_TEST_SPLIT,
    RunConfig,
    apply_overrides,
    build_run_config,
    canonical_key,
    parse_override,
)
from sglab.errors import SglabError
from sglab.store import read_metrics


@dataclass(frozen=True)
class Arm:
    """One run of an experiment: labels + base config + overrides + seed."""

    labels: dict[str, str]
    base: dict[str, Any]
    overrides: dict[str, Any] = field(default_factory=dict)
    seed: int = 0

    def axes(self) -> list[str]:
        """Dotted keys this arm sets itself (its grid axes, ``seed`` included)."""
        return [*self.overrides, "seed"]

    def config(self, user_overrides: Sequence[str] = ()) -> RunConfig:
        data = apply_overrides(self.base, list(user_overrides))
        return build_run_config(data, {**self.overrides, "seed": self.seed})


def check_user_overrides(experiment: str, arms: Sequence[Arm], overrides: Sequence[str]) -> None:
    """Reject ``--set`` keys that an arm sets itself (they would be silently overwritten)."""
    # one setting may be spelled two ways (model.pos_encoding, model.positions.kind): compare
    # them as the current layout spells them, name the axis as the arm does
    axes = {canonical_key(key): key for arm in arms for key in arm.axes()}
    for text in overrides:
        path, _ = parse_override(text)
        key = canonical_key(".".join(path))
        clash = next((axes[axis] for axis in axes
                      if axis == key or axis.startswith(key + ".") or key.startswith(axis + ".")),
                     None)
        if clash == "seed":
            raise SglabError(f"--set {text}: the seed is set per run by experiment "
                             f"{experiment!r}; use --seeds N to choose how many seeds to run")
        if clash is not None:
            raise SglabError(f"--set {text}: {clash!r} is a grid axis of experiment "
                             f"{experiment!r} (its runs set it themselves); drop this override "
                             "or train the variant alone with `sglab train`")


def build_arm_configs(experiment: str, arms: Sequence[Arm],
                      overrides: Sequence[str] = ()) -> list[RunConfig]:
    if not arms:  # an analysis-only experiment: nothing to train, nothing to override
        if overrides:
            raise SglabError(f"--set {overrides[0]}: experiment {experiment!r} trains no runs at "
                             "this preset, so there is no run config to set")
        return []
    check_user_overrides(experiment, arms, overrides)
    return [arm.config(overrides) for arm in arms]


def format_mean_std(values: Sequence[float], digits: int = 4, significant: bool = False) -> str:
    """``0.9812 ± 0.0100`` (one value: just it; none: ``-``). ``significant`` switches
    ``digits`` from decimals to significant digits (for values far below 1)."""
    values = [float(v) for v in values]
    if not values:
        return "-"
    spec = f".{digits}g" if significant else f".{digits}f"
    if len(values) == 1:
        return format(values[0], spec)
    spread = ".2g" if significant else spec
    return f"{format(statistics.mean(values), spec)} ± {format(statistics.stdev(values), spread)}"


class FinishedRun:
    """A trained run with its labels; metrics and weights are read on first use."""

    def __init__(self, labels: dict[str, str], config: RunConfig, summary: dict[str, Any],
                 directory: Path):
        self.labels = dict(labels)
        self.config = config
        self.summary = summary
        self.directory = Path(directory)
        self._models: dict[str, Any] = {}
        self._measures: dict[str, Any] = {}

    def __repr__(self) -> str:
        return f"FinishedRun({self.run_id}, {self.labels}, seed={self.seed})"

    def __getitem__(self, label: str) -> str:
        return self.labels[label]

    @property
    def run_id(self) -> str:
        return self.summary["run_id"]

    @property
    def seed(self) -> int:
        return self.config.seed

    @property
    def final(self) -> dict[str, Any]:
        """The last evaluation record."""
        return self._current_names(self.summary.get("final") or {})

    @cached_property
    def _legacy_prefix(self) -> tuple[str, str] | None:
        """(``test/``, today's ``<split>/``) if this run's task renamed its test split."""
        current = self.config.task.current_split_name(LEGACY_TEST_SPLIT)
        return None if current == LEGACY_TEST_SPLIT else (f"{LEGACY_TEST_SPLIT}/", f"{current}/")

    def _current_names(self, record: dict[str, Any]) -> dict[str, Any]:
        """``record`` with metrics logged under a split's old name (``test/...``, before
        split names said what they are) under today's name (``ood_test/...``)."""
        if self._legacy_prefix is None:
            return dict(record)
        old, new = self._legacy_prefix
        return {(new + key[len(old):] if key.startswith(old) else key): value
                for key, value in record.items()}

    @property
    def best(self) -> dict[str, Any] | None:
        """The record of the best evaluation (by the run's target metric), if any."""
        return self.summary.get("best")

    @cached_property
    def selected(self) -> dict[str, Any]:
        """The evaluation record of the selected checkpoint: the best one on the run's
        ``train.select_on`` validation split (the Trainer keeps it as ``best.pt``), else the
        last. Test splits never select."""
        step = (self.best or {}).get("step")
        records = self.evaluations
        return next((r for r in records if r["step"] == step), records[-1] if records else {})

    @property
    def target(self) -> dict[str, Any] | None:
        """The record of the first evaluation that reached the early-stop target, if any."""
        return self.summary.get("target")

    @cached_property
    def metrics(self) -> list[dict[str, Any]]:
        """Every record of ``metrics.jsonl`` (evaluations and training-loss records)."""
        return [self._current_names(record) for record in read_metrics(self.directory)]

    @property
    def evaluations(self) -> list[dict[str, Any]]:
        """The evaluation records (training-loss records, which carry only ``train/*``
        values, left out)."""
        return [r for r in self.metrics
                if not all(k == "step" or k.startswith("train/") for k in r)]

    def curve(self, key: str) -> tuple[list[int], list[float]]:
        """(steps, values) of the records that carry ``key``."""
        points = [(r["step"], r[key]) for r in self.metrics if key in r]
        return [p[0] for p in points], [p[1] for p in points]

    def measure(self, name: str, compute: Callable[[FinishedRun], Any]) -> Any:
        """``compute(self)``, computed once per run and ``name`` (for measures that several
        report parts read)."""
        if name not in self._measures:
            self._measures[name] = compute(self)
        return self._measures[name]

    def model(self, which: str = "last"):
        """The model with weights from ``checkpoints/<which>.pt`` (cached), built from the
        sizes its summary records, without the task's data."""
        if which not in self._models:
            from sglab.train.loop import load_model, load_trained

            if "vocab_size" in self.summary:
                self._models[which] = load_model(self.directory, which)[1]
            else:  # a run from an older sglab: the task's vocabulary sizes the model
                self._models[which] = load_trained(self.directory, which)[2]
        return self._models[which]

    @cached_property
    def task(self):
        """The run's task, data built (for probes that need its vocabulary or splits)."""
        from sglab.tasks import build_task

        return build_task(self.config.task)


def selected(metric: str) -> Callable[[FinishedRun], Any]:
    """A run's ``metric`` at its selected checkpoint (None when not evaluated there)."""
    return lambda run: run.selected.get(metric)


class RunSet(Sequence[FinishedRun]):
    """An ordered set of finished runs: filter, group by label, summarize."""

    def __init__(self, runs: Iterable[FinishedRun]):
        self._runs = list(runs)

    def __len__(self) -> int:
        return len(self._runs)

    def __getitem__(self, index):  # type: ignore[override]
        if isinstance(index, slice):
            return RunSet(self._runs[index])
        return self._runs[index]

    def __iter__(self) -> Iterator[FinishedRun]:
        return iter(self._runs)

    def __repr__(self) -> str:
        return f"RunSet({len(self)} runs)"

    def where(self, predicate: Callable[[FinishedRun], bool] | None = None,
              **labels: Any) -> RunSet:
        """Runs whose labels equal every given value (and that pass ``predicate``)."""
        wanted = {k: str(v) for k, v in labels.items()}
        return RunSet(r for r in self._runs
                      if all(r.labels.get(k) == v for k, v in wanted.items())
                      and (predicate is None or predicate(r)))

    def only(self, **labels: Any) -> FinishedRun:
        """The single run with these labels (an error when there are none or several)."""
        found = self.where(**labels)
        if len(found) != 1:
            raise LookupError(f"expected one run with {labels}, found {len(found)}")
        return found[0]

    def label_values(self, label: str) -> list[str]:
        """The distinct values of a label, in run order."""
        return list(dict.fromkeys(r.labels[label] for r in self._runs if label in r.labels))

    def group_by(self, *labels: str) -> dict[Any, RunSet]:
        """Runs grouped by the values of ``labels`` (a value, or a tuple for several),
        groups in order of first appearance."""
        groups: dict[Any, list[FinishedRun]] = {}
        for run in self._runs:
            key = tuple(run.labels.get(label) for label in labels)
            groups.setdefault(key[0] if len(labels) == 1 else key, []).append(run)
        return {key: RunSet(runs) for key, runs in groups.items()}

    def values(self, metric: str | Callable[[FinishedRun], float]) -> list[float]:
        """A final metric (by name) or any per-run measure, one value per run."""
        get = metric if callable(metric) else (lambda r: r.final[metric])
        return [float(get(r)) for r in self._runs]

    def mean(self, metric: str | Callable[[FinishedRun], float]) -> float:
        values = self.values(metric)
        return statistics.mean(values) if values else float("nan")

    def group_means(self, prefix: str,
                    record: Callable[[FinishedRun], dict[str, Any]] | None = None
                    ) -> dict[int | str, float]:
        """Mean over runs of every final metric ``<prefix><group>`` (a per-group breakdown
        such as ``test/exact_match/target_length=``), keyed by group (ints where they are),
        numeric groups first in order. ``record``: read another evaluation record of each
        run instead of its final one (e.g. the one at a selected checkpoint)."""
        groups: dict[int | str, list[float]] = {}
        for run in self._runs:
            for key, value in (run.final if record is None else record(run)).items():
                if key.startswith(prefix):
                    group = key[len(prefix):]
                    number = group.lstrip("-").isdigit()
                    groups.setdefault(int(group) if number else group, []).append(float(value))

        def order(group: int | str) -> tuple:
            return (1, 0, group) if isinstance(group, str) else (0, group, "")

        return {g: statistics.mean(groups[g]) for g in sorted(groups, key=order)}

    def mean_std(self, metric: str | Callable[[FinishedRun], float], digits: int = 4,
                 significant: bool = False) -> str:
        return format_mean_std(self.values(metric), digits, significant)

    def table(self, by: Sequence[str], columns: dict[str, Callable[[RunSet], Any]],
              title: str = "") -> dict[str, Any]:
        """A report table: one row per group of ``by`` labels, one column per summary."""
        rows = []
        for key, group in self.group_by(*by).items():
            key = key if isinstance(key, tuple) else (key,)
            rows.append([*key, *(column(group) for column in columns.values())])
        table = {"columns": [*by, *columns], "rows": rows}
        if title:
            table["title"] = title
        return table


def finished_runs(arms: Sequence[Arm], configs: Sequence[RunConfig], summaries: Sequence[dict],
                  runs_dir: Path) -> RunSet:
    return RunSet(FinishedRun(arm.labels, config, summary, Path(runs_dir) / summary["run_id"])
                  for arm, config, summary in zip(arms, configs, summaries))


__all__ = ["Arm", "FinishedRun", "RunSet", "build_arm_configs", "check_user_overrides",
           "finished_runs", "format_mean_std"]
