"""Top-K activation and product-key memory as approximations of the MLP (thesis Tabs. 7.1-7.2).

Presets and claims: ``ffn-approx.yaml``. A dense ReLU MLP, Top-K activation at three K
(Eqs. 7.6-7.7) and product-key memories (Eq. 7.8) in every layer of the same byte-level LM
(see moe-lm), and the dense model's active units per token (Fig. 7.1), also across model
sizes and over training (``sparsity``: Fig. F.1 and App. F.1.2, where the count of active units
stays the same as the model and d_ff double, so the active fraction falls).
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from sglab import registry
from sglab.experiments.base import Experiment
from sglab.experiments.claims import Measured, per_seed
from sglab.experiments.moe.moe_lm import arm_table, check_lm_data, ffn_flops, ffn_stats, metric
from sglab.experiments.runs import Arm, RunSet
from sglab.experiments.spec import ExperimentParams, RunConfigDict
from sglab.report.plots import Line, Panel, line_figure

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


class SparsityScan(BaseModel):
    """Dense models of growing size trained longer than the approximation arms, with weight
    snapshots, for the active-unit count against model size and training length."""

    model_config = ConfigDict(extra="forbid")
    sizes: list[tuple[int, int]] = Field(min_length=1)  # (d_model, d_ff) per model
    steps: int = Field(gt=0)
    snapshots: list[int] = Field(min_length=1)  # steps whose active units are counted

    @model_validator(mode="after")
    def _check(self) -> SparsityScan:
        if any(s <= 0 or s > self.steps for s in self.snapshots):
            raise ValueError(f"sparsity snapshots must lie in 1..steps ({self.steps})")
        if any(d_model <= 0 or d_ff <= 0 for d_model, d_ff in self.sizes):
            raise ValueError("sparsity sizes are positive (d_model, d_ff) pairs")
        return self


class FfnApproxParams(ExperimentParams):
    base: RunConfigDict  # the run config every arm starts from (the MLP's kind aside)
    d_ff: int = Field(gt=0)  # units of the dense MLP; Top-K keeps d_ff / 16, / 8, / 4
    pkm_top_k: int = Field(gt=0)  # values each PKM head reads per token
    sparsity: SparsityScan | None = None


def size_name(d_model: int, d_ff: int) -> str:
    return f"d {d_model}, d_ff {d_ff}"


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
        scan = params.get("sparsity")
        for d_model, d_ff in scan["sizes"] if scan else []:
            overrides = {"model.d_model": d_model, "model.ffn.d_ff": d_ff,
                         "train.steps": scan["steps"],
                         "train.snapshot_steps": sorted(set(scan["snapshots"]))}
            arms += [Arm({"size": size_name(d_model, d_ff)}, params["base"], overrides, seed)
                     for seed in params["seeds"]]
        return arms

    def check_data(self, configs) -> None:
        check_lm_data(configs)

    def analyze(self, params: dict[str, Any], all_runs: RunSet, out_dir: Path) -> dict[str, Any]:
        d_ff = params["d_ff"]
        runs = all_runs.where(lambda r: "variant" in r.labels)
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
        if params.get("sparsity"):
            sections.append(sparsity_section(params["sparsity"],
                                             all_runs.where(lambda r: "size" in r.labels),
                                             out_dir))
        return {"measured": measured, "sections": sections}


def active_units_at(run, step: int) -> float:
    """Mean over layers of the active units per token at a snapshot step."""
    return statistics.fmean(ffn_stats(run, f"step_{step}")["active_units"])


def sparsity_section(scan: dict[str, Any], runs: RunSet, out_dir: Path) -> dict[str, Any]:
    """Active units per token (mean over layers, then over seeds) by model size and training
    step: the count (thesis Figs. 7.1, F.1) and the fraction of d_ff."""
    steps = sorted(set(scan["snapshots"]))
    rows, counts, fractions = [], [], []
    for i, (d_model, d_ff) in enumerate(scan["sizes"]):
        label = size_name(d_model, d_ff)
        group = runs.where(size=label)
        per_step = [[active_units_at(r, s) for r in group] for s in steps]
        mean = [statistics.fmean(v) for v in per_step]
        rows.append([label, len(group), *(f"{m:.1f} ({m / d_ff:.1%})" for m in mean)])
        counts.append(Line(steps, mean, label, color=i, marker="o"))
        fractions.append(Line(steps, [m / d_ff for m in mean], label, color=i, marker="o"))
    figure = line_figure(out_dir, "active_units_by_size", [
        Panel("active units per token", counts, xlabel="step"),
        Panel("active units / d_ff", fractions, log_y=True, xlabel="step")],
        title="active MLP units over training, by model size",
        caption="Dense ReLU MLP: units with a positive pre-activation per token, mean over "
                "layers and seeds, 16 iid_valid windows, at weight snapshots (thesis Figs. "
                "7.1 and F.1: below 200 of d_ff 2053 and the same counts at d_ff 4110).")
    table = {"title": "Active units per token, mean over layers and seeds (fraction of d_ff)",
             "columns": ["model", "seeds", *(f"step {s}" for s in steps)], "rows": rows}
    return {"title": "Active MLP units by model size and training length (thesis Figs. 7.1, F.1)",
            "tables": [table], "figures": [figure],
            "text": f"Dense ReLU models of {len(scan['sizes'])} sizes, {scan['steps']} steps "
                    "each on the base's schedule; the thesis finds the count set by the data "
                    "more than by the model's size (App. F.1.2)."}


registry.register_experiment(FfnApprox())

__all__ = ["FfnApprox", "FfnApproxParams", "SparsityScan", "param_matched_subkeys",
           "sparsity_section", "variants"]
