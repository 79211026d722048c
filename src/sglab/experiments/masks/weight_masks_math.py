"""Mathematics under weight masks: a mask trained on the easy questions loses the hard
ones that a mask trained on every difficulty keeps (thesis Sec. 3.3, Fig. 3.6, App. B.3.7).

Protocol, as the thesis describes it (line numbers of the thesis text):

* One encoder-decoder Transformer per seed trains on every difficulty level of a
  Mathematics Dataset module (l. 1985: "First, we train the network on all difficulty
  levels (easy, medium, and hard). Then we freeze its weights."). Thesis sizes (B.3.7):
  d_model 256, d_ff 512, 4 heads, 3+3 layers; add_or_sub: batch 256, 30k steps for the net
  and for each mask, beta 2e-5, mask lr 0.03, 8 mask samples.
* Two masks per net: one trained on the easy questions alone (l. 1985: "Next, we train masks
  on the easy split and test on the hard split") and one on the questions the net was
  trained on, every level (Fig. 3.6's "masks trained on IID data").
* Each is tested on the hard questions beside the unmasked net (Fig. 3.6: "model without
  masks, masks trained on IID data and masks trained on 'easy' set"). The rules are the same
  at every level, so a drop means the hard questions need weights the easy ones do not.
  The easy and medium test sets are reported too: the easy mask must still answer the easy
  questions for its drop on hard to mean anything.

sglab's add_or_sub is its own generator (``tasks/mathematics.py``); the levels are thirds of
the training entropy range, as the published generator cuts its easy / medium / hard files.
Claims (patterns, judged only when the unmasked nets reach ``base_min`` on the hard test
set): the IID mask keeps ``keep_min`` of the unmasked accuracy on hard; the easy mask keeps
``keep_min`` of it on easy; on hard the easy mask is at least ``gap_min`` below the IID mask,
in the mean over seeds (the figure's bars are means over 5 seeds).
"""

from __future__ import annotations

import statistics
from functools import partial
from pathlib import Path
from typing import Any

import torch

from sglab.analysis import weight_masks as wm
from sglab.experiments.base import Experiment
from sglab.experiments.legacy_claims import at_least, claim, greater_than
from sglab.experiments.masks.weight_masks import guarded
from sglab.experiments.masks.weight_masks_scan import mask_loss_words, train_settings
from sglab.experiments.runs import Arm, FinishedRun, RunSet, format_mean_std
from sglab.registry import register_experiment
from sglab.report.plots import grouped_bars
from sglab.tasks.mathematics import LEVELS

MASKS = {"iid": "all", "easy": "easy"}  # mask -> task.train_difficulty of its training set
MASK_LABELS = {"none": "no mask", "iid": "IID mask (all levels)", "easy": "easy mask"}


def math_preset(d_model, d_ff, n_heads, n_layers, base_steps, mask_steps, batch, seeds,
                train_size, eval_examples, beta, mask_lr, module="arithmetic__add_or_sub",
                base_schedule="constant", base_min=0.5, keep_min=0.9,
                gap_min=0.1, mask_loss="token_mean") -> dict[str, Any]:
    """``mask_loss``: the masks' ``train.loss_reduction`` (``row_sum``: the authors' code's
    loss, summed over an answer's tokens, against which the thesis's beta is set)."""
    return {"model": {"name": "seq2seq", "d_model": d_model, "d_ff": d_ff,
                      "n_heads": n_heads, "n_layers": n_layers, "dropout": 0.0,
                      "pos_encoding": "sinusoidal", "tie_embeddings": False},
            "module": module, "train_size": train_size, "base_steps": base_steps,
            "mask_steps": mask_steps, "batch": batch, "seeds": seeds,
            "eval_examples": eval_examples, "beta": beta, "base_lr": 1e-3,
            "mask_lr": mask_lr, "mask_samples": 8, "grad_clip": 5.0,
            "base_schedule": base_schedule, "mask_loss": mask_loss, "base_min": base_min,
            "keep_min": keep_min, "gap_min": gap_min}


def test_set(level: str) -> str:
    return f"{level}_test"


def accuracy(seeds: list[dict[str, Any]], level: str, mask: str) -> list[float]:
    """Exact match on ``level``'s test set under ``mask`` (none / iid / easy), per seed."""
    return [seed["accuracy"][level][mask] for seed in seeds]


class MathMasks(Experiment):
    name = "masks-math"
    title = "Weight masks on the Mathematics Dataset: an easy-only mask loses the hard questions (Fig. 3.6)"
    description = ("An encoder-decoder Transformer learns add_or_sub at every difficulty; a "
                   "mask trained on the easy questions answers them but loses the hard ones "
                   "that a mask trained on every level keeps.")
    presets = {
        "quick": math_preset(16, 32, 2, 1, 60, 20, 32, [0], 2000, 100, beta=1e-4,
                             mask_lr=1e-2),
        # default: numbers__place_value instead of add_or_sub (a CPU proxy: a d 64 net on
        # add_or_sub answered 1.4% of the easy questions after 1,000 steps, see README);
        # d 64, batch 64, 2 seeds, the base 4,000 steps with a cosine decay and no dropout.
        # Masks: beta 1e-5, four times the thesis's 2e-5 (B.3.7: batch 256, the code's loss
        # summed over place_value's 2 target tokens) at batch 64 on sglab's token-mean loss,
        # where the thesis's penalty per example is 2.5e-6; 4,000 steps, evaluated every 1,000: the
        # easy masks drop 10.1, 14.5 and 3.3 points below the IID masks on hard (seeds 0-2;
        # 2 seeds here for the CPU budget) while the IID masks keep >= 95%; beyond that the
        # IID mask declines too (seed 1: 0.83 at 6,000). The earlier 3e-4 for 1,000 steps
        # collapsed masks at random phases (README).
        # gap_min 0.05: about four standard errors of a difference of two 1,000-question
        # accuracies (the thesis gives a direction, not a size)
        "default": math_preset(64, 256, 4, 3, 4000, 4000, 64, [0, 1], 100_000, 1000,
                               beta=1e-5, mask_lr=1e-2, module="numbers__place_value",
                               base_schedule="cosine", gap_min=0.05),
        "paper": math_preset(256, 512, 4, 3, 30_000, 30_000, 256, list(range(5)), 1_000_000,
                             None, beta=2e-5, mask_lr=0.03, mask_loss="row_sum"),
    }

    # ------------------------------------------------------------------ runs
    def task(self, params: dict[str, Any], difficulty: str) -> dict[str, Any]:
        return {"name": "mathematics", "module": params["module"],
                "train_size": params["train_size"], "eval_size": 1000,
                "train_difficulty": difficulty, "difficulty_splits": True}

    def arms(self, params: dict[str, Any]) -> list[Arm]:
        """The base nets, trained on every level (masks follow, see :meth:`stages`)."""
        train = train_settings(params, params["base_steps"], params["base_lr"], 4,
                               params["base_schedule"])
        config = {"task": self.task(params, "all"), "model": params["model"], "train": train}
        return [Arm({"role": "base"}, config, seed=seed) for seed in params["seeds"]]

    def mask_arms(self, params: dict[str, Any], bases: RunSet) -> list[Arm]:
        """An IID mask and an easy mask per base net."""
        # four evaluations: the level accuracies along the pruning (and a checkpoint each)
        train = train_settings(params, params["mask_steps"], params["mask_lr"], 4,
                               loss_reduction=params["mask_loss"])
        return [Arm({"role": "mask", "mask": mask},
                    {"task": self.task(params, difficulty),
                     "model": {"name": "masked", "base_run": base.run_id,
                               "beta": params["beta"], "mask_samples": params["mask_samples"]},
                     "train": train}, seed=base.seed)
                for base in bases for mask, difficulty in MASKS.items()]

    def stages(self, params):
        return [lambda previous: self.arms(params),
                lambda previous: self.mask_arms(params, previous.where(role="base"))]

    # ------------------------------------------------------------------ measures
    def measures(self, params: dict[str, Any], masks: dict[str, FinishedRun]) -> dict[str, Any]:
        """Exact match on each level's test set with no mask and under each mask (the same
        questions for all three), and the weights each mask keeps."""
        run = masks["iid"]
        models = {name: mask.model() for name, mask in masks.items()}
        model = models["iid"].eval()
        final = {name: masked.final_masks() for name, masked in models.items()}
        tried = {"none": {n: torch.ones_like(m) for n, m in final["iid"].items()}, **final}
        accuracy = {}
        for level in LEVELS:
            accuracy[level] = {}
            for name, chosen in tried.items():
                with model.use_masks(chosen):
                    record = run.task.evaluate(model, test_set(level), 512,
                                               params["eval_examples"])
                accuracy[level][name] = record[f"{test_set(level)}/exact_match"]
        return {"accuracy": accuracy, "kept": {name: wm.count(m) for name, m in final.items()},
                "weights": sum(m.numel() for m in tried["none"].values()),
                "iou": wm.masks_iou(final["iid"], final["easy"])}

    def per_seed(self, params: dict[str, Any], runs: RunSet) -> list[dict[str, Any]]:
        out = []
        for base in runs.where(role="base"):
            mine = runs.where(lambda r, b=base: r.labels["role"] == "mask"
                              and r.config.model.base_run == b.run_id)
            out.append(self.measures(params, {m: mine.only(mask=m) for m in MASKS}))
        return out

    # ------------------------------------------------------------------ report
    def analyze(self, params: dict[str, Any], runs: RunSet, out_dir: Path) -> dict[str, Any]:
        seeds = self.per_seed(params, runs)
        values = partial(accuracy, seeds)
        accuracy_table = {
            "title": "Exact match [%] on each difficulty's test set: the unmasked net (trained "
                     "on every level), the mask trained on every level and the mask trained on "
                     "the easy questions; mean ± std over seeds (Fig. 3.6 shows hard)",
            "columns": ["test set", *MASK_LABELS.values()],
            "rows": [[test_set(level), *(format_mean_std([100 * v for v in values(level, m)], 1)
                                         for m in MASK_LABELS)] for level in LEVELS]}
        figure = grouped_bars(out_dir, "math-mask-accuracy", {
            label: {level: statistics.mean(100 * v for v in values(level, mask))
                    for level in LEVELS} for mask, label in MASK_LABELS.items()},
            title="Accuracy per difficulty under the masks", ylabel="exact match [%]",
            ylim=(0, 105),
            caption="Exact match on the easy, medium and hard test sets: the net trained on "
                    "every level, the mask trained on every level (IID) and the mask trained "
                    "on the easy questions (mean over seeds; thesis Fig. 3.6: hard).")
        kept_table = {"title": f"Weights kept by each mask (of {seeds[0]['weights']:,} masked) "
                               "and the IoU of the two masks",
                      "columns": ["mask", "kept"],
                      "rows": [*([MASK_LABELS[m], format_mean_std([s["kept"][m] for s in seeds], 0)]
                                 for m in MASKS),
                               ["IoU (IID, easy) [%]",
                                format_mean_std([100 * s["iou"] for s in seeds], 1)]]}
        model = params["model"]
        shown = params["eval_examples"]
        tested = "all 1,000" if shown is None else f"the first {shown} (shuffled) of 1,000"
        text = (f"{len(seeds)} seed(s); {params['module']}; Transformer d_model "
                f"{model['d_model']}, d_ff {model['d_ff']}, {model['n_heads']} heads, "
                f"{model['n_layers']}+{model['n_layers']} layers; base {params['base_steps']} "
                f"steps on {params['train_size']:,} questions of every level, masks "
                f"{params['mask_steps']} steps, batch {params['batch']}, beta "
                f"{params['beta']:g} on {mask_loss_words(params)}, K = "
                f"{params['mask_samples']}. Test sets: {tested} "
                "questions per level.")
        section = {"title": "Difficulty levels under weight masks", "text": text,
                   "tables": [accuracy_table, kept_table], "figures": [figure]}
        return {"claims": self.checked_claims(params, seeds), "sections": [section]}

    def checked_claims(self, params: dict[str, Any], seeds: list[dict[str, Any]]) -> list:
        values = partial(accuracy, seeds)

        def kept(level: str, mask: str) -> list[float]:
            return [m / max(n, 1e-9) for m, n in zip(values(level, mask), values(level, "none"))]

        keep = params["keep_min"]
        claims = [
            claim("iid-mask-keeps-hard", f"A mask trained on every level keeps at least {keep:.0%} "
                  "of the unmasked accuracy on the hard questions (Fig. 3.6: IID mask ≈ no mask).",
                  {"no mask on hard": values("hard", "none"),
                   "IID mask / no mask on hard": kept("hard", "iid")},
                  [at_least("IID mask / no mask on hard", keep)]),
            claim("easy-mask-keeps-easy", f"The easy mask keeps at least {keep:.0%} of the "
                  "unmasked accuracy on the easy questions: it is a working subnetwork for "
                  "what it was trained on.",
                  {"no mask on easy": values("easy", "none"),
                   "easy mask / no mask on easy": kept("easy", "easy")},
                  [at_least("easy mask / no mask on easy", keep)]),
            claim("easy-mask-loses-hard", "On the hard questions the easy mask is below the IID "
                  f"mask by at least {params['gap_min']:g}, mean over seeds (Fig. 3.6 plots means "
                  "over 5 seeds): hard questions need weights the easy ones do not.",
                  {"IID mask on hard": values("hard", "iid"),
                   "easy mask on hard": values("hard", "easy"),
                   "IID mask, mean": statistics.mean(values("hard", "iid")),
                   "easy mask, mean": statistics.mean(values("hard", "easy"))},
                  [greater_than("IID mask, mean", "easy mask, mean", params["gap_min"])]),
        ]
        return guarded(claims, min(values("hard", "none")), "exact match on the hard test set",
                       params["base_min"])


register_experiment(MathMasks())
