"""Improved DNC on the algorithmic tasks: ``dnc-repeat-copy``, ``dnc-associative-recall``,
``dnc-key-value`` (thesis Ch. 2, Sec. 2.3, Figs. 2.2-2.4, App. A.2).

Where the preset compiles the DNC's time step (``train.compile``: the ``default`` of repeat
copy and associative recall) every seed trains alone; elsewhere a variant's seeds form one
ensemble (variants train as separate jobs). Claims are measured on the final validation
metrics, the validation loss curves and probes of the memory states of each variant's best
seed (lowest final validation loss); two claims on constructed states (D erases a freed
cell, S never flattens a link distribution) are measured at every preset.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sglab import registry
from sglab.analysis.dnc_memory import forward_reads, probe, read_mask_switch
from sglab.experiments.base import Experiment
from sglab.experiments.claims import Measured, NotMeasured, per_seed
from sglab.experiments.dnc.dnc_common import (
    SPLIT,
    DNCParams,
    best_seed,
    constructed_state_measures,
    dnc_arms,
    loss_area,
    loss_figure,
    results_table,
    state_heatmaps,
    steps_to_loss,
)
from sglab.experiments.runs import RunSet
from sglab.tasks.dnc_bits import (
    AUTHORS_BLOCK_LENGTH,
    AUTHORS_BLOCKS,
    THESIS_BLOCK_LENGTH,
    THESIS_BLOCKS,
)


class RepeatCopyParams(DNCParams):
    loss_threshold: float  # validation loss per sequence whose first step each run reports


class KeyValueParams(DNCParams):
    solved: float  # a seed solves the task at this final validation exact match or above


def missing(variants: list[str], needed: list[str]) -> NotMeasured | None:
    """Why a claim on ``needed`` cannot be measured with ``variants`` (None: it can)."""
    absent = [v for v in needed if v not in variants]
    return NotMeasured(f"the preset trains no {', '.join(absent)} (the claim compares "
                       f"{', '.join(needed)})") if absent else None


def per_variant(runs: RunSet, variants: list[str], label: str, metric) -> dict[str, Any]:
    """``{"<variant> <label>": per-seed values}`` for every variant."""
    return {f"{v} {label}": per_seed(runs.where(variant=v).values(metric)) for v in variants}


class DNCExperiment(Experiment):
    def arms(self, params):
        return dnc_arms(params)

    def report(self, params, runs: RunSet, out_dir: Path, measured: dict[str, Any], figures,
               text="") -> dict:
        measured = {**measured, **constructed_state_measures()}
        variants = params["variants"]
        figures = [loss_figure(runs, variants, out_dir, self.title)] + figures
        train = params["base"]["train"]
        return {"measured": measured, "sections": [{
            "title": "Validation metrics per variant", "tables": [results_table(runs, variants)],
            "figures": figures,
            "text": f"{train['steps']} iterations of batch {train['batch_size']}, RMSProp lr "
                    f"{train['lr']}, {len(params['seeds'])} seed(s) per variant. " + text}]}


class RepeatCopy(DNCExperiment):
    name = "dnc-repeat-copy"
    params_model = RepeatCopyParams

    def analyze(self, params, runs, out_dir):
        variants, threshold = params["variants"], params["loss_threshold"]
        measured: dict[str, Measured | NotMeasured] = {}
        measured["sharpness-solves-repeat-copy"] = missing(
            variants, ["DNC", "DNC-DS", "DNC-MDS"]) or Measured(
            {**per_variant(runs, variants, "exact match", f"{SPLIT}/exact_match"),
             **per_variant(runs, variants, "mean loss", loss_area),
             **per_variant(runs, variants, "wrong bits", f"{SPLIT}/wrong_bits"),
             **{f"{v} first step with loss at most {threshold:g}":
                [None if (step := steps_to_loss(r, threshold)) == float("inf") else int(step)
                 for r in runs.where(variant=v)] for v in variants}},
            "final validation exact match (every output bit of a sequence right) and wrong "
            "bits per sequence; mean loss: the mean validation loss over all evaluations (the "
            "area under the loss curve); first evaluated step with validation loss at most the "
            "threshold: none where never reached")
        figures, links = [], {}
        for variant in ("DNC-D", "DNC-DS"):
            if variant in variants:
                run = best_seed(runs.where(variant=variant))
                states, data = probe(run, ["forward_links", "backward_links", "read_modes"])
                forward, modes = states["forward_links"][0, :, 0], states["read_modes"][0, :, 0]
                links[variant] = {**forward_reads(forward, states["backward_links"][0, :, 0],
                                                  modes, data.scored[0]), "seed": run.seed}
                figures.append(state_heatmaps(
                    out_dir, f"links_{variant}", [("forward links f_t", forward),
                                                  ("read modes (b, c, f)", modes)],
                    f"{variant} (seed {run.seed}): forward links and read modes",
                    "Thesis Fig. 2.4: forward link distribution over cells and read modes "
                    "(backward, content, forward) over time, first validation sequence, the "
                    "variant's best seed (lowest final validation loss).", "cell / mode"))
        if len(links) == 2:
            values = {}
            for variant, found in links.items():
                values[f"{variant} forward peak"] = found["peak"]
                for i, mode in enumerate(("backward", "content", "forward")):
                    values[f"{variant} {mode} mode"] = found["modes"][i]
                for i, mode in enumerate(("backward", "content", "forward")):
                    values[f"{variant} {mode} share"] = found["shares"][i]
            values["seeds probed (DNC-DS, DNC-D)"] = [links["DNC-DS"]["seed"],
                                                      links["DNC-D"]["seed"]]
            measured["sharpness-gives-sharp-forward-reads"] = Measured(
                values, "means over the read-phase steps of the first validation sequence, "
                        "each variant's best seed (lowest final validation loss); mode: the "
                        "read mode weight pi (Fig. 2.4c, d); share: pi times the mass of the "
                        "mode's distribution, the part of the read weighting it supplies "
                        "(Eq. A.12)")
        else:
            measured["sharpness-gives-sharp-forward-reads"] = missing(variants,
                                                                      ["DNC-D", "DNC-DS"])
        task = params["base"]["task"]
        return self.report(params, runs, out_dir, measured, figures,
                           f"L in {list(task['block_length'])} data rows a block, N in "
                           f"{list(task['blocks'])} blocks a sequence (the authors' code: L in "
                           f"{list(AUTHORS_BLOCK_LENGTH)}, N in {list(AUTHORS_BLOCKS)}; App. A.2's "
                           f"text: L in {list(THESIS_BLOCK_LENGTH)}, N in {list(THESIS_BLOCKS)}).")


class AssociativeRecall(DNCExperiment):
    name = "dnc-associative-recall"
    params_model = DNCParams

    def analyze(self, params, runs, out_dir):
        variants = params["variants"]
        area = {v: runs.where(variant=v).mean(loss_area) for v in variants}
        ranking = sorted(variants, key=area.get)
        losses = per_variant(runs, variants, "mean loss", loss_area)
        context = ("mean loss: the mean validation loss over all evaluations (the area under "
                   "the loss curve), per seed; the ranking is by its mean over seeds")
        masked = lambda v: "M" in v.removeprefix("DNC")  # noqa: E731
        measured: dict[str, Measured | NotMeasured] = {}
        measured["masking-variants-learn-recall-fastest"] = missing(
            variants, ["DNC", "DNC-M"]) or Measured(
            {**losses, "ranking (lowest mean loss first)": ranking,
             "the two best use M": all(masked(v) for v in ranking[:2])}, context)
        measured["sharpness-hurts-recall"] = missing(
            variants, ["DNC-M", "DNC-MS", "DNC-MD", "DNC-MDS"]) or Measured(losses, context)
        return self.report(params, runs, out_dir, measured, [],
                           "Area under the loss curve: the mean validation loss over all "
                           "evaluations. Task: B in "
                           f"{list(params['base']['task']['blocks'])} blocks.")


class KeyValue(DNCExperiment):
    name = "dnc-key-value"
    params_model = KeyValueParams

    def analyze(self, params, runs, out_dir):
        variants, solved = params["variants"], params["solved"]
        measured: dict[str, Measured | NotMeasured] = {}
        figures = []
        measured["masking-solves-key-value"] = missing(variants, ["DNC", "DNC-M"]) or Measured(
            {**{f"{v} solved": per_seed([r.final[f"{SPLIT}/exact_match"] >= solved
                                         for r in runs.where(variant=v)]) for v in variants},
             **per_variant(runs, variants, "exact match", f"{SPLIT}/exact_match"),
             **per_variant(runs, variants, "mean loss", loss_area),
             **per_variant(runs, variants, "bit accuracy", f"{SPLIT}/bit_accuracy")},
            f"solved: final validation exact match (every queried bit of a sequence right) ≥ "
            f"{solved:g}, per seed (its mean: the fraction of seeds); mean loss: the mean "
            "validation loss over all evaluations (the area under the loss curve)")
        masked = [v for v in variants if "M" in v.removeprefix("DNC")]
        if masked:
            run = best_seed(runs.where(variant=masked[0]))
            states, _ = probe(run, ["read_masks"])
            mask = states["read_masks"][0, :, 0]  # [T, W]
            found = read_mask_switch(mask)
            measured["read-mask-switches-with-the-query"] = Measured(
                {"mask change at the switch": found["switch"],
                 "mask change within the key phase": found["within"]},
                f"{masked[0]}, best seed ({run.seed}; lowest final validation loss), first "
                f"validation sequence ({found['words']} words): mean absolute difference of "
                "the mean read mask over memory channels")
            figures.append(state_heatmaps(out_dir, "read_mask", [("read mask m^r", mask)],
                                          f"{masked[0]}: read mask over time",
                                          "Thesis Fig. 2.2b: read mask per memory channel over "
                                          "time (phase 1 words, phase 2 keys, phase 3 values).",
                                          "memory channel"))
        else:
            measured["read-mask-switches-with-the-query"] = NotMeasured(
                "the preset has no masked variant")
        return self.report(params, runs, out_dir, measured, figures)


for _experiment in (RepeatCopy(), AssociativeRecall(), KeyValue()):
    registry.register_experiment(_experiment)

__all__ = ["AssociativeRecall", "KeyValue", "KeyValueParams", "RepeatCopy", "RepeatCopyParams"]
