"""Thesis ch. 4 claims (scan-length, math-place-value) on constructed values: values that
follow the thesis pass, values where its effect is reversed or absent fail."""

import pytest

from sglab.experiments.claims import Measured, Verdict, judge, per_seed
from sglab.experiments.seq2seq.math_place_value import MathPlaceValue
from sglab.experiments.seq2seq.scan_length import ScanLength

SCAN, MATH = ScanLength(), MathPlaceValue()
VARIANTS = ("Transformer", "Universal", "Relative", "Relative Universal")


def variants(*accuracies, names=VARIANTS) -> dict:
    """One value per variant, each a list over seeds (or one number for every seed)."""
    return {name: per_seed(a if isinstance(a, list) else [a] * 3)
            for name, a in zip(names, accuracies)}


def early_stopping(final, kept, below_half) -> dict:
    return {"final OOD": per_seed(final), "early-stopped OOD": per_seed(kept),
            "runs below half of final": below_half, "runs that lose": 0, "runs that gain": 0}


ABSOLUTE_AND_UNIVERSAL = ("Transformer", "Universal", "Relative Universal")

CASES = [
    # Table 4.3: 1.0 ± 0.0 for every variant at cutoff 26
    (SCAN, "iid-validation-near-perfect", variants(1.0, [1.0, 0.99, 1.0], 1.0, 0.98),
     Verdict.REPRODUCES),
    (SCAN, "iid-validation-near-perfect", variants([0.8, 0.85, 0.9], 0.95, 1.0, 1.0),
     Verdict.FAILS),
    (SCAN, "iid-validation-near-perfect", variants([1.0, 1.0, 0.9], 1.0, 1.0, 1.0),
     Verdict.FAILS),  # the mean passes, one seed does not
    # Table 4.1, cutoff 26: 0.29 / 0.21 / 0.61 / 1.00
    (SCAN, "relative-universal-generalizes-to-longer-outputs",
     variants([0.27, 0.31, 0.29], 0.21, [0.58, 0.64, 0.61], 1.0), Verdict.REPRODUCES),
    (SCAN, "relative-universal-generalizes-to-longer-outputs", variants(0.12, 0.15, 0.52, 0.66),
     Verdict.QUALITATIVE),
    (SCAN, "relative-universal-generalizes-to-longer-outputs", variants(0.9, 0.8, 0.3, 0.2),
     Verdict.FAILS),
    (SCAN, "relative-universal-generalizes-to-longer-outputs", variants(0.3, 0.3, 0.3, 0.3),
     Verdict.FAILS),
    (SCAN, "relative-universal-generalizes-to-longer-outputs", variants(0.2, 0.2, 0.9, 0.6),
     Verdict.FAILS),  # the relative universal Transformer is not the best
    # judged on the median of 5 seeds, as Table 4.1: two collapsed seeds leave the median at
    # 1.0 (their mean, 0.66, would be outside 1.0's tolerance)
    (SCAN, "relative-universal-generalizes-to-longer-outputs",
     variants([0.29] * 5, [0.21] * 5, [0.61] * 5, [1.0, 1.0, 1.0, 0.2, 0.1]),
     Verdict.REPRODUCES),
    # Table 4.1, cutoff 30: 0.24 / 0.06 / 1.00 / 1.00
    (SCAN, "relative-positions-generalize-at-cutoff-30", variants(0.24, 0.06, 1.0, 1.0),
     Verdict.REPRODUCES),
    (SCAN, "relative-positions-generalize-at-cutoff-30", variants(0.24, 0.06, 0.25, 0.25),
     Verdict.FAILS),
    # Table 4.4, cutoff 26: 0.30 ± 0.02 / 0.21 ± 0.01 / 0.72 ± 0.21 / 1.00 ± 0.00
    (SCAN, "relative-universal-reaches-100-at-cutoff-26", variants(0.30, 0.21, 0.72, 1.0),
     Verdict.REPRODUCES),
    (SCAN, "relative-universal-reaches-100-at-cutoff-26", variants(0.15, 0.15, 0.5, 0.66),
     Verdict.QUALITATIVE),
    (SCAN, "relative-universal-reaches-100-at-cutoff-26",
     variants(0.30, 0.21, 0.72, [1.0, 1.0, 0.4]), Verdict.FAILS),  # one seed does not
    (SCAN, "relative-universal-reaches-100-at-cutoff-26", variants(0.8, 0.7, 0.72, 0.6),
     Verdict.FAILS),
    # Sec. 4.2.2: the early-stopped model generalizes worse, in some cases below half
    (SCAN, "iid-early-stopping-loses-ood-accuracy",
     early_stopping([0.6, 0.7, 0.65], [0.4, 0.6, 0.3], below_half=2), Verdict.REPRODUCES),
    (SCAN, "iid-early-stopping-loses-ood-accuracy",
     early_stopping([0.6, 0.7, 0.65], [0.6, 0.7, 0.66], below_half=0), Verdict.FAILS),
    (SCAN, "iid-early-stopping-loses-ood-accuracy",
     early_stopping([0.6, 0.7, 0.65], [0.5, 0.6, 0.55], below_half=0), Verdict.FAILS),
    # Table 4.4, place_value extrapolate: 0.12 ± 0.07 / 0.20 ± 0.02 / 0.75 ± 0.10
    (MATH, "relative-universal-extrapolates",
     variants([0.05, 0.12, 0.19], 0.20, [0.65, 0.75, 0.85], names=ABSOLUTE_AND_UNIVERSAL),
     Verdict.REPRODUCES),
    (MATH, "relative-universal-extrapolates",
     variants(0.24, 0.36, 0.9, names=ABSOLUTE_AND_UNIVERSAL), Verdict.QUALITATIVE),
    (MATH, "relative-universal-extrapolates",
     variants(0.24, 0.36, 0.31, names=ABSOLUTE_AND_UNIVERSAL), Verdict.FAILS),
    # Table 4.3, place_value interpolate: 0.8 ± 0.5 / 1.0 ± 0.0 / 1.0 ± 0.0
    (MATH, "universal-variants-interpolate-near-perfect",
     variants([1.0, 0.3, 1.0], 1.0, 0.99, names=ABSOLUTE_AND_UNIVERSAL), Verdict.REPRODUCES),
    (MATH, "universal-variants-interpolate-near-perfect",
     variants(0.88, [0.93, 0.94, 0.95], 1.0, names=ABSOLUTE_AND_UNIVERSAL), Verdict.FAILS),
    (MATH, "universal-variants-interpolate-near-perfect",
     variants(0.88, 1.0, [1.0, 1.0, 0.7], names=ABSOLUTE_AND_UNIVERSAL), Verdict.FAILS),
]


@pytest.mark.parametrize("experiment, claim_id, values, verdict", CASES,
                         ids=[f"{c[1]}-{i}" for i, c in enumerate(CASES)])
def test_claim_verdict_on_constructed_values(experiment, claim_id, values, verdict):
    claim = judge(claim_id, experiment.spec.claims[claim_id], Measured(values))
    assert claim.verdict == verdict, claim.evidence


def test_every_claim_has_a_passing_and_a_failing_case():
    for experiment in (SCAN, MATH):
        for claim_id in experiment.spec.claims:
            verdicts = {v for e, c, _, v in CASES if e is experiment and c == claim_id}
            assert Verdict.FAILS in verdicts, claim_id
            assert verdicts & {Verdict.REPRODUCES, Verdict.QUALITATIVE}, claim_id


def test_claims_cite_the_thesis_with_its_numbers():
    specs = {**SCAN.spec.claims, **MATH.spec.claims}
    assert all(s.source.document == "001_76659a6d281e669d.txt" for s in specs.values())
    table_4_1 = specs["relative-universal-generalizes-to-longer-outputs"]
    assert {n: r.mean for n, r in table_4_1.references.items()} == {
        "Transformer": 0.29, "Universal": 0.21, "Relative": 0.61, "Relative Universal": 1.0}
    # Table 4.1 reports medians of 5 runs, at the better embedding scaling (Table C.3)
    assert table_4_1.statistic == "median" and "PED" in table_4_1.note
    assert specs["relative-positions-generalize-at-cutoff-30"].statistic == "median"
    assert specs["relative-universal-reaches-100-at-cutoff-26"].statistic == "mean"  # Table 4.4
    place_value = specs["relative-universal-extrapolates"].references
    assert [(r.mean, r.std) for r in place_value.values()] == [(0.12, 0.07), (0.20, 0.02),
                                                              (0.75, 0.10)]
    assert specs["iid-validation-near-perfect"].every_seed
