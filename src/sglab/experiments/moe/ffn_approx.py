"""Top-K activation and product-key memory as approximations of the MLP (thesis Tabs. 7.1-7.2).

LMs on the King James Bible as bytes (see moe-lm; ``paper``: WikiText-103 in SentencePiece
pieces, as the thesis, scored in perplexity) with a dense ReLU MLP, Top-K
activation (K = d_ff / 16, / 8, / 4; Eqs. 7.6-7.7), and product-key memories (4 heads,
Eq. 7.8) with ReLU or softmax, sized by value count (n_sub^2 = d_ff) or by parameters
(n_sub^2 + 4 n_sub <= 2 d_ff). Claims:

1. Top-K at moderate K (d_ff / 8) is no worse than dense (Tab. 7.1, WT-S K = 128: 11.74 vs
   11.81 ppl), within ``tolerance`` (bpb, or ppl on WikiText-103);
2. PKM with ReLU beats PKM with softmax (Tab. 7.2, WT-S 12.77 vs 13.96; value count
   13.32 vs 14.11) and both stay behind dense (11.81);
3. most units of the dense MLP are inactive (Fig. 7.1: fewer than 200 of 2053, < 10%):
   mean active units per token at most ``active_fraction`` of d_ff in every layer.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from sglab import registry
from sglab.experiments.base import Experiment
from sglab.experiments.legacy_claims import at_most, claim, greater_than, less_than
from sglab.experiments.moe.moe_lm import (
    WIKITEXT103,
    arm_table,
    check_lm_data,
    ffn_flops,
    ffn_stats,
    lm_base,
    metric,
)
from sglab.experiments.runs import Arm, RunSet


def param_matched_subkeys(d_ff: int, heads: int) -> int:
    """Largest n_sub whose PKM (n^2 d values + heads n d keys) has at most 2 d d_ff params."""
    n = int(math.isqrt(2 * d_ff))
    while n * n + heads * n > 2 * d_ff:
        n -= 1
    return n


def variants(d_ff: int, pkm_top_k: int, heads: int = 4) -> dict[str, dict[str, Any]]:
    def pkm(n_sub: int, activation: str) -> dict[str, Any]:
        return {"model.ffn": "pkm", "model.pkm_subkeys": n_sub, "model.pkm_heads": heads,
                "model.pkm_top_k": pkm_top_k, "model.pkm_activation": activation}

    dense = {"model.d_ff": d_ff}
    out = {"dense": dense}
    for div in (16, 8, 4):
        out[f"Top-K (K=d_ff/{div})"] = {**dense, "model.ffn": "topk", "model.ffn_top_k": d_ff // div}
    values = math.isqrt(d_ff)
    out["PKM ReLU (value count)"] = pkm(values, "relu")
    out["PKM softmax (value count)"] = pkm(values, "softmax")
    out["PKM ReLU (param-matched)"] = pkm(param_matched_subkeys(d_ff, heads), "relu")
    return out


class FfnApprox(Experiment):
    name = "ffn-approx"
    title = "Top-K activation and product-key memory vs the dense MLP (thesis Tabs. 7.1-7.2)"
    description = __doc__.split("\n\n")[1].replace("\n", " ")
    presets = {
        "quick": {"base": lm_base(32, 1, 2, 16, steps=10, batch=8, lr=3e-3, eval_every=10,
                                  eval_windows=8),
                  "d_ff": 64, "pkm_top_k": 4, "seeds": [0], "tolerance": 0.02,
                  "active_fraction": 0.1, "quiet": True},
        "default": {"base": lm_base(64, 2, 2, 128, steps=800, batch=32, lr=2e-3,
                                    eval_every=200, eval_windows=512),
                    "d_ff": 256, "pkm_top_k": 16, "seeds": [0], "tolerance": 0.02,
                    "active_fraction": 0.1, "quiet": False},
        # WT-S on WikiText-103: d 412, 16 layers, d_ff 2053 (Top-K 128..512), PKM 4 heads
        "paper": {"base": lm_base(412, 16, 4, 256, steps=100_000, batch=64, lr=2.5e-4,
                                  eval_every=5000, eval_windows=2048, threads=None,
                                  corpus=WIKITEXT103),
                  "d_ff": 2053, "pkm_top_k": 128, "seeds": [0], "tolerance": 0.02,
                  "active_fraction": 0.1, "quiet": False},
    }

    def arms(self, params: dict[str, Any]) -> list[Arm]:
        table = variants(params["d_ff"], params["pkm_top_k"])
        arms = []
        for name, overrides in table.items():
            base = params["base"]
            if overrides.get("model.ffn") == "pkm":  # activation: pkm_activation
                base = {**base, "model": {k: v for k, v in base["model"].items()
                                          if k != "activation"}}
            arms += [Arm({"variant": name}, base, overrides, seed) for seed in params["seeds"]]
        return arms

    def check_data(self, configs) -> None:
        check_lm_data(configs)

    def analyze(self, params: dict[str, Any], runs: RunSet, out_dir: Path) -> dict[str, Any]:
        d_ff = params["d_ff"]
        score = metric(runs)
        scores = {v: g.mean(score) for v, g in runs.group_by("variant").items()}
        scores["Top-K gap"] = scores["Top-K (K=d_ff/8)"] - scores["dense"]
        active = [a / d_ff for r in runs.where(variant="dense")
                  for a in ffn_stats(r)["active_units"]]
        claims = [
            claim("topk-moderate-k-matches-dense",
                  "Top-K activation with moderate K does not hurt (thesis Tab. 7.1).", scores,
                  [at_most("Top-K gap", params["tolerance"])], context=score,
                  shown=["dense", "Top-K (K=d_ff/8)", "Top-K gap"]),
            claim("pkm-relu-beats-softmax-and-trails-dense",
                  "PKM with ReLU beats PKM with softmax; both are worse than dense (thesis "
                  "Tab. 7.2).", scores,
                  [less_than("PKM ReLU (value count)", "PKM softmax (value count)"),
                   greater_than("PKM ReLU (param-matched)", "dense")], context=score,
                  shown=["PKM ReLU (value count)", "PKM softmax (value count)",
                         "PKM ReLU (param-matched)", "dense"]),
            claim("most-mlp-units-inactive",
                  "Only a small fraction of the dense MLP's units is active per token (thesis "
                  "Fig. 7.1: < 200 of 2053).", {"active fraction": active},
                  [at_most("active fraction", params["active_fraction"])],
                  context="mean active units / d_ff per layer, 16 iid_valid windows"),
        ]
        table = arm_table(runs, "variant", ffn_flops(runs.where(variant="dense")[0]))
        table["columns"].append("active units per layer")
        for row in table["rows"]:
            stats = ffn_stats(runs.where(variant=row[0])[0]).get("active_units", [])
            row.append(", ".join(f"{a:.1f}" for a in stats))
        sections = [{"title": "Approximations of the MLP", "tables": [table],
                     "text": "Top-K is computed densely (a quality probe: it saves only in W2). "
                             "PKM FLOPs: sub-key scores plus the weighted sum of the chosen "
                             "values; active units of a PKM are its nonzero value weights."}]
        return {"claims": claims, "sections": sections}


registry.register_experiment(FfnApprox())

__all__ = ["FfnApprox", "param_matched_subkeys", "variants"]
