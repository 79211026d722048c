"""Initialization scale decides reasoning vs memorizing (Zhang et al., NeurIPS 2024).

Decoder-only, one-head, post-LN transformers (ReLU MLP, learned positions, untied
readout) are trained on the composite anchor task (``tasks/anchors.py``) with every
weight drawn from N(0, d_in^(-2 gamma)). The unseen pair (4,3) is scored against its
inferential answer x-10 and its symmetric answer x-6 (the seen (3,4)).

Runs:
  phase   depth x gamma x learning rate x seed. Per seed the best accuracy over the
          learning rates is kept separately for each scoring, then averaged over seeds
          (the protocol of the paper's phase diagram). Cells whose seen-pair accuracy
          on test-split keys is below 90% are shaded.
  lr-wd   (optional) learning rate x weight decay at one depth and gamma on the task
          variant with (3,4) held out too; cell = mean inferential accuracy on (4,3).

Mechanism analyses compare the most symmetric and the most inferential phase run of
the smallest depth (seed 0): W_Q(1) condensation, embedding-covariance eigenvalues
(and their growth over training), singular values of every weight matrix, a t-SNE of
first-layer outputs and the attention maps of a (4,3) input with key 99.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from sglab import registry
from sglab.analysis.anchor_mechanisms import (
    attention_maps,
    embedding_eigenvalues,
    first_layer_outputs,
    probe_attention,
    query_condensation,
)
from sglab.analysis.representations import centroid_cosine
from sglab.analysis.spectra import effective_rank
from sglab.experiments.base import Experiment
from sglab.experiments.claims import Measured, NotMeasured
from sglab.experiments.init_scale.init_scale_mechanisms import mechanism_sections, probe_key_position
from sglab.experiments.runs import Arm, FinishedRun, RunSet
from sglab.experiments.spec import ExperimentParams, RunConfigDict
from sglab.report.plots import annotated_heatmap
from sglab.tasks.anchors import ALL_PAIRS, input_token_ids, probe_sequences, probe_unseen_input

SOLVED = 0.9  # seen-pair test accuracy below this is the shaded zone
DOMINANT = 0.5  # a run "has" a solution when that scoring reaches this and beats the other
SCORINGS = ("symmetric", "inferential", "test")
MECHANISM_CLAIMS = ("inferential-condenses", "inferential-embedding-low-rank",
                    "symmetric-clusters-mirrored-pairs", "attention-information-flow")


class LrWdStudy(BaseModel):
    model_config = ConfigDict(extra="forbid")
    depth: int  # depth of the study's models
    gamma: float  # their initialization rate
    lrs: list[float]  # peak learning rates (heatmap rows)
    weight_decays: list[float]  # weight decays (heatmap columns)
    seeds: list[int]  # seeds per cell


class InitScaleParams(ExperimentParams):
    base: RunConfigDict  # the run config every arm starts from
    depths: list[int]  # model depths of the phase diagram (rows)
    gammas: list[float]  # initialization rates: weights ~ N(0, d_in^(-2 gamma)) (columns)
    lrs: list[float]  # learning rates per cell; each scoring keeps the best per seed
    lr_wd: LrWdStudy | None = None  # the learning-rate x weight-decay study, if any
    tsne_points: int  # probe sequences (over the 16 anchor pairs) for first-layer outputs


class InitScale(Experiment):
    name = "init-scale"
    params_model = InitScaleParams

    # ------------------------------------------------------------------ runs
    def arms(self, params: dict[str, Any]) -> list[Arm]:
        arms = []
        for depth in params["depths"]:
            for gamma in params["gammas"]:
                for lr in params["lrs"]:
                    arms += [Arm({"group": "phase", "depth": str(depth), "gamma": f"{gamma:g}",
                                  "lr": f"{lr:g}"}, params["base"],
                                 {"model.n_layers": depth, "model.init.gamma": gamma,
                                  "train.lr": lr}, seed) for seed in params["seeds"]]
        study = params["lr_wd"]
        if study:
            for lr in study["lrs"]:
                for decay in study["weight_decays"]:
                    arms += [Arm({"group": "lr-wd", "depth": str(study["depth"]),
                                  "gamma": f"{study['gamma']:g}", "lr": f"{lr:g}",
                                  "weight_decay": f"{decay:g}"}, params["base"],
                                 {"model.n_layers": study["depth"],
                                  "model.init.gamma": study["gamma"], "train.lr": lr,
                                  "train.weight_decay": decay,
                                  "task.seen_non_inferential": False}, seed)
                             for seed in study["seeds"]]
        return arms

    # ------------------------------------------------------------------ analysis
    def analyze(self, params: dict[str, Any], runs: RunSet, out_dir: Path) -> dict[str, Any]:
        phase = [measure(run, params["tsne_points"]) for run in runs.where(group="phase")]
        cells = phase_cells(phase, params["depths"], params["gammas"])
        sections = [self._phase_section(cells, params, out_dir), _per_run_section(phase)]
        measured = {"small-init-inferential-large-init-symmetric":
                    solution_measurement(cells, params["depths"], params["gammas"]),
                    "condensation-grows-with-gamma":
                    condensation_measurement(phase, params["depths"], params["gammas"]),
                    **mechanism_measurements(phase)}
        exemplars = pick_exemplars(phase, min(params["depths"]))
        if exemplars:
            sections += mechanism_sections(exemplars, params, out_dir)
        else:
            sections.append({"title": "Mechanisms", "text": (
                "The smallest depth has a single run, so there is no pair of exemplar models "
                "to compare.")})
        study = runs.where(group="lr-wd")
        if len(study):
            sections.append(self._lr_wd_section(study, params["lr_wd"], out_dir))
        return {"measured": measured, "sections": sections}

    # --- phase diagram
    def _phase_section(self, cells, params, out_dir):
        depths, gammas = params["depths"], params["gammas"]
        figure = annotated_heatmap(
            out_dir, "phase_diagram",
            [(title, [[cells[(d, g)][key] for g in gammas] for d in depths])
             for key, title in zip(SCORINGS, ("symmetric accuracy on (4,3)",
                                              "inferential accuracy on (4,3)",
                                              "seen pairs, test-split keys"))],
            xticklabels=[f"{g:g}" for g in gammas], yticklabels=[str(d) for d in depths],
            xlabel="gamma (larger = smaller init)", ylabel="depth", title="phase diagram",
            shaded=[[cells[(d, g)]["test"] < SOLVED for g in gammas] for d in depths],
            caption="Accuracy on (4,3) against the symmetric and the inferential answer, and "
                    f"seen-pair test accuracy; hatched cells are below {SOLVED:.0%} on seen pairs.")
        rows = [[d, f"{g:g}", f"{c['symmetric']:.3f}", f"{c['inferential']:.3f}",
                 f"{c['test']:.3f}", c["label"], c["seeds"]]
                for (d, g), c in sorted(cells.items())]
        return {
            "title": "Phase diagram",
            "text": (f"Per seed the best accuracy over the learning rates {params['lrs']} is kept "
                     "for each scoring separately, then averaged over seeds "
                     f"{params['seeds']}. Shaded cells: seen-pair accuracy on test-split keys "
                     f"below {SOLVED:.0%}. A cell is 'inferential' or 'symmetric' when that "
                     f"accuracy is at least {DOMINANT} and above the other."),
            "tables": [{"title": "Accuracy on the unseen pair (4,3) and on seen pairs",
                        "columns": ["depth", "gamma", "symmetric (x-6)", "inferential (x-10)",
                                    "seen test", "solution", "seeds"], "rows": rows}],
            "figures": [figure],
        }

    @staticmethod
    def _lr_wd_section(study: RunSet, spec, out_dir):
        lrs, decays = spec["lrs"], spec["weight_decays"]
        matrix = [[study.where(lr=f"{lr:g}", weight_decay=f"{wd:g}").mean("unseen/inferential")
                   for wd in decays] for lr in lrs]
        figure = annotated_heatmap(
            out_dir, "lr_weight_decay",
            [(f"inferential accuracy on (4,3), depth {spec['depth']}, gamma {spec['gamma']:g}",
              matrix)], xticklabels=[f"{w:g}" for w in decays],
            yticklabels=[f"{lr:g}" for lr in lrs], xlabel="weight decay",
            ylabel="learning rate", title="learning rate x weight decay",
            caption="Inferential accuracy on (4,3).")
        return {"title": "Learning rate x weight decay", "text": (
            "Task variant with (3,4) held out as well (14 inferential training pairs); mean "
            f"inferential accuracy on (4,3) over seeds {spec['seeds']}."),
            "figures": [figure]}


# ----------------------------------------------------------------------------- claims


def solution_measurement(cells, depths: list[int], gammas: list[float]) -> Measured:
    """Per depth: the cell of the smallest initialization (largest gamma) and whether a
    larger initialization (a smaller gamma) gives a symmetric cell."""
    largest = max(gammas)
    smallest_init = [cells[(d, largest)] for d in depths]
    symmetric = [[g for g in gammas if g < largest and cells[(d, g)]["label"] == "symmetric"]
                 for d in depths]
    return Measured(
        {"depth": list(depths),
         "inferential at the largest γ": [c["inferential"] for c in smallest_init],
         "symmetric at the largest γ": [c["symmetric"] for c in smallest_init],
         "seen pairs at the largest γ": [c["test"] for c in smallest_init],
         "symmetric cells at a smaller γ": [", ".join(f"{g:g}" for g in found) or "none"
                                            for found in symmetric],
         "a smaller γ symmetric": [bool(found) for found in symmetric]},
        f"one entry per depth; largest γ = {largest:g}; a cell is the mean over seeds of each "
        "seed's best accuracy over the learning rates; it is symmetric when the symmetric "
        f"accuracy on (4,3) is ≥ {DOMINANT} and above the inferential one, with seen-pair "
        f"accuracy ≥ {SOLVED:.0%}")


def condensation_measurement(phase, depths: list[int], gammas: list[float]
                             ) -> Measured | NotMeasured:
    """Per depth: the W_Q(1) covering fraction at the largest and at the smallest gamma."""
    if len(set(gammas)) < 2:
        return NotMeasured("needs at least two initialization rates")

    def fraction(depth, gamma) -> float:
        return statistics.mean(r["condensation_fraction"] for r in phase
                               if r["depth"] == depth and r["gamma"] == gamma)

    return Measured(
        {"depth": list(depths),
         "W_Q(1) fraction at the largest γ": [fraction(d, max(gammas)) for d in depths],
         "W_Q(1) fraction at the smallest γ": [fraction(d, min(gammas)) for d in depths]},
        "one entry per depth; fraction of W_Q(1) neurons' groups (cosine ≥ 0.7) needed to "
        f"cover 90% of the neurons (lower: more condensed), mean over the runs of γ "
        f"{max(gammas):g} and {min(gammas):g}")


def mechanism_measurements(phase) -> dict[str, Measured | NotMeasured]:
    """The solution-type comparisons: medians over the inferential and the symmetric runs
    of every depth."""
    inferential = [r for r in phase if r["solution"] == "inferential"]
    symmetric = [r for r in phase if r["solution"] == "symmetric"]
    if not inferential or not symmetric:
        reason = (f"needs both solution types among the runs; got {len(inferential)} "
                  f"inferential and {len(symmetric)} symmetric")
        return {claim_id: NotMeasured(reason) for claim_id in MECHANISM_CLAIMS}
    counted = (f"medians over {len(inferential)} inferential and {len(symmetric)} symmetric "
               "runs of every depth")

    def median(group, key) -> float:
        return statistics.median(r[key] for r in group)

    def both(name, key) -> dict[str, float]:
        return {f"{name}, inferential": median(inferential, key),
                f"{name}, symmetric": median(symmetric, key)}

    return {
        "inferential-condenses": Measured(
            both("W_Q(1) fraction", "condensation_fraction"),
            "fraction of W_Q(1) neuron groups (cosine ≥ 0.7) needed to cover 90% of the "
            f"neurons (lower: more condensed); {counted}"),
        "inferential-embedding-low-rank": Measured(
            both("embedding effective rank", "embedding_rank"),
            f"effective rank exp(H) of the input-token embedding covariance spectrum; {counted}"),
        "symmetric-clusters-mirrored-pairs": Measured(
            {**both("cos (3,4)-(4,3)", "mirrored"),
             "cos (3,4)-(1,2), symmetric": median(symmetric, "unmirrored")},
            "cosine between the centred mean first-layer outputs X_ao(1) (last token) of two "
            f"anchor pairs; {counted}"),
        "attention-information-flow": Measured(
            {**both("layer-1 anchors→key", "anchors_to_key"),
             **both("layer-1 last→anchors", "last_to_anchors")},
            "first-layer attention on the (4,3) input with key 99: mean attention of the two "
            "anchors on the key, and the last token's attention on both anchors (summed); "
            f"{counted}"),
    }


# ----------------------------------------------------------------------------- helpers


def measure(run: FinishedRun, probe_points: int) -> dict[str, Any]:
    """A phase run's grid values, scores, solution type and mechanism measures."""
    model = run.model()
    tokens, pairs = probe_sequences(run.config.task, probe_points // len(ALL_PAIRS), seed=0)
    outputs = first_layer_outputs(model, tokens[:, :-1])
    probe = probe_unseen_input(run.config.task.seq_len)
    first_layer = probe_attention(attention_maps(model, probe), probe_key_position(probe))[0]
    record = {"run": run, "depth": run.config.model.n_layers,
              "gamma": run.config.model.init.gamma, "lr": run.config.train.lr, "seed": run.seed,
              "test": run.final["iid_test/exact_match"],
              "inferential": run.final["unseen/inferential"],
              "symmetric": run.final["unseen/symmetric"],
              "condensation": query_condensation(model),
              "embedding_rank": effective_rank(embedding_eigenvalues(model, input_token_ids())),
              "mirrored": centroid_cosine(outputs, pairs.numpy(), 34, 43),
              "unmirrored": centroid_cosine(outputs, pairs.numpy(), 34, 12),
              "anchors_to_key": (first_layer["first anchor→key"]
                                 + first_layer["second anchor→key"]) / 2,
              "last_to_anchors": (first_layer["last→first anchor"]
                                  + first_layer["last→second anchor"])}
    record["condensation_fraction"] = record["condensation"].fraction
    record["solution"] = solution_type(record)
    return record


def _per_run_section(phase) -> dict:
    rows = [[r["depth"], f"{r['gamma']:g}", f"{r['lr']:g}", r["seed"], f"{r['test']:.3f}",
             f"{r['symmetric']:.3f}", f"{r['inferential']:.3f}", r["solution"],
             f"{r['condensation'].covering} ({r['condensation'].fraction:.2f})",
             f"{r['embedding_rank']:.2f}", f"{r['mirrored']:.3f}", f"{r['anchors_to_key']:.2f}",
             f"{r['last_to_anchors']:.2f}"] for r in phase]
    return {"title": "Runs", "tables": [{
        "columns": ["depth", "gamma", "lr", "seed", "seen test", "symmetric", "inferential",
                    "solution", "W_Q(1) groups covering 90% (fraction)",
                    "embedding effective rank", "cos (3,4)-(4,3) X_ao(1)",
                    "layer-1 anchors→key", "layer-1 last→anchors"], "rows": rows}]}


def solution_type(run: dict[str, Any]) -> str:
    """'inferential', 'symmetric', 'unsolved' (seen pairs below 90%) or 'other'."""
    if run["test"] < SOLVED:
        return "unsolved"
    if run["inferential"] >= DOMINANT and run["inferential"] > run["symmetric"]:
        return "inferential"
    if run["symmetric"] >= DOMINANT and run["symmetric"] > run["inferential"]:
        return "symmetric"
    return "other"


def phase_cells(runs: list[dict[str, Any]], depths: list[int],
                gammas: list[float]) -> dict[tuple[int, float], dict[str, Any]]:
    """Per (depth, gamma): best over learning rates per seed and scoring, mean over seeds."""
    cells = {}
    for depth in depths:
        for gamma in gammas:
            group = [r for r in runs if r["depth"] == depth and r["gamma"] == gamma]
            seeds = sorted({r["seed"] for r in group})
            cell: dict[str, Any] = {"depth": depth, "gamma": gamma, "seeds": len(seeds)}
            for key in SCORINGS:
                cell[key] = statistics.mean(max(r[key] for r in group if r["seed"] == s)
                                            for s in seeds)
            cell["label"] = solution_type(cell)
            cells[(depth, gamma)] = cell
    return cells


def pick_exemplars(runs: list[dict[str, Any]], depth: int) -> dict[str, dict[str, Any]]:
    """A symmetric and an inferential run of ``depth`` (first seed) for the mechanism plots.

    Runs with that solution come first, then the higher accuracy of that kind; the two
    exemplars are distinct runs (empty dict if there are fewer than two runs).
    """
    first_seed = min(r["seed"] for r in runs)
    pool = [r for r in runs if r["depth"] == depth and r["seed"] == first_seed]
    if len(pool) < 2:
        return {}
    other = {"symmetric": "inferential", "inferential": "symmetric"}
    rank = lambda kind: (lambda r: (r["solution"] == kind, r[kind] - r[other[kind]]))
    symmetric = max(pool, key=rank("symmetric"))
    inferential = max((r for r in pool if r is not symmetric), key=rank("inferential"))
    return {"symmetric": symmetric, "inferential": inferential}


registry.register_experiment(InitScale())

__all__ = ["InitScale", "phase_cells", "pick_exemplars", "solution_type"]
