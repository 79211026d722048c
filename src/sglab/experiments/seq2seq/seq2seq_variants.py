"""The encoder-decoder variants of thesis chapter 4 and what their experiments share.

Csordás et al. (2021) compare four encoder-decoder Transformers: absolute (sinusoidal)
or relative (Transformer-XL) positions, with or without one layer shared across depth
(Universal). The experiments built on them (``scan-length``, ``math-place-value``)
use the same training settings (thesis Table C.1: Adam with PyTorch defaults, constant
learning rate, no weight decay, gradient clipping), the same bookkeeping of finished
runs (simulated IID-loss early stopping, convergence speed, loss-accuracy correlation),
the same report parts (learning curves, accuracy per example group) and the same
"relative universal beats the absolute variants" claim.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sglab.analysis.model_selection import (
    early_stopping_report,
    loss_accuracy_correlation,
    steps_to_fraction,
)
from sglab.experiments.legacy_claims import Claim, at_least, claim, not_measurable
from sglab.experiments.runs import FinishedRun, RunSet
from sglab.report.plots import Panel, accuracy_by_group, learning_curves, metric_line

VARIANTS: dict[str, dict[str, Any]] = {
    "Transformer": {"pos_encoding": "sinusoidal", "universal": False},
    "Universal": {"pos_encoding": "sinusoidal", "universal": True},
    "Relative": {"pos_encoding": "relative", "universal": False},
    "Relative Universal": {"pos_encoding": "relative", "universal": True},
}
ABSOLUTE = ("Transformer", "Universal")
IID, OOD = "iid_valid", "ood_test"  # the IID validation split and the generalization split


def check_variants(variants: Sequence[str]) -> None:
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        raise ValueError(f"unknown variants {unknown}; known: {list(VARIANTS)}")


def variant_switches(variant: str) -> dict[str, Any]:
    """The ``model.*`` overrides that select a variant (an arm's grid axes)."""
    return {f"model.{key}": value for key, value in VARIANTS[variant].items()}


def seq2seq_base(task: dict[str, Any], d_model, d_ff, n_heads, n_layers, steps, batch,
                 eval_every, lr=1e-3, dropout=0.1, grad_clip=5.0, eval_max_examples=None,
                 **train) -> dict[str, Any]:
    """Base config of a chapter-4 run: the model and the Table C.1 optimizer settings."""
    return {
        "task": task,
        "model": {"name": "seq2seq", "d_model": d_model, "d_ff": d_ff, "n_heads": n_heads,
                  "n_layers": n_layers, "dropout": dropout, "embedding_scaling": "ped"},
        # thesis Table C.1: Adam (PyTorch defaults), constant lr, no weight decay,
        # gradient clipping
        "train": {"steps": steps, "batch_size": batch, "lr": lr, "lr_schedule": "constant",
                  "warmup_steps": 0, "betas": [0.9, 0.999], "weight_decay": 0.0,
                  "grad_clip": grad_clip, "eval_interval": eval_every,
                  "log_interval": eval_every, "checkpoint_interval": eval_every * 2,
                  "eval_batch_size": 512, "eval_max_examples": eval_max_examples,
                  "target_metric": "ood_test/exact_match", **train},
    }


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


def relative_universal_claim(id: str, statement: str, accuracy: dict[str, float],
                             margin: float, context: str) -> Claim:
    """Relative Universal beats the best absolute-position variant by ``margin``."""
    absolute = [v for v in ABSOLUTE if v in accuracy]
    if "Relative Universal" not in accuracy or not absolute:
        return not_measurable(id, statement, "the preset needs Relative Universal and an "
                                             "absolute-position variant")
    values = {**accuracy, "best absolute": max(accuracy[v] for v in absolute)}
    return claim(id, statement, values, [at_least("Relative Universal", "best absolute", margin)],
                 context=context)


def every_variant_claim(id: str, statement: str, accuracy: dict[str, float], threshold: float,
                        context: str) -> Claim:
    """Every listed variant's accuracy is at least ``threshold``."""
    if not accuracy:
        return not_measurable(id, statement, "the preset has none of the variants")
    values = {"variants": list(accuracy), "accuracy": list(accuracy.values())}
    return claim(id, statement, values, [at_least("accuracy", threshold)], context=context)
