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
from sglab.experiments.claims import (
    abs_at_most,
    at_least,
    at_most,
    claim,
    greater_than,
    less_than,
    slope_negative,
)
from sglab.experiments.runs import Arm, RunSet, selected
from sglab.report.plots import Panel, heatmap_grid, learning_curves, metric_line
from sglab.tasks.addition import full_length_prompts, order_blind_ceiling_for_addition

ABLATIONS = [[], [0], [0, 1], [0, 1, 2]]
PERMUTATION_PROBES = 256
PERMUTATIONS = 16


def _base(n_layers, n_heads, d_model, steps, batch, lr, train_size=10_000, test_size=10_000,
          dropout=0.0, eval_every=250, warmup=100, loss_on="answer", **train) -> dict[str, Any]:
    if train.get("lr_schedule", "cosine") == "cosine":
        train["min_lr"] = lr / 10
    return {
        "task": {"name": "addition", "format": "reverse", "train_size": train_size,
                 "test_size": test_size, "loss_on": loss_on},
        "model": {"name": "transformer", "n_layers": n_layers, "n_heads": n_heads,
                  "d_model": d_model, "dropout": dropout, "norm": "pre"},
        "train": {"steps": steps, "batch_size": batch, "lr": lr,
                  "warmup_steps": warmup, "eval_interval": eval_every, "log_interval": eval_every,
                  "checkpoint_interval": eval_every * 2, "weight_decay": 0.1, "grad_clip": 1.0,
                  **train},
    }


def removed_label(ablation: list[int]) -> str:
    """``{}``, ``{0}``, ``{0, 1}``: the layers whose residual connection is removed."""
    return str(set(ablation) or "{}")


class Symmetry(Experiment):
    name = "symmetry"
    title = "Breaking symmetry: NoPE, causal attention and residual connections on 3-digit addition"
    description = (
        "Zuo & Guerzhoy (2024). Decoder-only transformers on reversed 3-digit addition "
        "(Lee et al. data). Learned positions vs none (NoPE), residual connections removed "
        "from the first 0-3 layers, and a NoPE model without the causal mask. Exact match "
        "of greedy answers on a test set disjoint from training."
    )
    # The CPU presets use 3 layers, so removing residuals from {0, 1, 2} removes them
    # everywhere; NoPE needed a constant learning rate to converge reliably within the
    # step budget (cosine-decayed runs stalled in some seeds). Runs stop at 99% exact match
    # on the IID validation split (1,000 pairs in neither train nor test) and are scored
    # at their best checkpoint on it; the test split, on which the claims are scored,
    # selects nothing. NoPE seeds leave the loss plateau anywhere between step 1,750 and
    # 4,500 (seeds 0-3) and need about 3,000 more steps to pass 95%, so the default caps
    # runs at 8,000 steps (at 6,000 a late seed stood at 0.81).
    presets = {
        "quick": {
            "base": _base(3, 2, 32, steps=300, batch=64, lr=3e-3, train_size=2000,
                          test_size=500, eval_every=100, warmup=30),
            "seeds": [0], "ablations": ABLATIONS, "bidirectional_steps": 300,
            "converged_threshold": 0.5, "correlation_examples": 256, "quiet": True,
        },
        "default": {
            "base": _base(3, 4, 64, steps=8000, batch=128, lr=2e-3, lr_schedule="constant",
                          eval_every=250, eval_max_examples=2000,
                          early_stop_metric="iid_valid/exact_match", early_stop_threshold=0.99),
            "seeds": [0, 1], "ablations": ABLATIONS, "bidirectional_steps": 500,
            "converged_threshold": 0.5, "correlation_examples": 2000, "quiet": False,
        },
        "paper": {
            # nanoGPT of Lee et al.: 6 layers, 6 heads, 384 wide, dropout 0.2, AdamW 1e-3
            # with cosine decay, batch 256, 5000 iterations. Rows of 256 tokens packed with
            # whole examples at varying offsets, loss on the answers (task.loss_on=packed):
            # with one example per row the learned-PE model stalled at 95.7% after 4,750
            # steps; packed, it reached 99.7% at step 1,000 (one H100, seed 0).
            "base": _base(6, 6, 384, steps=5000, batch=256, lr=1e-3, dropout=0.2, loss_on="packed",
                          eval_max_examples=2000, precision="bf16",
                          early_stop_metric="iid_valid/exact_match", early_stop_threshold=0.99),
            "seeds": [0, 1, 2, 3, 4], "ablations": ABLATIONS, "bidirectional_steps": 1000,
            "converged_threshold": 0.5, "correlation_examples": 2000, "quiet": False,
        },
    }

    # ------------------------------------------------------------------ runs
    def arms(self, params: dict[str, Any]) -> list[Arm]:
        arms = []
        for pos, pe in (("learned", "learned"), ("none", "NoPE")):
            for ablation in params["ablations"]:
                for seed in params["seeds"]:
                    arms.append(Arm({"pe": pe, "attention": "causal",
                                     "removed": removed_label(ablation)}, params["base"],
                                    {"model.pos_encoding": pos,
                                     "model.residual_ablation": list(ablation)}, seed))
        for seed in params["seeds"]:
            arms.append(Arm({"pe": "NoPE", "attention": "bidirectional", "removed": "{}"},
                            params["base"],
                            {"model.pos_encoding": "none",
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
        claims = [claim(
            "nope-matches-learned-pe",
            "NoPE with causal attention learns 3-digit addition about as well as learned "
            "positional encoding (both nearly perfect).",
            {"learned PE": learned.mean(test), "NoPE": nope.mean(test),
             "gap": learned.mean(test) - nope.mean(test)},
            [at_least("learned PE", 0.85), at_least("NoPE", 0.85), abs_at_most("gap", 0.05)],
            context="test exact match at the selected checkpoint, mean over seeds (± std in "
                    "the accuracy table)",
        )]

        reference_task = bidirectional[0].task
        probe = full_length_prompts(reference_task, PERMUTATION_PROBES)
        sensitivity = {label: permutation_sensitivity(run.model(), probe, permutations=PERMUTATIONS)
                       for label, run in (("bidirectional NoPE", bidirectional[0]),
                                          ("causal NoPE", nope[0]),
                                          ("causal learned PE", learned[0]))}
        claims.append(claim(
            "bidirectional-nope-permutation-invariant",
            "Without causal masking and positional encoding, the prediction for token n+1 is "
            "invariant to permuting tokens 1..n-1.",
            sensitivity,
            [at_most("bidirectional NoPE", 1e-5), at_least("causal NoPE", 1e-3),
             at_least("causal learned PE", 1e-3)],
            context=f"max |Δp(next token)| over {PERMUTATIONS} permutations of "
                    f"{len(probe)} test prompts",
        ))
        ceiling = order_blind_ceiling_for_addition(reference_task)
        claims.append(claim(
            "bidirectional-nope-cannot-learn",
            "Without causal masking and positional encoding the model cannot learn the task: "
            "its accuracy stays near what a predictor that ignores token order can reach.",
            {"bidirectional NoPE": bidirectional.mean(test), "order-blind ceiling": ceiling,
             "causal NoPE": nope.mean(test)},
            [at_most("bidirectional NoPE", "order-blind ceiling", 0.02),
             at_most("bidirectional NoPE", "causal NoPE", -0.5)],
            context="test exact match at the selected checkpoint (mean over seeds); the "
                    "ceiling is the best possible "
                    "over all operand pairs when only the multiset of earlier tokens is seen",
        ))

        fractions = [sum(a >= threshold for a in group.values(test)) / len(group)
                     for group in causal.group_by("removed").values()]
        claims.append(claim(
            "residual-ablation-hurts-convergence",
            "Removing residual connections from more consecutive layers hurts convergence: "
            "the fraction of seeds that converge falls as the number of ablated layers grows.",
            {"ablated layers": [len(a) for a in params["ablations"]],
             "converged fraction": fractions, "most ablated": fractions[-1],
             "unablated": fractions[0]},
            [slope_negative("converged fraction", over="ablated layers"),
             less_than("most ablated", "unablated")],
            context=f"fraction of runs reaching {threshold:.0%} test exact match (both PE "
                    "types pooled)",
        ))

        corr_section, corr_claim = self._correlations(params, causal.where(pe="NoPE"), out_dir)
        claims.append(corr_claim)

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
        return {"claims": claims, "sections": sections}

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
        most = f"removed {shown[-1]}"
        result = claim(
            "correlations-off-diagonal",
            "Correlation matrices of layer outputs show more off-diagonal (across-position) "
            "structure when residual connections are removed.",
            overall, [greater_than(most, "removed {}")],
            context="across/within-position |r| ratio averaged over layers and seeds "
                    "(per-layer values in the correlation table)",
        )
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
