"""Breaking symmetry when training transformers (Zuo & Guerzhoy 2024).

Grid: positional encoding {learned, none} x residuals removed from
{none, {0}, {0,1}, {0,1,2}} x seeds (causal attention), plus NoPE without the
causal mask (bidirectional). Claims:

1. NoPE with causal attention learns 3-digit addition about as well as learned PE.
2. Without causal mask and PE, the prediction for token n+1 is invariant to
   permuting tokens 1..n-1 (Sec. 4), and the model cannot learn the task beyond
   what an order-blind predictor can reach.
3. Removing residual connections from more consecutive layers hurts
   convergence (Sec. 5).
4. Activation correlation matrices show more across-position structure with
   residuals removed (Sec. 6).
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import numpy as np

from sglab import registry
from sglab.analysis.correlation import block_summary, correlation_matrix
from sglab.analysis.hooks import capture
from sglab.analysis.permutation import permutation_sensitivity
from sglab.experiments.base import Experiment
from sglab.experiments.claims import Measured, per_seed
from sglab.experiments.runs import Arm, RunSet, selected
from sglab.experiments.spec import ExperimentParams, RunConfigDict
from sglab.report.plots import Panel, heatmap_grid, learning_curves, metric_line
from sglab.tasks.addition import full_length_prompts, order_blind_ceiling_for_addition

REMOVED_NAMES = {0: "no layer removed", 1: "one removed", 2: "two removed", 3: "three removed"}
PERMUTATION_PROBES = 256
PERMUTATIONS = 16


class SymmetryParams(ExperimentParams):
    base: RunConfigDict  # the run config every arm starts from
    ablations: list[list[int]]  # residual connections removed from these layers, one arm each
    bidirectional_steps: int  # the NoPE model without the causal mask trains this long
    converged_threshold: float  # test exact match from which a run counts as converged
    correlation_examples: int  # test prompts whose activations are correlated


def removed_label(ablation: list[int]) -> str:
    """``{}``, ``{0}``, ``{0, 1}``: the layers whose residual connection is removed."""
    return str(set(ablation) or "{}")


class Symmetry(Experiment):
    name = "symmetry"
    params_model = SymmetryParams

    # ------------------------------------------------------------------ runs
    def arms(self, params: dict[str, Any]) -> list[Arm]:
        arms = []
        for pos, pe in (("learned", "learned"), ("none", "NoPE")):
            for ablation in params["ablations"]:
                for seed in params["seeds"]:
                    arms.append(Arm({"pe": pe, "attention": "causal",
                                     "removed": removed_label(ablation)}, params["base"],
                                    {"model.positions.kind": pos,
                                     "model.block.residual_ablation": list(ablation)}, seed))
        for seed in params["seeds"]:
            arms.append(Arm({"pe": "NoPE", "attention": "bidirectional", "removed": "{}"},
                            params["base"],
                            {"model.positions.kind": "none",
                             "model.attention_mask": "bidirectional",
                             "task.loss_on": "answer",  # one example per row, prefix passes
                             "train.steps": params["bidirectional_steps"]}, seed))
        return arms

    # ------------------------------------------------------------------ analysis
    def analyze(self, params: dict[str, Any], runs: RunSet, out_dir: Path) -> dict[str, Any]:
        threshold = params["converged_threshold"]
        accuracy = "iid_test/exact_match"
        # Scored at each run's selected checkpoint (the best on iid_valid, which is disjoint
        # from train and test): with a constant learning rate the test accuracy of a run
        # that has left the plateau still swings by a few points between evaluations.
        test = selected(accuracy)
        causal, bidirectional = runs.where(attention="causal"), runs.where(attention="bidirectional")

        def converged(group: RunSet) -> str:
            return f"{sum(a >= threshold for a in group.values(test))}/{len(group)}"

        def median_step_to_target(group: RunSet):
            steps = [r.target["step"] for r in group if r.target]
            causal_group = group[0]["attention"] == "causal"
            return statistics.median(steps) if steps and causal_group else "-"

        table = runs.table(["pe", "attention", "removed"], {
            "exact match": lambda g: g.mean_std(test),
            "at the last step": lambda g: g.mean_std(accuracy),
            f"converged (≥{threshold:.0%})": converged,
            "median step to 99%": median_step_to_target,
        }, title="Test exact match (greedy) at the checkpoint with the best IID-validation "
                 "exact match, mean ± std over seeds")
        table["columns"][:3] = ["positions", "attention", "residuals removed"]

        learned = causal.where(pe="learned", removed="{}")
        nope = causal.where(pe="NoPE", removed="{}")
        learned_seeds, nope_seeds = learned.values(test), nope.values(test)
        measured = {"nope-matches-learned-pe": Measured(
            {"learned PE": per_seed(learned_seeds), "NoPE": per_seed(nope_seeds),
             "gap": per_seed(a - b for a, b in zip(learned_seeds, nope_seeds))},
            "test exact match at the checkpoint with the best IID-validation exact match")}

        reference_task = bidirectional[0].task
        probe = full_length_prompts(reference_task, PERMUTATION_PROBES)
        sensitivity = {label: permutation_sensitivity(run.model(), probe, permutations=PERMUTATIONS)
                       for label, run in (("bidirectional NoPE", bidirectional[0]),
                                          ("causal NoPE", nope[0]),
                                          ("causal learned PE", learned[0]))}
        measured["bidirectional-nope-permutation-invariant"] = Measured(
            sensitivity, f"max |Δp(next token)| over {PERMUTATIONS} permutations of "
                         f"{len(probe)} test prompts (first seed)")
        ceiling = order_blind_ceiling_for_addition(reference_task)
        measured["bidirectional-nope-cannot-learn"] = Measured(
            {"bidirectional NoPE": per_seed(bidirectional.values(test)),
             "order-blind ceiling": ceiling, "causal NoPE": per_seed(nope_seeds)},
            "test exact match at the selected checkpoint; the ceiling is the best possible over "
            "all operand pairs when only the multiset of earlier tokens is seen")

        fractions = [sum(a >= threshold for a in group.values(test)) / len(group)
                     for group in causal.group_by("removed").values()]
        removed_counts = [len(a) for a in params["ablations"]]
        measured["residual-ablation-hurts-convergence"] = Measured(
            {"ablated layers": removed_counts, "converged fraction": fractions,
             **{REMOVED_NAMES[count]: fraction
                for count, fraction in zip(removed_counts, fractions)}},
            f"fraction of runs reaching {threshold:.0%} test exact match (both PE types pooled, "
            "every seed)")

        corr_section, measured["correlations-off-diagonal"] = self._correlations(
            params, causal.where(pe="NoPE"), out_dir)

        curves = learning_curves(out_dir, "curves", [
            Panel(f"residuals removed: {removed}",
                  [metric_line(r.metrics, accuracy, color=0 if r["pe"] == "NoPE" else 1,
                               style="-" if r["pe"] == "NoPE" else "--") for r in group],
                  ylim=(-0.02, 1.02))
            for removed, group in causal.group_by("removed").items()],
            ylabel="test exact match (solid NoPE, dashed learned)",
            caption="Test exact match during training, one line per seed (solid: NoPE, "
                    "dashed: learned PE).")
        bidirectional_figure = learning_curves(out_dir, "bidirectional", [Panel(
            "bidirectional NoPE",
            [metric_line(r.metrics, accuracy, f"seed {r.seed} {accuracy}") for r in bidirectional],
            hlines=[(ceiling, "order-blind ceiling")])],
            title="bidirectional NoPE",
            caption="Bidirectional NoPE test exact match vs the order-blind ceiling.")
        test = reference_task.split("iid_test")
        sections = [
            {"title": "Accuracy", "tables": [table],
             "text": f"Test set: {len(test):,} distinct operand pairs, "
                     f"{reference_task.overlap_count()} of them also in the training set. "
                     f"Converged: final test exact match ≥ {threshold:.0%}.",
             "figures": [curves]},
            {"title": "Symmetry without the causal mask",
             "tables": [{"columns": ["model", "max |Δ next-token probability| under permutation"],
                         "rows": [[k, f"{v:.3e}"] for k, v in sensitivity.items()]}],
             "text": f"Order-blind ceiling over all 3-digit operand pairs: {ceiling:.4f}.",
             "figures": [bidirectional_figure]},
            corr_section,
        ]
        return {"measured": measured, "sections": sections}

    def _correlations(self, params: dict[str, Any], nope: RunSet, out_dir: Path):
        """Layer-output correlation matrices of causal NoPE models (paper Figs. 3-5)."""
        shown = [removed_label(a) for a in params["ablations"] if len(a) <= 2]
        ratios: dict[str, list[list[float]]] = {}
        matrices: dict[str, list] = {}
        for removed in shown:
            for run in nope.where(removed=removed):
                prompts = full_length_prompts(run.task, params["correlation_examples"])
                acts = capture(run.model(), ["blocks.*.resid_post"], prompts)
                per_layer, layer_matrices = [], []
                for layer in range(run.config.model.n_layers):
                    corr = correlation_matrix(acts[f"blocks.{layer}.resid_post"])
                    per_layer.append(block_summary(corr, prompts.shape[1])["off_diagonal_ratio"])
                    layer_matrices.append(corr)
                if run.seed == params["seeds"][0]:
                    matrices[removed] = layer_matrices
                ratios.setdefault(removed, []).append(per_layer)
        n_layers = len(next(iter(ratios.values()))[0])
        figure = heatmap_grid(
            out_dir, "correlations",
            [[(f"removed {removed} · layer {layer + 1}", matrix)
              for layer, matrix in enumerate(matrices[removed])] for removed in shown],
            vmin=0.0, vmax=1.0, title="correlation matrices",
            caption="Rows: residuals removed from {}, {0}, {0,1}; columns: layers (seed 0).")
        mean_ratio = {r: np.mean(np.asarray(v), axis=0) for r, v in ratios.items()}
        rows = [[r, *[f"{x:.3f}" for x in mean_ratio[r]], f"{float(np.mean(mean_ratio[r])):.3f}"]
                for r in ratios]
        # Figs. 4 vs 5 of the paper: layers of models with no residuals removed vs with
        # residuals removed at layers 0 and 1. Summary: the ratio averaged over layers.
        overall = {f"removed {r}": float(np.mean(mean_ratio[r])) for r in ratios}
        result = Measured(overall, "across/within-position |r| ratio averaged over layers "
                                   "and seeds (per-layer values in the correlation table)")
        section = {
            "title": "Activation correlations (NoPE, causal)",
            "text": "Absolute Pearson correlation of the block outputs over test prompts "
                    "'$abc+def=' (rasterized position-major, features inside). Diagonal "
                    "blocks: same position; off-diagonal blocks: information shared across "
                    "positions. Ratio = mean |r| across positions / mean |r| within a position.",
            "tables": [{"columns": ["residuals removed",
                                    *[f"layer {i + 1}" for i in range(n_layers)], "mean"],
                        "rows": rows, "title": "across/within-position correlation ratio"}],
            "figures": [figure],
        }
        return section, result


registry.register_experiment(Symmetry())

__all__ = ["Symmetry"]
