"""Top-K activation and product-key memory as approximations of the MLP (thesis Tabs. 7.1-7.2).

Presets and claims: ``ffn-approx.yaml``. A dense ReLU MLP, Top-K activation at three K
(Eqs. 7.6-7.7) and product-key memories (Eq. 7.8) in every layer of the same byte-level LM
(see moe-lm), and the dense model's active units per token (Fig. 7.1).
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

from pydantic import Field

from sglab import registry
from sglab.experiments.base import Experiment
from sglab.experiments.claims import Measured, per_seed
from sglab.experiments.moe.moe_lm import arm_table, check_lm_data, ffn_flops, ffn_stats, metric
from sglab.experiments.runs import Arm, RunSet
from sglab.experiments.spec import ExperimentParams, RunConfigDict

TOP_K = {div: f"Top-K (K=d_ff/{div})" for div in (16, 8, 4)}  # arm names by d_ff / K


def param_matched_subkeys(d_ff: int, heads: int) -> int:
    """Largest n_sub whose PKM (n^2 d values + heads n d keys) has at most 2 d d_ff params."""
    n = int(math.isqrt(2 * d_ff))
    while n * n + heads * n > 2 * d_ff:
        n -= 1
    return n


def variants(d_ff: int, pkm_top_k: int, heads: int = 4) -> dict[str, dict[str, Any]]:
    def pkm(n_sub: int, activation: str) -> dict[str, Any]:
        return {"model.ffn": {"kind": "pkm", "subkeys": n_sub, "heads": heads,
                              "top_k": pkm_top_k, "score_activation": activation}}

    dense = {"model.ffn.d_ff": d_ff}
    out = {"dense": dense}
    for div, name in TOP_K.items():
        out[name] = {**dense, "model.ffn.kind": "topk", "model.ffn.top_k": d_ff // div}
    values = math.isqrt(d_ff)
    out["PKM ReLU (value count)"] = pkm(values, "relu")
    out["PKM softmax (value count)"] = pkm(values, "softmax")
    out["PKM ReLU (param-matched)"] = pkm(param_matched_subkeys(d_ff, heads), "relu")
    return out


class FfnApproxParams(ExperimentParams):
    base: RunConfigDict  # the run config every arm starts from (the MLP's kind aside)
    d_ff: int = Field(gt=0)  # units of the dense MLP; Top-K keeps d_ff / 16, / 8, / 4
    pkm_top_k: int = Field(gt=0)  # values each PKM head reads per token


class FfnApprox(Experiment):
    name = "ffn-approx"
    params_model = FfnApproxParams

    def arms(self, params: dict[str, Any]) -> list[Arm]:
        table = variants(params["d_ff"], params["pkm_top_k"])
        arms = []
        for name, overrides in table.items():
            # a PKM arm sets the whole ffn family (not the base's MLP activation)
            arms += [Arm({"variant": name}, params["base"], overrides, seed)
                     for seed in params["seeds"]]
        return arms

    def check_data(self, configs) -> None:
        check_lm_data(configs)

    def analyze(self, params: dict[str, Any], runs: RunSet, out_dir: Path) -> dict[str, Any]:
        d_ff = params["d_ff"]
        score = metric(runs)
        final = {v: per_seed(g.values(score)) for v, g in runs.group_by("variant").items()}

        def relative_gap(div: int) -> Any:
            return per_seed((t - d) / d for t, d in zip(final[TOP_K[div]], final["dense"],
                                                        strict=True))

        dense = runs.where(variant="dense")
        active = [[a / d_ff for a in ffn_stats(r)["active_units"]] for r in dense]
        context = f"{score} per seed"
        measured = {
            "topk-moderate-k-matches-dense": Measured(
                {"dense": final["dense"], TOP_K[8]: final[TOP_K[8]], TOP_K[4]: final[TOP_K[4]],
                 "relative gap (K=d_ff/8)": relative_gap(8),
                 "relative gap (K=d_ff/4)": relative_gap(4)},
                f"{context}; relative gap (Top-K − dense) / dense of the same seed"),
            "topk-improves-dense": Measured(
                {TOP_K[16]: final[TOP_K[16]], "dense": final["dense"]}, context),
            "pkm-relu-beats-softmax-and-trails-dense": Measured(
                {name: final[name] for name in ("PKM ReLU (value count)",
                                                "PKM softmax (value count)",
                                                "PKM ReLU (param-matched)", "dense")}, context),
            "pkm-param-matched-beats-value-count": Measured(
                {name: final[name] for name in ("PKM ReLU (param-matched)",
                                                "PKM ReLU (value count)")}, context),
            "most-mlp-units-inactive": Measured(
                {"active fraction": [a for seed in active for a in seed],
                 "mean active fraction": per_seed(statistics.fmean(seed) for seed in active)},
                "mean active units per token / d_ff of the dense model on 16 iid_valid "
                "windows, per layer (seeds one after another); its mean over layers per seed"),
        }
        table = arm_table(runs, "variant", ffn_flops(runs.where(variant="dense")[0]))
        table["columns"].append("active units per layer")
        for row in table["rows"]:
            stats = ffn_stats(runs.where(variant=row[0])[0]).get("active_units", [])
            row.append(", ".join(f"{a:.1f}" for a in stats))
        sections = [{"title": "Approximations of the MLP", "tables": [table],
                     "text": "Top-K is computed densely (a quality probe: it saves only in W2). "
                             "PKM FLOPs: sub-key scores plus the weighted sum of the chosen "
                             "values; active units of a PKM are its nonzero value weights; "
                             "active units: first seed."}]
        return {"measured": measured, "sections": sections}


registry.register_experiment(FfnApprox())

__all__ = ["FfnApprox", "FfnApproxParams", "param_matched_subkeys", "variants"]
