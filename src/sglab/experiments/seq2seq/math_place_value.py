"""Mathematics place_value: relative universal Transformers extrapolate to longer numbers.

Thesis chapter 4 (Csordás et al. 2021, "The Devil is in the Detail"), Tables 4.3, 4.4
and C.5; a scaled-down "stretch" reproduction. Encoder-decoder Transformers
{Transformer, Universal, Relative, Relative Universal} read a place-value question
character by character (``What is the hundreds digit of 17105927?`` -> ``9``), trained
on numbers drawn as the published generator draws them (entropy 3-10, up to 10 digits)
and tested on the interpolate split (entropy 8, mostly 8 digits) and the extrapolate
split (entropy 12, mostly 12 digits). Sequence-level exact
match, EOS trained, greedy decoding (task ``mathematics``, module
``numbers__place_value``).

Each absolute variant uses the embedding scaling that was best for it on place_value
(Table C.5): no scaling for the Transformer (0.12; PED gave 0.00), PED for the
Universal Transformer (0.20). The thesis leaves the non-universal relative Transformer
out of place_value because its training collapses; it is trained here too, since on
two workers a fourth run costs no wall time, and its row is marked as such.

Claims (``math-place-value.yaml``): the relative universal Transformer extrapolates
much better than the absolute-position variants (Table 4.4); the Universal and Relative
Universal Transformers both reach ~100% on the interpolate split (Table 4.3), which
therefore cannot tell them apart.

The extrapolate split also asks for places no training question names (ten billions
and up: about 16% of its questions), so accuracy on the places seen in training is
reported beside the total.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sglab import registry
from sglab.experiments.base import Experiment
from sglab.experiments.runs import Arm, RunSet
from sglab.experiments.seq2seq.seq2seq_variants import (
    IID,
    OOD,
    Seq2SeqParams,
    best_iid,
    check_variants,
    curves_figure,
    group_accuracy_figure,
    selection,
    variant_switches,
    variant_values,
)

# thesis Table C.5: the scaling each absolute variant did best with on place_value;
# relative models add no position term, so the scheme only sets their token init
EMBEDDING_SCALING = {"Transformer": "none", "Universal": "ped", "Relative": "ped",
                     "Relative Universal": "ped"}
# thesis Tables 4.3 (IID = interpolate) and 4.4 (extrapolate): (mean, std) over 5 seeds;
# None: the thesis omits the non-universal relative Transformer (training collapses)
PAPER = {
    "Transformer": {"iid": (0.8, 0.5), "extrapolate": (0.12, 0.07)},
    "Universal": {"iid": (1.0, None), "extrapolate": (0.20, 0.02)},
    "Relative": {"iid": None, "extrapolate": None},
    "Relative Universal": {"iid": (1.0, None), "extrapolate": (0.75, 0.10)},
}


def _paper(value) -> str:
    if value is None:
        return "- (omitted: training collapses)"
    mean, std = value
    return f"{mean:.2f}" if std is None else f"{mean:.2f} ± {std:.2f}"


class MathPlaceValue(Experiment):
    name = "math-place-value"
    params_model = Seq2SeqParams

    # ------------------------------------------------------------------ runs
    def arms(self, params: dict[str, Any]) -> list[Arm]:
        check_variants(params["variants"])
        arms = []
        for variant in params["variants"]:
            # the embedding scaling is part of the variant's base, so --set can change it
            base = params["base"]
            base = {**base, "model": {**base["model"],
                                      "embedding_scaling": EMBEDDING_SCALING[variant]}}
            arms += [Arm({"variant": variant}, base, variant_switches(variant), seed)
                     for seed in params["seeds"]]
        return arms

    # ------------------------------------------------------------------ analysis
    def analyze(self, params: dict[str, Any], runs: RunSet, out_dir: Path) -> dict[str, Any]:
        variants, patience = params["variants"], params["patience"]
        accuracy, seen_places = f"{OOD}/exact_match", f"{OOD}/exact_match/place_in_train=1"
        rows = []
        for variant, group in ((v, runs.where(variant=v)) for v in variants):
            rows.append([
                variant, group[0].config.model.embedding_scaling, group[0].summary.get("parameters"),
                group.mean_std(f"{IID}/exact_match", 3), group.mean_std(best_iid, 3),
                group.mean_std(accuracy, 3), group.mean_std(seen_places, 3),
                group.mean_std(f"{OOD}/exact_match/place_in_train=0", 3),
                group.mean_std(lambda r: selection(r, patience)["early"]["best_ood"], 3),
                group.mean_std(lambda r: selection(r, patience)["early"]["early_stop_ood"], 3),
                _paper(PAPER[variant]["iid"]), _paper(PAPER[variant]["extrapolate"]),
            ])
        table = {"title": "Exact match at the end of training (mean ± std over seeds)",
                 "columns": ["variant", "embedding scaling", "parameters", "interpolate (IID)",
                             "best interpolate during training", "extrapolate",
                             "extrapolate, places seen in training",
                             "extrapolate, new places (ten billions and up)",
                             "best extrapolate during training",
                             "extrapolate at the IID-loss early stop",
                             "thesis interpolate (Table 4.3)", "thesis extrapolate (Table 4.4)"],
                 "rows": rows}
        seen = ", ".join(f"{v} {runs.where(variant=v).mean(seen_places):.3f}" for v in variants)
        measured = {
            "relative-universal-extrapolates": variant_values(
                runs, ["Transformer", "Universal", "Relative Universal"], variants, accuracy,
                "extrapolate exact match at the end of training; mean on the places seen in "
                f"training: {seen}"),
            "universal-variants-interpolate-near-perfect": variant_values(
                runs, ["Transformer", "Universal", "Relative Universal"], variants,
                f"{IID}/exact_match", "interpolate (IID) exact match at the end of training"),
        }
        place = "place k (the 10^k digit)"
        sections = [{
            "title": "Accuracy per variant", "tables": [table],
            "text": "Training: numbers drawn as the published generator draws them (entropy "
                    "3-10, up to 10 digits). Interpolate (IID): held-out questions at entropy 8 "
                    "(mostly 8 digits). Extrapolate: entropy 12 (mostly 12 digits); its "
                    "questions about the ten and hundred billions digits name places that no "
                    "training question names. Early stop: the checkpoint that early stopping "
                    f"on the interpolate loss (patience {patience} evaluations) "
                    "would keep. The thesis numbers are means ± std over 5 seeds at the sizes "
                    "of the paper preset (Table C.1); the thesis omits the non-universal "
                    "relative Transformer on place_value because its training collapses.",
            "figures": [
                curves_figure([("numbers__place_value", runs)], variants, out_dir, patience,
                              ood="extrapolate", iid="interpolate (IID)",
                              ylabel="exact match (solid extrap., dotted interp.)"),
                group_accuracy_figure(
                    [("interpolate: accuracy by place", runs, f"{IID}/exact_match/place=", place),
                     ("extrapolate: accuracy by place", runs, f"{OOD}/exact_match/place=", place),
                     ("extrapolate: accuracy by number length", runs,
                      f"{OOD}/exact_match/digits=", "digits in the number")],
                    variants, out_dir, "by_place", "accuracy by place and length",
                    "Final exact match per asked place (k: the digit worth 10^k; k ≥ 10 never "
                    "asked in training) and per number length (mean over seeds)."),
            ],
        }]
        return {"measured": measured, "sections": sections}


registry.register_experiment(MathPlaceValue())

__all__ = ["MathPlaceValue"]
