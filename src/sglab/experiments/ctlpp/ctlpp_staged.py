"""CTL++ variant 'S' (thesis Sec. 6.3.2, Figs. 6.4, E.3, E.4): how much overlap between
the two paths does a model need to compose across them?

Each cell of the grid sets |G_o| (shared functions, the y-axis) and |S_a^f ∩ S_b^f|
(shared symbols, the x-axis); the OOD test chains stage-1 functions of one path with
stage-2 functions of the other. The thesis reports the mean final OOD accuracy of five
seeds per cell and model: 100% only with 16 of 32 shared functions and 6 of 8 shared
symbols, worse with less overlap.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import model_validator

from sglab import registry
from sglab.experiments.base import Experiment
from sglab.experiments.claims import ClaimSpec, Measured, NotMeasured, per_seed
from sglab.experiments.ctlpp.ctlpp import (
    IID,
    LABELS,
    OOD,
    SOLVED,
    ModelName,
    measured_if_complete,
)
from sglab.experiments.runs import Arm, RunSet
from sglab.experiments.spec import ExperimentParams, RunConfigDict
from sglab.report.plots import annotated_heatmap

LEARNED = 0.9  # a cell counts when its mean IID accuracy reaches this
FULL_OVERLAP = (16, 6)  # Fig. 6.4: the only cell at 100% (shared functions, shared symbols)

Cell = tuple[int, int]


class StagedParams(ExperimentParams):
    functions: list[int]  # |G_o|: the shared functions of the grid's rows
    symbols: list[int]  # |S_a^f ∩ S_b^f|: the shared symbols of the grid's columns
    models: dict[ModelName, RunConfigDict]  # the run config of each model's arms
    train_models: list[str]  # the models of `models` that train (and are analyzed)

    @model_validator(mode="after")
    def _trained_models_known(self) -> StagedParams:
        unknown = [m for m in self.train_models if m not in self.models]
        if unknown or not self.train_models:
            raise ValueError(f"train_models {self.train_models!r}: pick one or more of "
                             f"{', '.join(self.models)}")
        return self


def rise_along_axes(ood: Mapping[Cell, float], iid: Mapping[Cell, float],
                    functions: list[int], symbols: list[int]
                    ) -> tuple[float | None, float | None]:
    """(rise along the shared-functions axis, rise along the shared-symbols axis).

    Functions: the mean over shared-symbol columns of OOD(most functions) - OOD(fewest),
    symbols likewise over rows; only pairs of cells that both learned the IID task
    (mean IID ≥ LEARNED) count. None where no such pair exists.
    """
    def rise(pairs):
        diffs = [ood[high] - ood[low] for low, high in pairs
                 if low in ood and high in ood and min(iid[low], iid[high]) >= LEARNED]
        return statistics.mean(diffs) if diffs else None

    lo_f, hi_f, lo_s, hi_s = min(functions), max(functions), min(symbols), max(symbols)
    return (rise([((lo_f, s), (hi_f, s)) for s in symbols]) if lo_f != hi_f else None,
            rise([((f, lo_s), (f, hi_s)) for f in functions]) if lo_s != hi_s else None)


def overlap_values(ood: Mapping[str, Mapping[Cell, list[float]]],
                   iid: Mapping[str, Mapping[Cell, float]], functions: list[int],
                   symbols: list[int]) -> dict[str, Any]:
    """Every value the claims read, per model (``ood``: model -> cell -> OOD accuracy per
    seed in seed order; ``iid``: model -> cell -> mean IID accuracy): the rise along each
    axis per seed, the cell of full overlap per seed and the best other cell's mean, and the
    mean over the cells with 16 shared functions per seed."""
    values: dict[str, Any] = {}
    for model, cells in ood.items():
        label = LABELS[model]
        seeds = min(len(v) for v in cells.values())
        rises = [rise_along_axes({c: v[i] for c, v in cells.items()}, iid[model], functions,
                                 symbols) for i in range(seeds)]
        for axis, name in enumerate(("functions", "symbols")):
            if rises and rises[0][axis] is not None:
                values[f"{label} rise over shared {name}"] = per_seed(r[axis] for r in rises)
        if FULL_OVERLAP in cells and len(cells) > 1:
            f, s = FULL_OVERLAP
            values[f"{label} {f} functions, {s} symbols"] = per_seed(cells[FULL_OVERLAP])
            values[f"{label} best other cell"] = max(statistics.mean(v) for c, v in cells.items()
                                                     if c != FULL_OVERLAP)
        row = [v for (f, _), v in cells.items() if f == FULL_OVERLAP[0]]
        if row:
            values[f"{label} at {FULL_OVERLAP[0]} shared functions"] = per_seed(
                statistics.mean(v[i] for v in row) for i in range(seeds))
    return values


def overlap_measurements(specs: Mapping[str, ClaimSpec], values: Mapping[str, Any],
                         situation: str) -> dict[str, Measured | NotMeasured]:
    """Each claim of the spec on the values it reads; NOT MEASURED where a model it reads
    did not train or the grid lacks its cells (``situation``: what trained, on which grid)."""
    contexts = {
        "staged-needs-overlap": f"final OOD accuracy of the cell {FULL_OVERLAP[0]} / "
                                f"{FULL_OVERLAP[1]} per seed; the best other cell's mean over "
                                f"seeds (success: above {SOLVED})",
        "bilstm-needs-overlap": "mean final OOD gain from the fewest to the most shared "
                                "functions (symbols), over the other axis's cells where both "
                                f"cells learned IID (mean ≥ {LEARNED}), per seed",
        "bilstm-below-ndr-at-16-functions": "mean final OOD accuracy over the cells with "
                                            f"{FULL_OVERLAP[0]} shared functions, per seed"}
    contexts["transformer-needs-overlap"] = contexts["bilstm-needs-overlap"]
    contexts["transformer-above-ndr-at-16-functions"] = contexts[
        "bilstm-below-ndr-at-16-functions"]
    return {claim_id: measured_if_complete(spec, values, contexts.get(claim_id, ""), situation)
            for claim_id, spec in specs.items()}


class CTLPPStaged(Experiment):
    name = "ctlpp-staged"
    params_model = StagedParams

    def arms(self, params: dict[str, Any]) -> list[Arm]:
        return [Arm({"model": model, "functions": str(f), "symbols": str(s)},
                    params["models"][model],
                    {"task.variant": "S", "task.shared_functions": f,
                     "task.shared_symbols": s}, seed)
                for model in params["train_models"]
                for f in params["functions"]
                for s in params["symbols"] for seed in params["seeds"]]

    def analyze(self, params: dict[str, Any], runs: RunSet, out_dir: Path) -> dict[str, Any]:
        functions, symbols = params["functions"], params["symbols"]
        cells = runs.group_by("model", "functions", "symbols")
        figures, rows, ood, iid = [], [], {}, {}
        for model in runs.label_values("model"):
            ood[model] = {(int(f), int(s)): [r.final[OOD] for r in cell]  # in seed order
                          for (m, f, s), cell in cells.items() if m == model}
            iid[model] = {(int(f), int(s)): cell.mean(IID) for (m, f, s), cell in cells.items()
                          if m == model}
            means = {c: statistics.mean(v) for c, v in ood[model].items()}
            grid = np.array([[means.get((f, s), np.nan) for s in symbols] for f in functions])
            figures.append(annotated_heatmap(
                out_dir, f"staged_{model}", [(LABELS[model], grid)], xticklabels=symbols,
                yticklabels=functions, xlabel="shared symbols per function in G_o",
                ylabel="shared functions |G_o|", title=f"{LABELS[model]}: mean OOD accuracy",
                caption="Mean final OOD accuracy over seeds (thesis Figs. 6.4, E.3, E.4); "
                        f"hatched: mean IID below {LEARNED}.",
                shaded=[[iid[model].get((f, s), 0.0) < LEARNED for s in symbols]
                        for f in functions]))
        for (model, f, s), cell in cells.items():
            rows.append([LABELS[model], f, s, len(cell), cell.mean_std(IID, 3),
                         cell.mean_std(OOD, 3)])
        table = {"title": "Final-step accuracy per cell (mean ± std over seeds)",
                 "columns": ["model", "shared functions", "shared symbols", "seeds", "IID",
                             "OOD"], "rows": rows}
        values = overlap_values(ood, iid, functions, symbols)
        situation = (f"trained {', '.join(LABELS[m] for m in ood)} on shared functions "
                     f"{functions} x shared symbols {symbols}; a rise needs two cells of an "
                     f"axis that learned IID (mean ≥ {LEARNED})")
        return {"measured": overlap_measurements(self.spec.claims, values, situation),
                "sections": [
            {"title": "OOD accuracy over the overlap grid (Figs. 6.4, E.3, E.4)",
             "tables": [table], "figures": figures,
             "text": "y: |G_o|, the functions shared by both paths in stage 2; x: the symbols "
                     "a function of G_o may receive after both paths. IID test: 1,000 unseen "
                     "sequences of the training graph; OOD: 1,000 chains crossing paths."}]}


registry.register_experiment(CTLPPStaged())
