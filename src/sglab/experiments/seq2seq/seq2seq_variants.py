"""The encoder-decoder variants of thesis chapter 4 and what their experiments share.

Csordás et al. (2021) compare four encoder-decoder Transformers: absolute (sinusoidal)
or relative (Transformer-XL) positions, with or without one layer shared across depth
(Universal). The experiments built on them (``scan-length``, ``math-place-value``)
share the variant grid and its parameters, the bookkeeping of finished runs (simulated
IID-loss early stopping, convergence speed, loss-accuracy correlation, values per seed)
and the report parts (learning curves, accuracy per example group).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

from sglab.analysis.model_selection import (
    early_stopping_report,
    loss_accuracy_correlation,
    steps_to_fraction,
)
from sglab.experiments.claims import Measured, NotMeasured, PerSeed, per_seed
from sglab.experiments.runs import FinishedRun, RunSet
from sglab.experiments.spec import ExperimentParams, RunConfigDict
from sglab.report.plots import Panel, accuracy_by_group, learning_curves, metric_line

VARIANTS: dict[str, dict[str, Any]] = {
    "Transformer": {"pos_encoding": "sinusoidal", "universal": False},
    "Universal": {"pos_encoding": "sinusoidal", "universal": True},
    "Relative": {"pos_encoding": "relative", "universal": False},
    "Relative Universal": {"pos_encoding": "relative", "universal": True},
}
Variant = Literal["Transformer", "Universal", "Relative", "Relative Universal"]
IID, OOD = "iid_valid", "ood_test"  # the IID validation split and the generalization split


class Seq2SeqParams(ExperimentParams):
    """The parameters both chapter-4 experiments have."""

    base: RunConfigDict  # the run config every arm starts from (the variant switches it)
    variants: list[Variant]  # the encoder-decoder variants trained, one arm each
    patience: int  # evaluations without a new best IID loss before early stopping stops


def check_variants(variants: Sequence[str]) -> None:
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        raise ValueError(f"unknown variants {unknown}; known: {list(VARIANTS)}")


def variant_switches(variant: str) -> dict[str, Any]:
    """The ``model.*`` overrides that select a variant (an arm's grid axes)."""
    return {f"model.{key}": value for key, value in VARIANTS[variant].items()}


def selection(run: FinishedRun, patience: int) -> dict[str, Any]:
    """IID-loss early stopping replayed on the logged evaluations (``early``), the first
    step reaching 80% of the final OOD accuracy (``to80``) and Spearman loss-accuracy
    correlations per split (``corr_iid``, ``corr_ood``)."""
    def compute(run: FinishedRun) -> dict[str, Any]:
        records = run.evaluations
        return {
            "early": early_stopping_report(records, f"{OOD}/exact_match", f"{IID}/loss",
                                           patience),
            "to80": steps_to_fraction(records, f"{OOD}/exact_match", 0.8),
            "corr_iid": loss_accuracy_correlation(records, IID),
            "corr_ood": loss_accuracy_correlation(records, OOD),
        }

    return run.measure(f"selection/patience={patience}", compute)


def best_iid(run: FinishedRun) -> float:
    """Best IID exact match during training (the constant learning rate of the thesis
    leaves the last evaluation noisy)."""
    return max(r[f"{IID}/exact_match"] for r in run.evaluations)


def curves_figure(panels: list[tuple[str, RunSet]], variants: list[str], out_dir: Path,
                  patience: int, ood: str = "OOD test", iid: str = "IID validation",
                  ylabel: str = "exact match (solid OOD, dotted IID)") -> dict[str, str]:
    """Exact match during training, one panel per (title, runs): solid the OOD split,
    dotted the IID one, a thin line at the checkpoint early stopping keeps."""
    first_seed = min(r.seed for _, runs in panels for r in runs)
    figure_panels = []
    for title, runs in panels:
        panel = Panel(title, ylim=(-0.02, 1.02))
        for i, variant in enumerate(variants):
            for run in runs.where(variant=variant):
                label = variant if run.seed == first_seed else None
                panel.lines.append(metric_line(run.evaluations, f"{OOD}/exact_match", label, i))
                panel.lines.append(metric_line(run.evaluations, f"{IID}/exact_match", None, i, ":"))
                panel.vlines.append((selection(run, patience)["early"]["early_stop_step"], i,
                                     None))
        figure_panels.append(panel)
    return learning_curves(out_dir, "curves", figure_panels, ylabel=ylabel,
                           caption=f"Exact match during training (solid: {ood}, dotted: {iid}). "
                                   "Thin vertical lines: the checkpoint that early stopping on "
                                   "the IID validation loss keeps.")


def group_accuracy_figure(panels: list[tuple[str, RunSet, str, str]], variants: list[str],
                          out_dir: Path, name: str, title: str, caption: str) -> dict[str, str]:
    """Final exact match per example group (mean over seeds), one panel per (title, runs,
    metric prefix such as ``test/exact_match/target_length=``, x-axis label)."""
    return accuracy_by_group(out_dir, name, [
        (panel_title, {v: runs.where(variant=v).group_means(prefix) for v in variants}, xlabel)
        for panel_title, runs, prefix, xlabel in panels], title=title, caption=caption)


def seed_values(runs: RunSet, metric: str | Callable[[FinishedRun], float]) -> PerSeed:
    """A final metric (or a per-run measure) of each run, in seed order."""
    return per_seed(RunSet(sorted(runs, key=lambda run: run.seed)).values(metric))


def variant_values(runs: RunSet, needed: Sequence[str], variants: Sequence[str],
                   metric: str | Callable[[FinishedRun], float], context: str
                   ) -> Measured | NotMeasured:
    """``metric`` per seed for each of the ``needed`` variants (named by the variant), or
    why not: a variant the preset does not train."""
    missing = [v for v in needed if v not in variants]
    if missing:
        return NotMeasured(f"the preset does not train {', '.join(missing)} "
                           f"(variants: {', '.join(variants)})")
    return Measured({v: seed_values(runs.where(variant=v), metric) for v in needed}, context)
