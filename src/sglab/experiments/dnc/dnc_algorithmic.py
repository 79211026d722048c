"""Improved DNC on the algorithmic tasks: ``dnc-repeat-copy``, ``dnc-associative-recall``,
``dnc-key-value`` (thesis Ch. 2, Sec. 2.3, Figs. 2.2-2.4, App. A.2).

Where the preset compiles the DNC's time step (``train.compile``: the ``default`` of repeat
copy and associative recall) every seed trains alone; elsewhere a variant's seeds form one
ensemble (variants train as separate jobs). Claims come from the validation loss curves, the
final validation metrics and probes of the memory states of each variant's best seed (lowest
final validation loss); two claims on constructed states (D erases a freed cell, S never
flattens a link distribution) hold at every preset.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from sglab import registry
from sglab.experiments.base import Experiment
from sglab.experiments.dnc.dnc_common import (
    SPLIT,
    best_seed,
    constructed_state_claims,
    dnc_arms,
    dnc_base,
    loss_area,
    loss_figure,
    probe,
    read_shares,
    results_table,
    state_heatmaps,
    steps_to_loss,
)
from sglab.experiments.legacy_claims import at_least, claim, greater_than, is_true, less_than, not_measurable
from sglab.experiments.runs import RunSet
from sglab.tasks.dnc_bits import (
    AUTHORS_BLOCK_LENGTH,
    AUTHORS_BLOCKS,
    THESIS_BLOCK_LENGTH,
    THESIS_BLOCKS,
)

QUICK = {"seeds": [0], "quiet": True}


def _task(name: str, valid: tuple[int, int] = (8, 32), **fields) -> dict[str, Any]:
    return {"name": name, "valid_batches": valid[0], "valid_batch_size": valid[1], **fields}


class DNCExperiment(Experiment):
    def arms(self, params):
        return dnc_arms(params)

    def report(self, params, runs: RunSet, out_dir: Path, claims, figures, text="") -> dict:
        claims = claims + constructed_state_claims()
        variants = params["variants"]
        figures = [loss_figure(runs, variants, out_dir, self.title)] + figures
        steps = params["base"]["train"]["steps"]
        return {"claims": claims, "sections": [{
            "title": "Validation metrics per variant", "tables": [results_table(runs, variants)],
            "figures": figures,
            "text": f"{steps} iterations of batch {params['base']['train']['batch_size']}, "
                    f"RMSProp lr {params['base']['train']['lr']}, {len(params['seeds'])} seed(s) "
                    "per variant. " + text}]}


class RepeatCopy(DNCExperiment):
    name = "dnc-repeat-copy"
    title = "Improved DNC: repeated copy"
    description = ("Thesis Sec. 2.3, Figs. 2.3 and 2.4: N blocks of L random 8-bit rows, each to "
                   "be repeated after a flag row; N·L exceeds the memory, so cells must be "
                   "freed and reused. Variants DNC, DNC-D, DNC-DS, DNC-MDS.")
    presets = {
        "quick": {**QUICK, "variants": ["DNC", "DNC-D", "DNC-DS"], "loss_threshold": 5.0,
                  "base": dnc_base(_task("dnc_repeat_copy", (2, 8), block_length=[1, 2],
                                         blocks=[2, 3]), 6, 6, 16, 20, 8, 10, lr=1e-3)},
        # the authors' ranges: L in [2, 14] rows, N in [1, 8] blocks (their `repeat_copy`
        # profile; Fig. 2.4's read phases of up to 13 steps need L > 8, so the figures were
        # drawn at these, not at App. A.2's L in [1, 8], N in [2, 14]); one seed, each run
        # alone with a compiled time step (README: DNC-DS solves it by ~3,400 iterations)
        "default": {"seeds": [0], "variants": ["DNC", "DNC-D", "DNC-DS", "DNC-MDS"],
                    "loss_threshold": 5.0, "mask_min": 0.1,
                    "base": dnc_base(_task("dnc_repeat_copy", block_length=AUTHORS_BLOCK_LENGTH,
                                           blocks=AUTHORS_BLOCKS),
                                     16, 16, 32, 4000, 16, 100, lr=1e-3, compile=True)},
        # App. A.2 sizes at the authors' ranges and lr, for a GPU
        "paper": {"seeds": [0, 1, 2], "variants": ["DNC", "DNC-D", "DNC-DS", "DNC-MDS"],
                  "loss_threshold": 5.0, "mask_min": 0.1,
                  "base": dnc_base(_task("dnc_repeat_copy", block_length=AUTHORS_BLOCK_LENGTH,
                                         blocks=AUTHORS_BLOCKS),
                                   16, 16, 32, 50_000, 16, 1000, threads=None, as_code=True)},
    }

    def analyze(self, params, runs, out_dir):
        variants = params["variants"]
        wrong = {v: runs.where(variant=v).mean(f"{SPLIT}/wrong_bits") for v in variants}
        accuracy = {v: runs.where(variant=v).mean(f"{SPLIT}/bit_accuracy") for v in variants}
        sharp = [v for v in ("DNC-DS", "DNC-MDS") if v in variants]
        statement = ("DNC-DS and DNC-MDS end with fewer wrong bits than the DNC and reach a loss "
                     "threshold sooner (thesis: zero error, ~3x faster, the DNC fails).")
        if "DNC" not in variants or not sharp:
            claims = [not_measurable("sharpness-solves-repeat-copy", statement,
                                     "the preset needs DNC and DNC-DS or DNC-MDS")]
        elif all(steps_to_loss(r, params["loss_threshold"]) == float("inf") for r in runs):
            claims = [not_measurable("sharpness-solves-repeat-copy", statement,
                                     f"no run reached the loss threshold "
                                     f"{params['loss_threshold']} (best final bit accuracy "
                                     f"{max(accuracy.values()):.3f}); see the loss curves")]
        else:
            threshold = params["loss_threshold"]
            reach = {f"{v} steps to loss {threshold}": statistics.median(
                steps_to_loss(r, threshold) for r in runs.where(variant=v)) for v in variants}
            values = {**{f"{v} wrong bits": wrong[v] for v in variants}, **reach}
            rules = [less_than(f"{v} wrong bits", "DNC wrong bits") for v in sharp]
            rules += [less_than(f"{v} steps to loss {threshold}", f"DNC steps to loss {threshold}")
                      for v in sharp]
            claims = [claim("sharpness-solves-repeat-copy", statement, values, rules,
                            context="final validation wrong bits per sequence (mean over "
                                    "seeds); median first step reaching the loss")]
        figures, links = [], {}
        for variant in ("DNC-D", "DNC-DS"):
            if variant in variants:
                run = best_seed(runs.where(variant=variant))
                states, data = probe(run, ["forward_links", "backward_links", "read_modes"])
                read = data.scored[0]
                forward, modes = states["forward_links"][0, :, 0], states["read_modes"][0, :, 0]
                shares = read_shares(modes, states["backward_links"][0, :, 0], forward)
                links[variant] = {"peak": float(forward[read].amax(-1).mean()),
                                  "modes": modes[read].mean(0).tolist(),
                                  "shares": shares[read].mean(0).tolist(), "seed": run.seed}
                figures.append(state_heatmaps(
                    out_dir, f"links_{variant}", [("forward links f_t", forward),
                                                  ("read modes (b, c, f)", modes)],
                    f"{variant} (seed {run.seed}): forward links and read modes",
                    "Thesis Fig. 2.4: forward link distribution over cells and read modes "
                    "(backward, content, forward) over time, first validation sequence, the "
                    "variant's best seed (lowest final validation loss).", "cell / mode"))
        statement = ("With S the forward-link distribution in read phases peaks near 1 and the "
                     "reads go through the forward links; with D alone content lookup "
                     "dominates (Fig. 2.4).")
        if len(links) == 2:
            ds, d = links["DNC-DS"], links["DNC-D"]
            claims.append(claim("sharpness-gives-sharp-forward-reads", statement, {
                "DNC-DS forward peak": ds["peak"], "DNC-D forward peak": d["peak"],
                "DNC-DS forward share": ds["shares"][2], "DNC-DS content share": ds["shares"][1],
                "DNC-D content share": d["shares"][1], "DNC-D forward share": d["shares"][2],
                "read modes pi (b, c, f), DNC-DS": ds["modes"],
                "read modes pi (b, c, f), DNC-D": d["modes"],
                "seeds probed (DNC-DS, DNC-D)": [ds["seed"], d["seed"]]},
                [greater_than("DNC-DS forward peak", "DNC-D forward peak"),
                 greater_than("DNC-DS forward share", "DNC-DS content share"),
                 greater_than("DNC-D content share", "DNC-D forward share")],
                context="means over the read-phase steps of the first validation sequence, "
                        "each variant's best seed (lowest final validation loss); a mode's "
                        "share of the read weighting is its weight pi times the mass of its "
                        "distribution (Eq. A.12): a mode weight on empty links reads nothing"))
        else:
            claims.append(not_measurable("sharpness-gives-sharp-forward-reads", statement,
                                         "the preset needs DNC-D and DNC-DS"))
        task = params["base"]["task"]
        return self.report(params, runs, out_dir, claims, figures,
                           f"L in {list(task['block_length'])} data rows a block, N in "
                           f"{list(task['blocks'])} blocks a sequence (the authors' code: L in "
                           f"{list(AUTHORS_BLOCK_LENGTH)}, N in {list(AUTHORS_BLOCKS)}; App. A.2's "
                           f"text: L in {list(THESIS_BLOCK_LENGTH)}, N in {list(THESIS_BLOCKS)}).")


class AssociativeRecall(DNCExperiment):
    name = "dnc-associative-recall"
    title = "Improved DNC: associative recall"
    description = ("Thesis Fig. 2.2a: B blocks of three 8-bit words; after a query block the "
                   "model outputs the block that followed it. Variants DNC, M, MD, DS, MS, MDS.")
    presets = {
        "quick": {**QUICK, "variants": ["DNC", "DNC-M", "DNC-MS"], "mask_min": 0.1,
                  "base": dnc_base(_task("dnc_associative_recall", (2, 8), blocks=[2, 3]),
                                   8, 8, 16, 20, 8, 10, lr=1e-3)},
        "default": {"seeds": list(range(6)), "mask_min": 0.1,
                    "variants": ["DNC", "DNC-M", "DNC-MD", "DNC-DS", "DNC-MS", "DNC-MDS"],
                    # the authors' init and -1/+1 inputs, RMSProp lr 3e-4 (at lr 1e-3 half the
                    # runs stay on the plateau, at 1e-4 all of them: README). B in [2, 4] in
                    # 16 cells of App. A.2's 32 bits, LSTM 32: at B in [2, 8], 32 cells, LSTM
                    # 64 a run took 5 min and three seeds a variant left the ranking to single
                    # seeds; here six seeds fit about 32 minutes. With 16-bit cells the DNC
                    # learned as fast as DNC-M, in the thesis code too (12 seeds, README).
                    # Seeds alone, compiled.
                    "base": dnc_base(_task("dnc_associative_recall", blocks=[2, 4]),
                                     16, 32, 32, 3000, 16, 100, lr=3e-4, compile=True,
                                     as_code=True)},
        # thesis App. A.2: LSTM 128, memory 64 x 32, B in [2, 16]; 12 seeds per variant
        "paper": {"seeds": list(range(12)), "mask_min": 0.1,
                  "variants": ["DNC", "DNC-M", "DNC-MD", "DNC-DS", "DNC-MS", "DNC-MDS"],
                  "base": dnc_base(_task("dnc_associative_recall", blocks=[2, 16]),
                                   64, 32, 128, 50_000, 16, 1000, threads=None,
                                   as_code=True)},
    }

    def analyze(self, params, runs, out_dir):
        variants = params["variants"]
        area = {v: runs.where(variant=v).mean(loss_area) for v in variants}
        ranking = sorted(variants, key=area.get)
        masked = lambda v: "M" in v.removeprefix("DNC")
        claims = [claim(
            "masking-variants-learn-recall-fastest",
            "The two best variants by area under the loss curve use masking (Fig. 2.2a).",
            {"ranking (lowest mean loss first)": ranking, "mean loss": [area[v] for v in ranking],
             "the two best use M": all(masked(v) for v in ranking[:2])},
            [is_true("the two best use M")])]
        pairs = [(v, v.replace("S", "")) for v in variants if v.endswith("S") and "M" in v
                 and v.replace("S", "") in variants]
        statement = "Adding S to a masked DNC hurts on associative recall (Fig. 2.2a)."
        if pairs:
            claims.append(claim("sharpness-hurts-recall", statement,
                                {f"{v} mean loss": area[v] for pair in pairs for v in pair},
                                [greater_than(f"{s} mean loss", f"{plain} mean loss")
                                 for s, plain in pairs]))
        else:
            claims.append(not_measurable("sharpness-hurts-recall", statement,
                                         "the preset needs DNC-M or DNC-MD with its S variant"))
        return self.report(params, runs, out_dir, claims, [],
                           "Area under the loss curve: the mean validation loss over all "
                           "evaluations.")


class KeyValue(DNCExperiment):
    name = "dnc-key-value"
    title = "Improved DNC: 2-way key-value retrieval"
    description = ("Thesis Fig. 2.2b: L words of a key and a value half; queried first by keys "
                   "(output the values) then by values (output the keys). DNC vs DNC-M.")
    presets = {
        "quick": {**QUICK, "variants": ["DNC", "DNC-M"], "mask_min": 0.1, "solved": 0.9,
                  "base": dnc_base(_task("dnc_key_value", (2, 8), words=[2, 3], half_bits=4),
                                   8, 8, 16, 20, 8, 10, lr=1e-3)},
        # thesis size (LSTM 32, 16 x 32 memory), the authors' 6-bit halves, L in [2, 8];
        # 9,000 iterations and 6 seeds: whether a seed leaves the plateau by then is a lottery
        # that 3 seeds decide either way (README)
        "default": {"seeds": list(range(6)), "variants": ["DNC", "DNC-M"], "mask_min": 0.1,
                    "mask_bias_init": 1.0, "solved": 0.9,
                    "base": dnc_base(_task("dnc_key_value", words=[2, 8], half_bits=6), 16, 32,
                                     32, 9000, 16, 200, lr=1e-3)},
        "paper": {"seeds": [0, 1, 2], "variants": ["DNC", "DNC-M"], "mask_min": 0.1,
                  "solved": 0.99,
                  "base": dnc_base(_task("dnc_key_value", words=[2, 16]), 16, 32, 32, 50_000,
                                   16, 1000, threads=None, as_code=True)},
    }

    def analyze(self, params, runs, out_dir):
        variants = params["variants"]
        accuracy = {v: runs.where(variant=v).mean(f"{SPLIT}/bit_accuracy") for v in variants}
        claims, figures = [], []
        statement = "Masking solves 2-way key-value retrieval; the plain DNC does worse (Fig. 2.2b)."
        if {"DNC", "DNC-M"} <= set(variants):
            claims.append(claim("masking-solves-key-value", statement,
                                {"DNC-M bit accuracy": accuracy["DNC-M"],
                                 "DNC bit accuracy": accuracy["DNC"]},
                                [at_least("DNC-M bit accuracy", params["solved"]),
                                 greater_than("DNC-M bit accuracy", "DNC bit accuracy")],
                                context="final validation bit accuracy on the queried halves, "
                                        "mean over seeds"))
        else:
            claims.append(not_measurable("masking-solves-key-value", statement,
                                         "the preset needs DNC and DNC-M"))
        statement = ("The read mask changes when the query switches from keys to values "
                     "(Fig. 2.2b).")
        masked = [v for v in variants if "M" in v.removeprefix("DNC")]
        if masked:
            run = best_seed(runs.where(variant=masked[0]))
            states, data = probe(run, ["read_masks"])
            mask = states["read_masks"][0, :, 0]  # [T, W]
            words = mask.shape[0] // 3 - 1
            phase2, phase3 = mask[words + 1: 2 * words + 1], mask[2 * words + 2: 3 * words + 2]
            switch = float((phase2.mean(0) - phase3.mean(0)).abs().mean())
            half = max(words // 2, 1)
            within = float((phase2[:half].mean(0) - phase2[half:].mean(0)).abs().mean()) \
                if words > 1 else 0.0
            claims.append(claim("read-mask-switches-with-the-query", statement, {
                "mask change at the switch": switch, "mask change within the key phase": within},
                [greater_than("mask change at the switch", "mask change within the key phase")],
                context=f"{masked[0]}, best seed ({run.seed}; lowest final validation "
                        f"loss), first validation sequence ({words} words): "
                        "mean absolute difference of the mean read mask over memory channels"))
            figures.append(state_heatmaps(out_dir, "read_mask", [("read mask m^r", mask)],
                                          f"{masked[0]}: read mask over time",
                                          "Thesis Fig. 2.2b: read mask per memory channel over "
                                          "time (phase 1 words, phase 2 keys, phase 3 values).",
                                          "memory channel"))
        else:
            claims.append(not_measurable("read-mask-switches-with-the-query", statement,
                                         "the preset has no masked variant"))
        return self.report(params, runs, out_dir, claims, figures)


for _experiment in (RepeatCopy(), AssociativeRecall(), KeyValue()):
    registry.register_experiment(_experiment)

__all__ = ["AssociativeRecall", "KeyValue", "RepeatCopy"]
