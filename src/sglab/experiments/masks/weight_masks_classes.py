"""Class-exclusive weights in a CNN found with differentiable weight masks (thesis Sec. 3.4,
Fig. 3.7, App. B.2.1 and B.3.8). scikit-learn's 8x8 digits stand in for CIFAR-10.

Three stages: CNNs train on all classes; on each finished net, a control mask trains on
all classes (``full``, two mask seeds: mask stability); then one mask per removed class
trains on every class but that one, its output layer fixed to the control mask (seed 0)
so the feature detectors, not the classifier, are inspected. The analysis evaluates every
mask's per-class true-positive rate (TPR) on ``iid_test`` and the relative TPR drop of each
removal mask against the control mask: the removed class should drop far more than the
others (thesis: 40-60% for the simple CNN with dropout, others barely move).
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import torch
from pydantic import Field, field_validator

from sglab.analysis import mask_measures as mm
from sglab.analysis import weight_masks as wm
from sglab.experiments.base import Experiment
from sglab.experiments.claims import Measured, per_seed
from sglab.experiments.masks.weight_masks import base_arm, guarded, mask_arm
from sglab.experiments.runs import FinishedRun, RunSet, format_mean_std
from sglab.experiments.spec import ExperimentParams
from sglab.registry import register_experiment
from sglab.report.plots import grouped_bars
from sglab.tasks.digits import CLASSES

SPLIT = "iid_test"
FIXED = ["output.*"]  # the removal masks' output layer is the control mask's (Sec. 3.4)


class ClassRemovalParams(ExperimentParams):
    channels: list[int]  # the CNN's conv widths, one 3x3 conv each
    pool_every: int  # a 2x2 max-pool after every this many convs
    hidden: list[int]  # widths of the hidden linear layers before the output layer
    dropout: float  # the CNN's dropout
    base_steps: int  # training steps of each unmasked net
    mask_steps: int  # training steps of each mask
    removed: list[int]  # the classes removed, one removal mask per class and net
    mask_seeds: int = Field(ge=2)  # control masks per net (seeds 0, 1, ...): their IoU
    beta: float  # mask regularization beta = batch x alpha (B.3.2)
    batch: int  # batch size of nets and masks

    @field_validator("removed")
    @classmethod
    def _classes(cls, removed: list[int]) -> list[int]:
        if not removed or any(not 0 <= c < CLASSES for c in removed):
            raise ValueError(f"classes to remove must be among 0-{CLASSES - 1}")
        return removed


class ClassRemoval(Experiment):
    name = "masks-class-removal"
    params_model = ClassRemovalParams

    # ------------------------------------------------------------------ runs
    def model(self, params) -> dict[str, Any]:
        return {"name": "cnn", "channels": params["channels"],
                "pool_every": params["pool_every"], "hidden": params["hidden"],
                "dropout": params["dropout"]}

    def arms(self, params):
        """The base nets (masks follow in later stages, see :meth:`stages`)."""
        return [base_arm(params, {}, {"name": "digits"}, self.model(params), seed)
                for seed in params["seeds"]]

    def control_arms(self, params, bases: RunSet):
        # mask seed k > 0 of a net: another run seed (the random masks and batches)
        return [mask_arm(params, base, {"mask": "full", "mask_seed": str(k)}, {"name": "digits"},
                         base.seed + 1000 * k)
                for base in bases for k in range(params["mask_seeds"])]

    def removal_arms(self, params, bases: RunSet, controls: RunSet):
        arms = []
        for base in bases:
            control = controls.where(lambda r, b=base: r.config.model.base_run == b.run_id,
                                     mask_seed="0")[0]
            arms += [mask_arm(params, base, {"mask": f"remove {c}"},
                              {"name": "digits", "remove_class": c}, base.seed,
                              fixed=FIXED, fixed_from=control.run_id)
                     for c in params["removed"]]
        return arms

    def stages(self, params):
        return [lambda previous: self.arms(params),
                lambda previous: self.control_arms(params, previous.where(role="base")),
                lambda previous: self.removal_arms(params, previous.where(role="base"),
                                                   previous.where(role="mask", mask="full"))]

    # ------------------------------------------------------------------ measures
    @staticmethod
    def measures(masks: dict[str, FinishedRun]) -> dict[str, Any]:
        """Accuracy and per-class TPR under every mask (and none), confusions, kept
        weights, and the control masks' IoU."""
        control = masks["full"]
        model = control.model()
        final = {name: run.model().final_masks() for name, run in masks.items()}
        scores = mm.class_scores(model, control.task, SPLIT,
                                 {"none": mm.all_kept(final["full"]), **final}, CLASSES)
        trained = list(model.masked_names)
        first = {n: final["full"][n] for n in trained}
        second = {n: final["full seed 1"][n] for n in trained}
        return {**scores, "iou": wm.masks_iou(first, second),
                "iou_layers": wm.per_layer(first, second),
                "kept": {n: wm.count(m) for n, m in final.items()},
                "weights": sum(m.numel() for m in final["full"].values())}

    def per_seed(self, params, runs: RunSet) -> list[dict[str, Any]]:
        out = []
        for base in runs.where(role="base"):
            mine = runs.where(lambda r, b=base: r.labels["role"] == "mask"
                              and r.config.model.base_run == b.run_id)
            masks = {"full": mine.only(mask="full", mask_seed="0"),
                     "full seed 1": mine.only(mask="full", mask_seed="1"),
                     **{f"remove {c}": mine.only(mask=f"remove {c}") for c in params["removed"]}}
            seed = self.measures(masks)
            reference = torch.tensor(seed["tpr"]["full"])
            seed["drops"] = {c: wm.removal_drops(reference, torch.tensor(seed["tpr"][f"remove {c}"]),
                                                 c) for c in params["removed"]}
            seed["all_drops"] = {c: wm.relative_drops(reference, torch.tensor(
                seed["tpr"][f"remove {c}"])).tolist() for c in params["removed"]}
            out.append(seed)
        return out

    # ------------------------------------------------------------------ report
    def analyze(self, params: dict[str, Any], runs: RunSet, out_dir: Path) -> dict[str, Any]:
        seeds = self.per_seed(params, runs)
        removed = params["removed"]
        masks = ["none", "full", *(f"remove {c}" for c in removed)]
        tpr_table = {"title": f"True-positive rate [%] per class on {SPLIT} under each mask "
                              "(none = unmasked net; full = control mask), mean ± std over seeds",
                     "columns": ["mask", "accuracy", *(str(c) for c in range(CLASSES))],
                     "rows": [[m, format_mean_std([100 * s["accuracy"][m] for s in seeds], 1),
                               *(format_mean_std([100 * s["tpr"][m][c] for s in seeds], 1)
                                 for c in range(CLASSES))] for m in masks]}
        drop_table = {"title": "Relative TPR drop [%] of each removal mask against the control "
                               "mask (Fig. 3.7a), and the largest other drop over the removed "
                               "class's (Fig. 3.7b)",
                      "columns": ["removed class", "removed class's drop", "others, mean",
                                  "others, largest", "largest other / removed"],
                      "rows": [[str(c), *(format_mean_std([100 * s["drops"][c][k] for s in seeds],
                                                          1)
                                          for k in ("target", "others_mean", "others_max")),
                                format_mean_std([s["drops"][c]["max_other_over_target"]
                                                 for s in seeds], 2)] for c in removed]}
        where = {"title": "Where the removed class's test images go: the largest rise in the "
                          "confusion row of the removed class against the control mask (first "
                          "seed; Figs B.11-B.13)",
                 "columns": ["removed class", "predicted as (rise, points)"],
                 "rows": [[str(c), self.rises(seeds[0], c)] for c in removed]}
        layers = list(seeds[0]["iou_layers"])
        iou_table = {"title": "IoU of the two control-mask seeds on one net [%] (thesis B.2.1: "
                              "93.26 ± 0.96)", "columns": ["weights", "IoU"],
                     "rows": [["all", format_mean_std([100 * s["iou"] for s in seeds], 2)],
                              *([layer, format_mean_std([100 * s["iou_layers"][layer]
                                                         for s in seeds], 2)]
                                for layer in layers)]}
        kept_table = {"title": f"Weights kept by each mask (of {seeds[0]['weights']} masked, "
                               "output layer included)", "columns": ["mask", "kept"],
                      "rows": [[m, format_mean_std([s["kept"][m] for s in seeds], 0)]
                               for m in masks[1:]]}
        figure = grouped_bars(out_dir, "class-removal-drops", {
            "removed class": self.mean_drop(seeds, "target"),
            "other classes, mean": self.mean_drop(seeds, "others_mean"),
            "other classes, largest": self.mean_drop(seeds, "others_max")},
            title="Relative TPR drop per removed class", ylabel="drop [%]", ylim=(-10, 125),
            caption="Relative drop of the true-positive rate under a mask trained without the "
                    "class, against the control mask; the removed class and the other classes "
                    "(mean and largest), mean over seeds (thesis Fig. 3.7).")
        text = (f"{len(seeds)} seed(s); CNN channels {params['channels']}, hidden "
                f"{params['hidden']}, dropout {params['dropout']}; base {params['base_steps']} "
                f"steps, masks {params['mask_steps']} steps, beta {params['beta']}, K = 4. "
                "Digits stand in for CIFAR-10.")
        section = {"title": "Class removal", "text": text,
                   "tables": [tpr_table, drop_table, where, iou_table, kept_table],
                   "figures": [figure]}
        return {"measured": self.measured(params, seeds), "sections": [section]}

    @staticmethod
    def mean_drop(seeds, key: str) -> dict[str, float]:
        removed = list(seeds[0]["drops"])
        return {f"remove {c}": statistics.mean(100 * s["drops"][c][key] for s in seeds)
                for c in removed}

    @staticmethod
    def rises(seed, removed: int, top: int = 2) -> str:
        rise = seed["confusion"][f"remove {removed}"][removed] - seed["confusion"]["full"][removed]
        rise[removed] = float("-inf")
        values, classes = rise.topk(top)
        return ", ".join(f"{int(c)} (+{100 * float(v):.1f})" for v, c in zip(values, classes)
                         if float(v) > 0) or "-"

    @staticmethod
    def measured(params, seeds) -> dict[str, Measured]:
        """The claims' values: per seed (the means over the removed classes), per removed
        class (the means over seeds) and per (seed, removed class)."""
        removed = params["removed"]
        pairs = [(s, c) for s in seeds for c in removed]
        context = (f"relative drop of each class's true-positive rate on {SPLIT} under a mask "
                   "trained without the removed class, against the control mask")
        measured = {
            "full-mask-keeps-accuracy": Measured(
                {"unmasked": per_seed([s["accuracy"]["none"] for s in seeds]),
                 "control mask / unmasked": per_seed(
                     [s["accuracy"]["full"] / max(s["accuracy"]["none"], 1e-9) for s in seeds])},
                f"accuracy on {SPLIT}"),
            "removed-class-drops-most": Measured(
                {"removed-class drop": per_seed([statistics.mean(
                    s["drops"][c]["target"] for c in removed) for s in seeds]),
                 "other classes' drop": per_seed([statistics.mean(
                     s["drops"][c]["others_mean"] for c in removed) for s in seeds]),
                 "removed-class drop per class": [statistics.mean(
                     s["drops"][c]["target"] for s in seeds) for c in removed]},
                f"{context}; per seed the means over the removed classes {removed}, per class "
                "the mean over seeds"),
            "removed-class-drops-more-than-any-other": Measured(
                {"removed-class drop per (seed, class)": [s["drops"][c]["target"]
                                                          for s, c in pairs],
                 "largest other drop per (seed, class)": [s["drops"][c]["others_max"]
                                                          for s, c in pairs]},
                f"{context}; one entry per seed and removed class {removed}"),
            "mask-seeds-agree": Measured(
                {"IoU": per_seed([s["iou"] for s in seeds])},
                "IoU of the two control masks (mask seeds 0 and 1) on each net, over all "
                "masked weights"),
        }
        return guarded(measured, min(s["accuracy"]["none"] for s in seeds),
                           f"accuracy on {SPLIT}")


register_experiment(ClassRemoval())
