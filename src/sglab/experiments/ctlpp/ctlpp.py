"""CTL++ (thesis Ch. 6): do the NDR and a Bi-LSTM compose functions in pairs never seen
together? Splits 'A' and 'R', many seeds, and the representations of each symbol.

Every seed is a separate run (the thesis reports seed distributions: Table 6.1, mean ±
std of the final-step accuracy over 25 seeds). The report shows the OOD accuracy of
every seed (strip plot), a per-cell table (mean ± std, median, fraction of seeds above
0.95 with its Wilson interval), and per seed the cosine matrices of the classifier
input for each output symbol (Fig. 6.3): complete-linkage clusters, how far the two
function groups separate, and the clusters' agreement with the groups (ARI).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import numpy as np

from sglab import registry
from sglab.analysis.symbol_clusters import (
    SymbolClusters,
    compatibility_matrix,
    group_specific_gap,
    symbol_clusters,
)
from sglab.analysis.symbol_probes import classifier_inputs, function_groups, pair_correct
from sglab.experiments.base import Experiment
from sglab.experiments.claims import ClaimSpec, Measured, NotMeasured, per_seed
from sglab.experiments.runs import Arm, FinishedRun, RunSet
from sglab.experiments.spec import ExperimentParams, RunConfigDict
from sglab.report.plots import annotated_heatmap, heatmap_grid, labelled_scatter, seed_strip

IID, OOD = "iid_test/exact_match", "ood_test/exact_match"
LABELS = {"ndr": "NDR", "bilstm": "Bi-LSTM", "transformer": "Transformer"}
THESIS = {("bilstm", "A"): "1.00 / 0.95 ± 0.03", ("bilstm", "R"): "1.00 / 1.00 ± 0.00",
          ("transformer", "A"): "1.00 / 0.21 ± 0.09", ("transformer", "R"): "1.00 / 0.75 ± 0.25",
          ("ndr", "A"): "1.00 / 0.34 ± 0.26", ("ndr", "R"): "1.00 / 0.75 ± 0.27"}
SOLVED = 0.95  # a seed "generalizes" above this OOD accuracy (thesis Sec. 6.3.1)
FITTED = 0.97  # a seed fits the training distribution at this IID accuracy

ModelName = Literal["ndr", "bilstm", "transformer"]


class CTLPPParams(ExperimentParams):
    splits: list[Literal["A", "R"]]  # the CTL++ variants, one arm per split, model and seed
    models: dict[ModelName, RunConfigDict]  # the run config of each model's arms


def wilson(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion."""
    if n == 0:
        return (0.0, 1.0)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def measured_if_complete(spec: ClaimSpec, values: Mapping[str, Any], context: str,
                         absent: str) -> Measured | NotMeasured:
    """``Measured`` with the values the claim reads where all of them are there; else
    NotMeasured (``absent``: why they can be missing, e.g. the preset trains no Transformer)."""
    needed = {name for rule in spec.rules() for name in rule.names()} | set(spec.references)
    missing = sorted(needed - set(values))
    if missing:
        return NotMeasured(f"{absent}: no {', '.join(missing)}")
    return Measured({name: value for name, value in values.items() if name in needed}, context)


def share_above(values: list[float], threshold: float = SOLVED) -> list[bool]:
    return [v > threshold for v in values]


def accuracy_measurements(specs: Mapping[str, ClaimSpec], ood: Mapping[tuple[str, str], list],
                          iid: Mapping[tuple[str, str], list]
                          ) -> dict[str, Measured | NotMeasured]:
    """The claims on Table 6.1 and the success rates of Sec. 6.3.1 from the final IID and
    OOD accuracies of each (model, split) cell, one value per seed in seed order."""
    def name(key):
        return f"{LABELS[key[0]]} {key[1]}"

    absent = ("trained " + ", ".join(f"{name(k)} ({len(v)} seeds)" for k, v in ood.items()))
    measured = {"iid-solved": measured_if_complete(
        specs["iid-solved"], {name(k): per_seed(v) for k, v in iid.items()
                              if k[0] in ("ndr", "bilstm")},
        "IID test accuracy at the final step", absent)}
    measured["bilstm-generalizes"] = measured_if_complete(
        specs["bilstm-generalizes"],
        {name(k): per_seed(v) for k, v in ood.items() if k[0] == "bilstm"},
        "OOD test accuracy at the final step", absent)
    measured["ndr-fails-often"] = measured_if_complete(
        specs["ndr-fails-often"],
        {f"NDR '{s}' share of seeds above {SOLVED}": per_seed(share_above(v))
         for (m, s), v in ood.items() if m == "ndr"},
        f"per seed: OOD test accuracy above {SOLVED} at the final step (every seed)", absent)
    measured["a-harder-than-r"] = measured_if_complete(
        specs["a-harder-than-r"], {name(k): per_seed(v) for k, v in ood.items() if k[0] == "ndr"},
        "OOD test accuracy at the final step (every seed)", absent)
    converged = {s: [o for o, i in zip(ood[m, s], iid[m, s]) if i >= FITTED]
                 for (m, s) in ood if m == "transformer"}
    transformer = {f"Transformer {s}": statistics.mean(v) for s, v in converged.items() if v}
    transformer.update({f"Transformer '{s}' share of seeds above {SOLVED}":
                        statistics.mean(share_above(v)) for s, v in converged.items() if v})
    measured["transformer-fails-ood"] = measured_if_complete(
        specs["transformer-fails-ood"], transformer,
        f"mean OOD test accuracy (final step) over the seeds that converge (IID ≥ {FITTED}): "
        + ", ".join(f"'{s}' {len(v)} of {len(ood['transformer', s])}"
                    for s, v in converged.items()),
        absent + f"; the Transformer counts its seeds that converge (IID ≥ {FITTED})")
    return measured


def clusters_of(run: FinishedRun) -> SymbolClusters:
    return run.measure("symbol_clusters", lambda r: symbol_clusters(
        classifier_inputs(r.model(), r.task), function_groups(r.task.tables)))


def compatibility_of(run: FinishedRun) -> np.ndarray:
    return run.measure("pair_correct", lambda r: pair_correct(r.model(), r.task))


def largest_group_specific_gap(clusters: SymbolClusters, correct: np.ndarray, groups
                               ) -> float:
    """Over the symbols with two or more clusters, the largest gap between a cluster's
    accuracy with its own group and with the other (Fig. E.2a); 0 where every symbol forms
    one cluster."""
    gaps = [group_specific_gap(correct[s], clusters.clusters[s], groups)
            for s in range(len(correct)) if len(set(clusters.clusters[s])) > 1]
    return max(gaps, default=0.0)


def seed_name(run) -> str:
    return f"{LABELS[run['model']]} {run['split']} seed {run.seed}"


def representation_measurements(specs: Mapping[str, ClaimSpec], runs
                                ) -> dict[str, Measured | NotMeasured]:
    """Figs. 6.3, E.2, E.5-E.7: the NDR seeds that generalize (OOD > SOLVED) and those that
    fit IID but fail OOD, each read through its symbol clusters and pair accuracies."""
    ndr = [r for r in runs if r["model"] == "ndr"]
    successful = [r for r in ndr if r.final[OOD] > SOLVED]
    failed = [r for r in ndr if r.final[IID] >= FITTED and r.final[OOD] <= SOLVED]
    measured: dict[str, Measured | NotMeasured] = {}
    if successful:
        measured["successful-seeds-share-representations"] = Measured(
            {"largest ARI over symbols": [max(clusters_of(r).ari) for r in successful]},
            f"per NDR seed above {SOLVED} OOD: " + ", ".join(map(seed_name, successful)))
    else:
        measured["successful-seeds-share-representations"] = NotMeasured(
            f"no NDR seed above {SOLVED} OOD")
    if not failed:
        reason = f"no NDR seed fits IID (≥ {FITTED}) and fails OOD (≤ {SOLVED})"
        measured["failed-seeds-cluster-by-group"] = NotMeasured(reason)
        measured["clusters-group-specific"] = NotMeasured(reason)
        return measured
    context = (f"per NDR seed fitting IID (≥ {FITTED}) and failing OOD (≤ {SOLVED}): "
               + ", ".join(map(seed_name, failed)))
    measured["failed-seeds-cluster-by-group"] = Measured(
        {"largest ARI over symbols": [max(clusters_of(r).ari) for r in failed]}, context)
    measured["clusters-group-specific"] = Measured(
        {"largest group-specific gap": [
            largest_group_specific_gap(clusters_of(r), compatibility_of(r),
                                       function_groups(r.task.tables)) for r in failed]},
        context)
    return measured


class CTLPP(Experiment):
    name = "ctlpp"
    params_model = CTLPPParams

    def arms(self, params: dict[str, Any]) -> list[Arm]:
        return [Arm({"model": model, "split": split}, base, {"task.variant": split}, seed)
                for split in params["splits"] for model, base in params["models"].items()
                for seed in params["seeds"]]

    def analyze(self, params: dict[str, Any], runs: RunSet, out_dir: Path) -> dict[str, Any]:
        cells = runs.group_by("model", "split")
        ood = {key: cell.values(OOD) for key, cell in cells.items()}
        iid = {key: cell.values(IID) for key, cell in cells.items()}

        def name(key):
            return f"{LABELS[key[0]]} {key[1]}"

        rows = []
        for key in cells:
            above = sum(v > SOLVED for v in ood[key])
            low, high = wilson(above, len(ood[key]))
            rows.append([LABELS[key[0]], key[1], len(ood[key]), cells[key].mean_std(IID, 3),
                         cells[key].mean_std(OOD, 3), f"{statistics.median(ood[key]):.3f}",
                         f"{above}/{len(ood[key])} [{low:.2f}, {high:.2f}]",
                         THESIS.get(key, "-")])
        table = {"title": "Final-step accuracy over seeds (Table 6.1)",
                 "columns": ["model", "split", "seeds", "IID", "OOD", "median OOD",
                             f"seeds > {SOLVED} [95% Wilson]", "thesis IID / OOD"],
                 "rows": rows}
        seeds_table = {"title": "Per seed: IID / OOD final-step accuracy",
                       "columns": ["model", "split", "seed", "IID", "OOD"],
                       "rows": [[LABELS[r["model"]], r["split"], r.seed, f"{r.final[IID]:.3f}",
                                 f"{r.final[OOD]:.3f}"] for r in runs]}
        strip = seed_strip(out_dir, "ood_seeds", {name(k): v for k, v in ood.items()},
                           title="OOD accuracy of every seed", ylabel="OOD accuracy (final step)",
                           caption="One dot per seed, the bar at the mean.")
        measured = accuracy_measurements(self.spec.claims, ood, iid)
        figures = self.representations(runs, out_dir)
        compat_figures = self.compatibility(runs, out_dir)
        measured.update(representation_measurements(self.spec.claims, runs))
        scatter = labelled_scatter(
            out_dir, "iid_ood", [(LABELS[model], {
                split: (cell.values(IID), cell.values(OOD))
                for (m, split), cell in cells.items() if m == model})
                for model in runs.label_values("model")],
            title="IID vs OOD accuracy of every seed", xlabel="IID accuracy",
            ylabel="OOD accuracy", limits=(-0.02, 1.02),
            caption="One dot per seed (final step), one colour per split.")
        return {"measured": measured, "sections": [
            {"title": "Accuracy over seeds (Table 6.1)", "tables": [table, seeds_table],
             "text": "IID test: 1,000 held-out sequences of the training graph (2-6 functions); "
                     "OOD test: 1,000 sequences of the other graph. Final-step accuracy.",
             "figures": [strip, scatter]},
            {"title": "Symbol representations (Fig. 6.3)", "figures": figures,
             "text": "Cosine similarity of the classifier input of 'f s' over the 32 functions "
                     "producing one symbol (functions 0-15: G_a, 16-31: G_b), for the seeds with "
                     "the lowest and the highest OOD accuracy of each cell."},
            {"title": "Compatibility of representations (Fig. E.2)", "figures": compat_figures,
             "text": "Accuracy of 'f2 f1 s' over all function pairs whose f1 outputs one "
                     "symbol, grouped by the cluster of f1's output (from the cosine matrix) "
                     "or its group (rows) and the group of f2 (columns), for the seed with the "
                     "lowest OOD accuracy and its most separated symbol."}]}

    def compatibility(self, runs: RunSet, out_dir: Path) -> list[dict[str, Any]]:
        """Fig. E.2 for the lowest-OOD seed and its most separated symbol."""
        worst = min(runs, key=lambda r: r.final[OOD])
        found, correct = clusters_of(worst), compatibility_of(worst)
        symbol = int(np.argmax(found.separation))
        groups = function_groups(worst.task.tables)
        group_names = [f"G_{'ab'[g]}" for g in range(2)]
        clusters, _, by_cluster = compatibility_matrix(correct[symbol], found.clusters[symbol],
                                                       groups)
        _, _, by_group = compatibility_matrix(correct[symbol], groups, groups)
        name = seed_name(worst)
        return [annotated_heatmap(
            out_dir, f"compatibility_{tag}", [(f"{name}, symbol {symbol}", matrix)],
            xticklabels=group_names, yticklabels=labels, xlabel="group of f2",
            ylabel=f"{tag} of f1", title=f"Accuracy of 'f2 f1 s' by {tag} of f1 x group of f2",
            caption=f"OOD {worst.final[OOD]:.2f}; f1 outputs symbol {symbol}.")
            for tag, matrix, labels in (
                ("cluster", by_cluster, [f"C_{c + 1}" for c in clusters]),
                ("group", by_group, group_names))]

    def representations(self, runs: RunSet, out_dir: Path) -> list[dict[str, Any]]:
        """Cosine matrices of the worst and best seed per cell, with the Spearman correlation
        of group separation and OOD accuracy over all seeds in the caption."""
        from scipy.stats import spearmanr

        cells, seps, scores = [], [], []
        for (model, split), cell in runs.group_by("model", "split").items():
            ordered = sorted(cell, key=lambda r: r.final[OOD])
            for run in ordered:
                seps.append(max(clusters_of(run).separation))
                scores.append(run.final[OOD])
            for tag, run in (("worst", ordered[0]), ("best", ordered[-1]))[: len(ordered)]:
                found = clusters_of(run)
                symbol = int(np.argmax(found.separation))
                cells.append((f"{LABELS[model]} {split} {tag} (OOD {run.final[OOD]:.2f}), "
                              f"symbol {symbol}, ARI {found.ari[symbol]:.2f}",
                              found.similarity[symbol]))
        rho = float(spearmanr(seps, scores).statistic) if len(set(scores)) > 1 else float("nan")
        return [heatmap_grid(out_dir, "cosine", [cells[i:i + 4] for i in range(0, len(cells), 4)],
                             title="Cosine similarity per function pair, most separated symbol",
                             vmin=-1, vmax=1, cmap="RdBu_r", xlabel="function", ylabel="function",
                             caption="Spearman correlation of the largest group separation over "
                                     f"symbols with OOD accuracy, over all seeds: {rho:.3f}.")]


registry.register_experiment(CTLPP())
