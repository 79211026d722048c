"""Transfer between permuted tasks with weights and masks trained together (thesis Sec.
3.2.3, Fig. 3.4, App. B.3.6, Fig. B.7): permuted MNIST (``dataset: mnist``, read from
``task.data_dir``; ``paper``), or scikit-learn's 8x8 digits with a fixed pixel permutation
per task standing in for it (``dataset: digits``; ``quick``, ``default``).

Stages: an FNN trains normally on permutation 1 (the unmasked reference, and the chain's
architecture); then, one stage per task t = 1, 2, ..., a ``masked`` run with ``train_base``
trains a mask *and* the weights on permutation t. Its base run is the run of task t - 1
(whose trained weights it starts from) and it freezes the final masks of tasks 1..t-1
(``frozen_from``): those weights keep their values and get no gradient, the free weights
start from a fresh initialization (the authors' partly frozen layers). As the thesis text
says, the first layer is reset for every task and never frozen (``unfrozen``): it can learn
to undo each permutation, so the later layers could be reused entirely (an upper bound on
transfer). The authors' current code does the same (its ``transfer.reset_first_layer``
flag, on by default, re-initializes the first layer and keeps it out of the frozen set);
only its two earliest versions froze every used weight, which ``first_layer: frozen``
reproduces.

Measured per task and layer: the share of the new mask's weights that earlier tasks' masks
use (transfer sharing), the share of the layer that the masks so far occupy (capacity
used), and the task's accuracy under its own final mask.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator

from sglab.analysis import mask_measures as mm
from sglab.experiments.base import Experiment
from sglab.experiments.claims import Measured, NotMeasured, per_seed
from sglab.experiments.masks.weight_masks import base_arm, guarded, mask_arm
from sglab.experiments.runs import FinishedRun, RunSet, format_mean_std
from sglab.experiments.spec import ExperimentParams
from sglab.registry import register_experiment
from sglab.report.plots import Line, Panel, line_figure
from sglab.tasks.digits import MNIST_MEAN, MNIST_STD, require_mnist
from sglab.tasks.digits import SIDE as DIGITS_SIDE

SPLIT = "iid_test"
FIRST = "layers.0.*"  # reset for every task and never frozen (thesis Sec. 3.2.3)
# Mask logit initializations: (new weights, frozen weights); thesis Fig. 3.4 uses one
# value, Fig. B.7 starts the frozen weights at 2 (P = 0.88) and the new ones at 0 or -1.
# Variants share the first variant's task 1 and differ from task 2 on.
VARIANTS = {"uniform 2": (2.0, None), "frozen 2, new 0": (0.0, 2.0),
            "frozen 2, new -1": (-1.0, 2.0)}
UNIFORM, BIASED = "uniform 2", "frozen 2, new -1"  # Sec. 3.2.3: P 0.88 vs 0.27
MNIST_DIR = "data/mnist"  # task.data_dir unless --set task.data_dir=PATH
# pixel / level mean and std of the training images, what standardization uses: the 8x8
# digits' (pixel / 16) and MNIST's (pixel / 255)
STANDARDIZE = {"digits": (0.305, 0.376), "mnist": (MNIST_MEAN, MNIST_STD)}
Variant = Literal["uniform 2", "frozen 2, new 0", "frozen 2, new -1"]


class TransferParams(ExperimentParams):
    # digits: scikit-learn's 8x8, bundled; mnist: read from task.data_dir
    dataset: Literal["digits", "mnist"]
    hidden: list[int]  # the FNN's hidden widths
    init: Literal["torch", "xavier"]  # the FNN's weight init (xavier: the thesis code's on permuted MNIST)
    standardize: bool  # standardize the pixel values by the training images' mean and std
    side: int  # the 8x8 digits resized to side x side (dataset digits only)
    # reset: the first layer is reset for every task and never frozen (the thesis text);
    # frozen: frozen like the other layers (the authors' code, tasks/permuted_mnist.py)
    first_layer: Literal["reset", "frozen"]
    base_steps: int  # training steps of the unmasked net on permutation 1
    mask_steps: int  # training steps of each task (masks and free weights)
    tasks: int = Field(ge=2)  # permutations learned in sequence
    variants: list[Variant] = Field(min_length=1)  # mask logit inits; the first trains task 1
    beta: float  # mask regularization beta = batch x alpha (B.3.2)
    mask_samples: int  # mask samples per batch (K)
    batch: int  # batch size of the net and the tasks
    free_min: float  # a hidden layer has free capacity while earlier tasks use less of it

    @field_validator("variants")
    @classmethod
    def _distinct(cls, variants: list[str]) -> list[str]:
        if len(set(variants)) != len(variants):
            raise ValueError("each mask initialization at most once")
        return variants


def layer_label(index: int, count: int, reset_first: bool) -> str:
    if index == 0:
        return "input (reset each task)" if reset_first else "input"
    return "output" if index == count - 1 else f"hidden {index}"


class Transfer(Experiment):
    name = "masks-transfer"
    params_model = TransferParams

    # ------------------------------------------------------------------ runs
    @staticmethod
    def task(params, t: int) -> dict[str, Any]:
        if params["dataset"] == "mnist":  # the thesis trains on 48k of the 60k images
            return {"name": "digits", "source": "mnist", "data_dir": MNIST_DIR,
                    "valid_fraction": 0.2, "permutation": t}
        task = {"name": "digits", "permutation": t}
        if params["side"] != DIGITS_SIDE:  # resized digits (28: MNIST's 784 inputs)
            task["side"] = params["side"]
        return task

    def check_data(self, configs) -> None:
        for data_dir in dict.fromkeys(c.task.data_dir for c in configs
                                      if c.task.source == "mnist"):
            require_mnist(data_dir)

    @staticmethod
    def run_seed(seed: int, t: int) -> int:
        """Each task's run draws its own fresh weights, mask samples and batches."""
        return seed + 1000 * (t - 1)

    def arms(self, params):
        """The unmasked nets on permutation 1 (the tasks follow, see :meth:`stages`); an FNN
        sees every permutation alike (its first layer's columns are drawn independently),
        so they are the reference for every task."""
        task = self.task(params, 1)
        model = {"name": "fnn", "hidden": params["hidden"], "outputs": 1, "classes": 10,
                 "input_encoding": "value", "init": params["init"]}
        if params["standardize"]:  # the thesis code standardizes images
            mean, std = STANDARDIZE[params["dataset"]]
            model.update(input_mean=mean, input_std=std)
        return [base_arm(params, {"chain": str(seed)}, task, model, seed)
                for seed in params["seeds"]]

    @staticmethod
    def chain_run(params, runs: RunSet, variant: str, seed: int, t: int) -> FinishedRun:
        """Task t's run of a chain; every variant starts from the first variant's task 1
        (its initialization only matters once there are frozen weights, and a net whose
        logits all start at -1 does not learn task 1)."""
        chosen = params["variants"][0] if t == 1 else variant
        return runs.only(role="mask", init=chosen, chain=seed, task=t)

    def task_arms(self, params, previous: RunSet, t: int):
        arms = []
        for variant in params["variants"][:1] if t == 1 else params["variants"]:
            new, frozen = VARIANTS[variant]
            for seed in params["seeds"]:
                base = self.chain_run(params, previous, variant, seed, t - 1) if t > 1 else \
                    previous.only(role="base", chain=seed)
                earlier = [self.chain_run(params, previous, variant, seed, s).run_id
                           for s in range(1, t)]
                model = {"train_base": True, "frozen_from": earlier,
                         "unfrozen": self.unfrozen(params),
                         "mask_biases": True, "mask_samples": params["mask_samples"],
                         "logit_init": new}
                if frozen is not None:
                    model["frozen_logit_init"] = frozen
                arms.append(mask_arm(params, base, {"init": variant, "chain": str(seed),
                                                    "task": str(t)},
                                     self.task(params, t), self.run_seed(seed, t), **model))
        return arms

    @staticmethod
    def unfrozen(params) -> list[str]:
        return [FIRST] if params["first_layer"] == "reset" else []

    def stages(self, params):
        return [lambda previous: self.arms(params),
                *(lambda previous, t=t: self.task_arms(params, previous, t)
                  for t in range(1, params["tasks"] + 1))]

    # ------------------------------------------------------------------ measures
    @staticmethod
    def chain_measures(base: FinishedRun, runs: list[FinishedRun]) -> dict[str, Any]:
        """Per task (in order) and weight layer: transfer sharing, the sharing expected by
        chance (the share of the layer used before), capacity used and mask density; the
        accuracy under each task's own final mask and the unmasked net's."""
        masks = [{n: m for n, m in run.model().final_masks().items() if m.dim() >= 2}
                 for run in runs]
        return {**mm.chain_sharing(masks),
                "accuracy": [run.final[f"{SPLIT}/exact_match"] for run in runs],
                "reference": base.final[f"{SPLIT}/exact_match"]}

    def per_chain(self, params, runs: RunSet, variant: str) -> list[dict[str, Any]]:
        tasks = range(1, params["tasks"] + 1)
        return [self.chain_measures(runs.only(role="base", chain=seed),
                                    [self.chain_run(params, runs, variant, seed, t)
                                     for t in tasks])
                for seed in params["seeds"]]

    # ------------------------------------------------------------------ report
    def analyze(self, params: dict[str, Any], runs: RunSet, out_dir: Path) -> dict[str, Any]:
        chains = {v: self.per_chain(params, runs, v) for v in params["variants"]}
        main = chains[params["variants"][0]]
        layers = main[0]["layers"]
        reset = params["first_layer"] == "reset"
        names = {n: layer_label(i, len(layers), reset) for i, n in enumerate(layers)}
        tasks = list(range(1, params["tasks"] + 1))

        def mean(variant, key, t, layer):
            return statistics.mean(100 * c[key][t - 1][layer] for c in chains[variant])

        sharing = line_figure(out_dir, "transfer-sharing", [
            Panel(names[layer], [
                *(Line(tasks[1:], [mean(v, "sharing", t, layer) for t in tasks[1:]], v, i,
                       marker="o") for i, v in enumerate(params["variants"])),
                Line(tasks[1:], [mean(params["variants"][0], "chance", t, layer)
                                 for t in tasks[1:]], "chance", 7, ":")],
                ylim=(0, 100), integer_x=True) for layer in layers],
            title="Weights a task's mask shares with earlier tasks' masks", xlabel="task",
            ylabel="shared [%]", columns=4,
            caption="|M_t ∧ ∪_{s<t} M_s| / |M_t| per layer and task, mean over seeds, per "
                    "mask initialization (thesis Figs 3.4, B.7); dotted: the share of the "
                    "layer earlier tasks use (what a mask drawn at random would share).")
        capacity = line_figure(out_dir, "transfer-capacity", [
            Panel(variant, [Line(tasks, [mean(variant, "used", t, layer) for t in tasks],
                                 names[layer], i, marker="o")
                            for i, layer in enumerate(layers)], ylim=(0, 100), integer_x=True)
            for variant in params["variants"]],
            title="Capacity used", xlabel="task", ylabel="used [%]",
            caption="|∪_{s≤t} M_s| / weights per layer after each task, mean over seeds."
                    + (" The input layer is reset for every task, so its union is not "
                       "occupied capacity." if reset else ""))
        tables = [self.task_table(params, variant, chains[variant], layers, names)
                  for variant in params["variants"]]
        side = runs[0].config.task.image_side  # the images the runs trained on
        widths = "-".join(map(str, [side ** 2, *params["hidden"], 10]))
        images = "MNIST" if params["dataset"] == "mnist" else "8x8 digits"
        text = (f"{len(params['seeds'])} seed(s), {params['tasks']} tasks (permutations "
                f"1-{params['tasks']}) of {images}; FNN {widths} on "
                f"{'standardized ' if params['standardize'] else ''}pixel values "
                f"({side}x{side}), {params['init']} init, biases masked; first layer "
                f"{'reset for every task' if reset else 'frozen'}; "
                f"unmasked reference {params['base_steps']} "
                f"steps at lr 1e-3; each task {params['mask_steps']} steps, masks and free "
                f"weights at lr 1e-2, beta {params['beta']}, K = {params['mask_samples']}.")
        section = {"title": f"Transfer between permuted {images}", "text": text,
                   "tables": tables, "figures": [sharing, capacity]}
        return {"measured": self.measured(params, chains, layers), "sections": [section]}

    @staticmethod
    def task_table(params, variant, chains, layers, names) -> dict[str, Any]:
        def cell(key, t, layer):
            return format_mean_std([100 * c[key][t][layer] for c in chains], 1)

        rows = []
        for t in range(params["tasks"]):
            rows.append([str(t + 1),
                         format_mean_std([100 * c["accuracy"][t] for c in chains], 1),
                         *(f"{cell('sharing', t, n)} ({cell('chance', t, n)})" if t else "-"
                           for n in layers),
                         *(cell("used", t, n) for n in layers)])
        return {"title": f"{variant}: per task, accuracy on {SPLIT} under its own final mask "
                         "[%] (unmasked net: "
                         f"{format_mean_std([100 * c['reference'] for c in chains], 1)}), "
                         "shared with earlier tasks [%] (chance in brackets) and capacity "
                         "used [%] per layer, mean ± std over seeds",
                "columns": ["task", "accuracy", *(f"shared: {names[n]}" for n in layers),
                            *(f"used: {names[n]}" for n in layers)],
                "rows": rows}

    @staticmethod
    def measured(params, chains, layers) -> dict[str, Measured | NotMeasured]:
        main = chains[params["variants"][0]]
        hidden, output = layers[1:-1], layers[-1]
        free = [c["sharing"][t][n] for c in main for t in range(1, params["tasks"])
                for n in hidden if c["chance"][t][n] < params["free_min"]]
        last = params["tasks"] - 1
        variant = f"mask initialization {params['variants'][0]!r}"
        measured: dict[str, Measured | NotMeasured] = {
            "sharing-low-while-capacity-free": Measured(
                {"sharing per (seed, task, hidden layer)": free},
                f"|M_t ∧ ∪_{{s<t}} M_s| / |M_t| ({variant}), for every seed, task after the "
                f"first and hidden layer that earlier tasks use less than {params['free_min']:g} "
                "of") if free else NotMeasured("no hidden layer has free capacity left"),
            "output-layer-fills-first": Measured(
                {"output used": per_seed([c["used"][last][output] for c in main]),
                 "largest hidden used": per_seed([max(c["used"][last][n] for n in hidden)
                                                  for c in main])},
                f"share of each layer the masks of all {params['tasks']} tasks use ({variant})"),
            "own-mask-keeps-accuracy": Measured(
                {"masked / unmasked accuracy per (seed, task)": [
                    a / max(c["reference"], 1e-9) for c in main for a in c["accuracy"]]},
                f"accuracy on {SPLIT} under each task's own final mask over the unmasked "
                f"net's on permutation 1 ({variant})"),
            "biased-init-raises-sharing": Measured(
                {"biased": per_seed(Transfer.mean_sharing(chains[BIASED], layers[1:])),
                 "uniform": per_seed(Transfer.mean_sharing(chains[UNIFORM], layers[1:]))},
                f"mean sharing over tasks 2-{params['tasks']} and the layers after the first; "
                f"biased: {BIASED!r}, uniform: {UNIFORM!r}")
            if BIASED in chains and UNIFORM in chains else
            NotMeasured(f"the preset trains no {BIASED!r} and {UNIFORM!r} chains side by side "
                        "(variants: the paper preset)"),
        }
        return guarded(measured, min(c["reference"] for c in main), f"accuracy on {SPLIT}")

    @staticmethod
    def mean_sharing(chains, layers) -> list[float]:
        return [statistics.mean(c["sharing"][t][n] for t in range(1, len(c["sharing"]))
                                for n in layers) for c in chains]


register_experiment(Transfer())
