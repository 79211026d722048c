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

The questions are sglab's (``tasks/mathematics.py``; add_or_sub as the published generator
draws it with ``number_sampling: generator``); the levels are thirds of the training entropy
range, as the published generator cuts its easy / medium / hard files.
One run covers the ``modules`` it lists (Fig. 3.6: add_or_sub, linear_1d, differentiate,
sort, poly collect), each with Tab. B.3's own settings (``module_settings``). Claims (judged
only when every unmasked net reaches ``base_min`` on the hard test set): the IID mask keeps >
95% of the unmasked accuracy on hard and the easy mask > 95% of it on easy (B.3.3's validity
rule); on hard the easy mask is at least 0.1 below the IID mask for every module and seed
(Fig. 3.6: "a consistent performance drop", 5 seeds per task).
"""

from __future__ import annotations

import statistics
from functools import partial
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from sglab.analysis import mask_measures as mm
from sglab.analysis import weight_masks as wm
from sglab.experiments.base import Experiment
from sglab.experiments.claims import Measured, per_seed
from sglab.experiments.masks.weight_masks import guarded
from sglab.experiments.masks.weight_masks_scan import mask_loss_words, train_settings
from sglab.experiments.runs import Arm, FinishedRun, RunSet, format_mean_std
from sglab.experiments.spec import ExperimentParams
from sglab.registry import register_experiment
from sglab.report.plots import grouped_bars
from sglab.tasks.mathematics import LEVELS, Module

MASKS = {"iid": "all", "easy": "easy"}  # mask -> task.train_difficulty of its training set
MASK_LABELS = {"none": "no mask", "iid": "IID mask (all levels)", "easy": "easy mask"}


class ModuleSettings(BaseModel):
    """One module's own column of Tab. B.3 (unset: the preset's value)."""

    model_config = ConfigDict(extra="forbid")
    batch: int | None = Field(None, ge=1)
    mask_batch: int | None = Field(None, ge=1)
    beta: float | None = None
    base_steps: int | None = Field(None, ge=1)
    mask_steps: int | None = Field(None, ge=1)
    mask_lr: float | None = None
    base_warmup: int | None = Field(None, ge=0)


class MathParams(ExperimentParams):
    model: dict[str, Any]  # the encoder-decoder Transformer's model section
    # the Mathematics Dataset modules (sglab's generator), each trained and masked on its own
    modules: list[Module] = Field(min_length=1)
    module_settings: dict[str, ModuleSettings] = {}  # per module, Tab. B.3
    # how add_or_sub / place_value draw their numbers (task.number_sampling; generator: as
    # the published generator, add_or_sub's entropy 4-16 cut into the easy / medium / hard
    # thirds)
    number_sampling: Literal["digits", "generator"] = "digits"
    train_size: int  # training questions over all levels
    base_steps: int  # training steps of each net
    mask_steps: int  # training steps of each mask
    batch: int  # batch size of nets and masks
    eval_examples: int | None  # test questions scored per level (the first, shuffled); all
    beta: float  # mask regularization (the penalty is beta / batch * sum(l))
    base_lr: float  # the nets' Adam learning rate
    mask_lr: float  # the masks' Adam learning rate
    mask_samples: int  # mask samples per batch (K; B.3.7: 8)
    grad_clip: float  # gradient clipping
    base_schedule: Literal["constant", "cosine"]  # the nets' learning-rate schedule
    # the nets' linear warmup and Adam betas (B.3.7: (0.9, 0.995); null: the trainer's
    # default), and the masks' batch (Tab. B.3; null: batch)
    base_warmup: int = Field(0, ge=0)
    base_betas: tuple[float, float] | None = None
    mask_batch: int | None = Field(None, ge=1)
    # the masks' train.loss_reduction (row_sum: the authors' code's loss, summed over an
    # answer's tokens, against which the thesis's beta is set)
    mask_loss: Literal["token_mean", "row_sum"] = "token_mean"
    # mask the nets' LayerNorm gains and biases too, as the authors' code does
    mask_norms: bool = False
    base_min: float  # hard-test exact match of the unmasked nets from which claims are judged

    @model_validator(mode="after")
    def _settings_name_listed_modules(self) -> MathParams:
        if len(set(self.modules)) != len(self.modules):
            raise ValueError(f"modules lists a module twice: {self.modules}")
        unknown = sorted(set(self.module_settings) - set(self.modules))
        if unknown:
            raise ValueError(f"module_settings names {unknown}, not in modules {self.modules}")
        return self


def for_module(params: dict[str, Any], module: str) -> dict[str, Any]:
    """The parameters one module trains with: the preset's, then its Tab. B.3 column."""
    own = params["module_settings"].get(module) or {}
    return {**params, "module": module, **{k: v for k, v in own.items() if v is not None}}


def test_set(level: str) -> str:
    return f"{level}_test"


def accuracy(seeds: list[dict[str, Any]], level: str, mask: str) -> list[float]:
    """Exact match on ``level``'s test set under ``mask`` (none / iid / easy), per seed."""
    return [seed["accuracy"][level][mask] for seed in seeds]


class MathMasks(Experiment):
    name = "masks-math"
    params_model = MathParams

    # ------------------------------------------------------------------ runs
    def task(self, params: dict[str, Any], difficulty: str) -> dict[str, Any]:
        return {"name": "mathematics", "module": params["module"],
                "number_sampling": params["number_sampling"],
                "train_size": params["train_size"], "eval_size": 1000,
                "train_difficulty": difficulty, "difficulty_splits": True}

    def arms(self, params: dict[str, Any]) -> list[Arm]:
        """The base nets, one per module and seed, trained on every level (masks follow, see
        :meth:`stages`)."""
        arms = []
        for module in params["modules"]:
            own = for_module(params, module)
            train = train_settings(own, own["base_steps"], own["base_lr"], 4,
                                   own["base_schedule"], warmup=own["base_warmup"],
                                   betas=own["base_betas"])
            config = {"task": self.task(own, "all"), "model": own["model"], "train": train}
            arms += [Arm({"role": "base", "module": module}, config, seed=seed)
                     for seed in own["seeds"]]
        return arms

    def mask_arms(self, params: dict[str, Any], bases: RunSet) -> list[Arm]:
        """An IID mask and an easy mask per base net."""
        arms = []
        for base in bases:
            own = for_module(params, base.labels["module"])
            # four evaluations: the level accuracies along the pruning (and a checkpoint each)
            train = train_settings(own, own["mask_steps"], own["mask_lr"], 4,
                                   loss_reduction=own["mask_loss"], batch=own["mask_batch"])
            arms += [Arm({"role": "mask", "mask": mask, "module": own["module"]},
                         {"task": self.task(own, difficulty),
                          "model": {"name": "masked", "base_run": base.run_id,
                                    "beta": own["beta"], "mask_samples": own["mask_samples"],
                                    "mask_norms": own["mask_norms"]},
                          "train": train}, seed=base.seed)
                     for mask, difficulty in MASKS.items()]
        return arms

    def stages(self, params):
        return [lambda previous: self.arms(params),
                lambda previous: self.mask_arms(params, previous.where(role="base"))]

    # ------------------------------------------------------------------ measures
    def measures(self, params: dict[str, Any], masks: dict[str, FinishedRun]) -> dict[str, Any]:
        """Exact match on each level's test set with no mask and under each mask (the same
        questions for all three), and the weights each mask keeps."""
        run = masks["iid"]
        models = {name: mask.model() for name, mask in masks.items()}
        final = {name: masked.final_masks() for name, masked in models.items()}
        tried = {"none": mm.all_kept(final["iid"]), **final}
        accuracy = {}
        for level in LEVELS:
            records = mm.evaluate_under_masks(models["iid"], run.task, test_set(level), tried,
                                              512, params["eval_examples"])
            accuracy[level] = {name: r[f"{test_set(level)}/exact_match"]
                               for name, r in records.items()}
        return {"accuracy": accuracy, "kept": {name: wm.count(m) for name, m in final.items()},
                "weights": sum(m.numel() for m in tried["none"].values()),
                "iou": wm.masks_iou(final["iid"], final["easy"])}

    def per_seed(self, params: dict[str, Any], runs: RunSet) -> list[dict[str, Any]]:
        """The measures of every base net (a module and a seed), in the order of ``modules``."""
        out = []
        for base in runs.where(role="base"):
            module = base.labels["module"]
            mine = runs.where(lambda r, b=base: r.labels["role"] == "mask"
                              and r.config.model.base_run == b.run_id)
            out.append({"module": module, "seed": base.seed,
                        **self.measures(params, {m: mine.only(mask=m) for m in MASKS})})
        order = {module: i for i, module in enumerate(params["modules"])}
        return sorted(out, key=lambda s: (order[s["module"]], s["seed"]))

    # ------------------------------------------------------------------ report
    def analyze(self, params: dict[str, Any], runs: RunSet, out_dir: Path) -> dict[str, Any]:
        seeds = self.per_seed(params, runs)
        modules = params["modules"]

        def mean_std(module: str, level: str, mask: str) -> str:
            return format_mean_std([100 * v for v in accuracy(of(seeds, module), level, mask)], 1)

        accuracy_table = {
            "title": "Exact match [%] on each difficulty's test set: the unmasked net (trained "
                     "on every level), the mask trained on every level and the mask trained on "
                     "the easy questions; mean ± std over seeds (Fig. 3.6 shows hard)",
            "columns": ["module", "test set", *MASK_LABELS.values()],
            "rows": [[module, test_set(level), *(mean_std(module, level, m) for m in MASK_LABELS)]
                     for module in modules for level in LEVELS]}
        bars, shown = accuracy_bars(seeds, modules)
        figure = grouped_bars(
            out_dir, "math-mask-accuracy", bars, title="Accuracy under the masks",
            ylabel="exact match [%]", ylim=(0, 105),
            caption="Exact match of the net trained on every level, the mask trained on every "
                    "level (IID) and the mask trained on the easy questions (mean over seeds), "
                    + shown)
        kept_table = {"title": "Weights kept by each mask (of the net's masked weights) and "
                               "the IoU of the two masks",
                      "columns": ["module", "mask", "kept", "of"],
                      "rows": [row for module in modules for row in (
                          *([module, MASK_LABELS[m], format_mean_std(
                              [s["kept"][m] for s in of(seeds, module)], 0),
                             f"{of(seeds, module)[0]['weights']:,}"] for m in MASKS),
                          [module, "IoU (IID, easy) [%]", format_mean_std(
                              [100 * s["iou"] for s in of(seeds, module)], 1), ""])]}
        section = {"title": "Difficulty levels under weight masks", "text": setup_text(params),
                   "tables": [accuracy_table, kept_table], "figures": [figure]}
        return {"measured": self.measured(params, seeds), "sections": [section]}

    @staticmethod
    def measured(params: dict[str, Any], seeds: list[dict[str, Any]]) -> dict[str, Measured]:
        """Every base net (a module and a seed) is one value of each claim's ``every_seed``."""
        values = partial(accuracy, seeds)

        def kept(level: str, mask: str) -> list[float]:
            return [m / max(n, 1e-9) for m, n in zip(values(level, mask), values(level, "none"))]

        units = "per seed" if len(params["modules"]) == 1 else "per module and seed"
        tested = f"exact match on {', '.join(params['modules'])}'s test sets, {units}"
        measured = {
            "iid-mask-keeps-hard": Measured(
                {"unmasked on hard": per_seed(values("hard", "none")),
                 "IID mask / unmasked on hard": per_seed(kept("hard", "iid"))}, tested),
            "easy-mask-keeps-easy": Measured(
                {"unmasked on easy": per_seed(values("easy", "none")),
                 "easy mask / unmasked on easy": per_seed(kept("easy", "easy"))}, tested),
            "easy-mask-loses-hard": Measured(
                {"unmasked on hard": per_seed(values("hard", "none")),
                 "IID mask on hard": per_seed(values("hard", "iid")),
                 "easy mask on hard": per_seed(values("hard", "easy"))}, tested),
        }
        return guarded(measured, min(values("hard", "none")),
                           "exact match on the hard test set", params["base_min"])


def accuracy_bars(seeds: list[dict[str, Any]], modules: list[str]
                  ) -> tuple[dict[str, dict[str, float]], str]:
    """Mean exact match [%] per mask (series) and category: Fig. 3.6's modules on their hard
    test sets, or with one module its three levels; and the caption's words for them."""
    def bar(mine: list[dict[str, Any]], level: str, mask: str) -> float:
        return statistics.mean(100 * v for v in accuracy(mine, level, mask))

    if len(modules) > 1:
        return ({label: {short(m): bar(of(seeds, m), "hard", mask) for m in modules}
                 for mask, label in MASK_LABELS.items()},
                "on each module's hard test set (thesis Fig. 3.6).")
    return ({label: {level: bar(seeds, level, mask) for level in LEVELS}
             for mask, label in MASK_LABELS.items()},
            "on the easy, medium and hard test sets (thesis Fig. 3.6: hard).")


def of(seeds: list[dict[str, Any]], module: str) -> list[dict[str, Any]]:
    """The measures of one module's seeds."""
    return [s for s in seeds if s["module"] == module]


def short(module: str) -> str:
    """``calculus__differentiate`` -> ``differentiate``."""
    return module.split("__")[-1]


def setup_text(params: dict[str, Any]) -> str:
    """The setting of the report: the shared net and, per module, its steps and masks."""
    model = params["model"]
    shown = params["eval_examples"]
    tested = "all 1,000" if shown is None else f"the first {shown} (shuffled) of 1,000"
    parts = []
    for module in params["modules"]:
        own = for_module(params, module)
        batch = f"batch {own['batch']}" + ("" if own["mask_batch"] is None
                                          else f" (masks {own['mask_batch']})")
        warmup = f" ({own['base_warmup']} warmup)" if own["base_warmup"] else ""
        parts.append(f"{module}: base {own['base_steps']} steps{warmup}, masks "
                     f"{own['mask_steps']} steps at lr {own['mask_lr']:g}, {batch}, beta "
                     f"{own['beta']:g}")
    return (f"{len(params['seeds'])} seed(s) per module; Transformer d_model "
            f"{model['d_model']}, d_ff {model['d_ff']}, {model['n_heads']} heads, "
            f"{model['n_layers']}+{model['n_layers']} layers; each base net trains on "
            f"{params['train_size']:,} questions of every level. " + "; ".join(parts)
            + f". Masks on {mask_loss_words(params)}, K = {params['mask_samples']}. Test "
            f"sets: {tested} questions per level.")


register_experiment(MathMasks())
