"""sigma-MoE vs parameter- and FLOP-matched dense byte-level LMs (thesis Ch. 7, Tab. 7.3).

Presets and claims: ``moe-lm.yaml``. Shared by the chapter's experiments: the σ-MoE arm's
overrides, the headline metric (bits per byte, or perplexity on WikiText-103), the arm
table, and the expert usage / co-occurrence figures (Figs. 7.3, F.3).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field

from sglab import registry
from sglab.analysis.moe import ffn_statistics, mlp_flops_per_token
from sglab.config import RunConfig
from sglab.experiments.base import Experiment
from sglab.experiments.claims import Measured, per_seed
from sglab.experiments.runs import Arm, FinishedRun, RunSet
from sglab.experiments.spec import ExperimentParams, RunConfigDict
from sglab.models.ffn import param_matched_d_ff
from sglab.report.plots import Line, Panel, heatmap_grid, line_figure
from sglab.tasks.text import lm_metric
from sglab.tasks.text_corpora import require_corpus


def sigma_moe(n_experts: int, size: int, k: int, reg: float = 1e-4, dropout: float = 0.0,
              **extra: Any) -> dict[str, Any]:
    """Overrides of a sigma-MoE arm (Tab. F.3; E8: gamma 1e-4); ``extra``: more fields of
    the ffn family (``selection``, ``init``)."""
    out = {"model.ffn.kind": "sigma_moe", "model.ffn.experts": n_experts,
           "model.ffn.expert_size": size, "model.ffn.top_k": k, "model.ffn.reg_weight": reg}
    if dropout:
        out["model.ffn.expert_dropout"] = dropout
    return {**out, **{f"model.ffn.{key}": value for key, value in extra.items()}}


def metric(runs: RunSet | FinishedRun, split: str = "iid_test") -> str:
    """The runs' headline metric: ``<split>/bpb`` on bytes, ``<split>/ppl`` on WikiText-103."""
    first = runs if isinstance(runs, FinishedRun) else runs[0]
    return lm_metric(first.config.task.corpus, split)


def metric_title(name: str) -> str:
    """What a headline metric measures, in words."""
    return "Bits per byte" if name.endswith("/bpb") else "Perplexity per token"


def check_lm_data(configs: list[RunConfig]) -> None:
    """Raise SglabError naming the corpus files the runs need and lack (Enwik8, WikiText-103)."""
    for corpus in dict.fromkeys((c.task.corpus, c.task.path, c.task.sha256, c.task.data_dir)
                                for c in configs):
        require_corpus(*corpus)


def ffn_stats(run: FinishedRun, which: str = "last") -> dict[str, list]:
    """Active units / expert usage per layer on the first 16 iid_valid windows (cached), of
    the checkpoint ``which`` (the last, or a snapshot ``step_N``)."""
    key = "ffn_stats" if which == "last" else f"ffn_stats/{which}"
    return run.measure(key, lambda r: ffn_statistics(
        r.model(which), r.task.windows("iid_valid")[:16, :-1]))


def ffn_flops(run: FinishedRun, selector: bool = True) -> int:
    """Forward FLOPs per token of one MLP sub-block (the MoE: selector + K experts)."""
    return run.measure(f"ffn_flops/{selector}",
                       lambda r: mlp_flops_per_token(r.model(), selector))


def arm_table(runs: RunSet, label: str, reference_flops: int | None = None) -> dict[str, Any]:
    valid, test = metric(runs, "iid_valid"), metric(runs)
    unit = test.rsplit("/", 1)[-1]
    rows = []
    for name, group in runs.group_by(label).items():
        flops = ffn_flops(group[0])
        rows.append([name, group[0].summary.get("parameters"), flops,
                     f"{100 * flops / reference_flops:.1f}%" if reference_flops else "-",
                     group.mean_std(valid, 4), group.mean_std(test, 4),
                     group.mean_std("iid_test/accuracy", 3),
                     group.mean_std(lambda r: r.summary.get("seconds", float("nan")), 0)])
    return {"title": f"{metric_title(test)} at the end of training (mean ± std over seeds)",
            "columns": [label, "parameters", "MLP FLOPs/token (fwd)", "% of dense MLP FLOPs",
                        f"iid_valid {unit}", f"iid_test {unit}", "iid_test accuracy", "seconds"],
            "rows": rows}


def usage_figure(runs: RunSet, label: str, out_dir: Path, name: str = "expert_usage"):
    panels = []
    for arm, group in runs.group_by(label).items():
        stats = ffn_stats(group[0])
        if "usage" in stats:
            lines = [Line(list(range(1, len(u) + 1)), [max(x, 1e-6) for x in u], f"layer {i}", i,
                          "-", "o") for i, u in enumerate(stats["usage"])]
            panels.append(Panel(str(arm), lines, log_y=True, integer_x=True))
    return line_figure(out_dir, name, panels, title="expert usage by popularity",
                       xlabel="expert rank", ylabel="share of the selection weight", columns=4,
                       caption="Each expert's share of the total selection weight sel(x), "
                               "sorted, per layer, first seed, 16 iid_valid windows (thesis "
                               "Fig. 7.3).")


def co_occurrence_figure(runs: RunSet, label: str, out_dir: Path,
                         name: str = "expert_co_occurrence"):
    """Per MoE arm (first seed) and layer: how often two experts serve the same token."""
    cells = []
    for arm, group in runs.group_by(label).items():
        layers = ffn_stats(group[0]).get("co_occurrence")
        if layers:
            cells.append([(f"{arm}, layer {i}", matrix) for i, matrix in enumerate(layers)])
    if not cells:
        return None
    return heatmap_grid(out_dir, name, cells, title="expert co-occurrence", vmin=0.0,
                        xlabel="expert", ylabel="expert", cell_size=2.6,
                        caption="Share of tokens for which experts i and j are both among the "
                                "K chosen (diagonal 0), per layer, first seed, 16 iid_valid "
                                "windows (thesis Fig. F.3).")


class MoeLmParams(ExperimentParams):
    base: RunConfigDict  # the run config every arm starts from (the dense MLP's sizes aside)
    experts: int = Field(gt=0)  # N_E of the σ-MoE
    expert_size: int = Field(gt=0)  # G, units per expert
    top_k: int = Field(gt=0)  # K, experts per token
    dropout: float = Field(0.0, ge=0, lt=1)  # expert dropout δ of the σ-MoE (Eq. 7.21)
    twin_d_ff: int | None = None  # d_ff of the parameter-matched dense model (None: N_E G + N_E/2)


class MoeLM(Experiment):
    name = "moe-lm"
    params_model = MoeLmParams

    def arms(self, params: dict[str, Any]) -> list[Arm]:
        n, g, k = params["experts"], params["expert_size"], params["top_k"]
        twin = params["twin_d_ff"] or param_matched_d_ff(n, g)
        variants = {"dense (param-matched)": {"model.ffn.d_ff": twin},
                    "sigma-MoE": sigma_moe(n, g, k, dropout=params["dropout"]),
                    "dense (FLOP-matched)": {"model.ffn.d_ff": k * g}}
        return [Arm({"model": name}, params["base"], overrides, seed)
                for name, overrides in variants.items() for seed in params["seeds"]]

    def check_data(self, configs: list[RunConfig]) -> None:
        check_lm_data(configs)

    def analyze(self, params: dict[str, Any], runs: RunSet, out_dir: Path) -> dict[str, Any]:
        dense, moe = runs.where(model="dense (param-matched)"), runs.where(model="sigma-MoE")
        small = runs.where(model="dense (FLOP-matched)")
        score = metric(runs)
        moe_scores, dense_scores = moe.values(score), dense.values(score)
        flops = ffn_flops(moe[0], selector=False) / ffn_flops(dense[0])
        measured: dict[str, Any] = {"sigma-moe-matches-dense": Measured(
            {"sigma-MoE": per_seed(moe_scores), "dense": per_seed(dense_scores),
             "relative gap": per_seed((m - d) / d for m, d in zip(moe_scores, dense_scores,
                                                                 strict=True)),
             "MLP FLOPs fraction": flops},
            f"{score} per seed; relative gap (σ-MoE − dense) / dense of the same seed; MLP "
            f"FLOPs fraction: the K chosen experts over the dense twin's MLP (with the "
            f"selector: {ffn_flops(moe[0]) / ffn_flops(dense[0]):.3f})")}
        measured["sigma-moe-beats-flop-matched-dense"] = Measured(
            {"sigma-MoE": per_seed(moe_scores),
             "FLOP-matched dense": per_seed(small.values(score))}, f"{score} per seed")
        stats = [ffn_stats(r) for r in moe]
        measured["sigma-moe-uses-all-experts"] = Measured(
            {"dead experts": [d for s in stats for d in s["dead_experts"]],
             "usage entropy": [h for s in stats for h in s["usage_entropy"]]},
            "per layer, seeds one after another; normalised entropy H(usage) / log N_E of the "
            "experts' shares of the selection weight on 16 iid_valid windows")
        sections = [{"title": f"{metric_title(score)}, parameters and FLOPs",
                     "tables": [arm_table(runs, "model", ffn_flops(dense[0]))],
                     "text": "MLP FLOPs: forward matmul FLOPs of one MLP sub-block per token "
                             "(the MoE: selector plus K experts; attention and embeddings are "
                             "equal across arms), selector included; the thesis's % FLOPs "
                             "(K G / d_ff, without the selector) is in the first claim.",
                     "figures": [f for f in (usage_figure(runs, "model", out_dir),
                                             co_occurrence_figure(runs, "model", out_dir)) if f]}]
        first = params["seeds"][0]
        active = {r["model"]: ffn_stats(r).get("active_units") for r in runs if r.seed == first}
        sections.append({"title": "Active MLP units per layer (thesis Fig. 7.1)", "tables": [{
            "columns": ["model", "mean active units per token, by layer"],
            "rows": [[k, ", ".join(f"{a:.1f}" for a in v)] for k, v in active.items() if v]}]})
        return {"measured": measured, "sections": sections}


registry.register_experiment(MoeLM())

__all__ = ["MoeLM", "MoeLmParams", "arm_table", "check_lm_data", "co_occurrence_figure",
           "ffn_flops", "ffn_stats", "metric", "sigma_moe", "usage_figure"]
