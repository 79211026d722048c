"""The DNC chapter's claims (thesis ch. 2) judged on constructed values: a passing verdict on
values that follow the thesis, FAILS where its effect is reversed or absent."""

import pytest

from sglab import registry
from sglab.experiments.claims import Measured, Verdict, judge, per_seed

DOCUMENT = "001_76659a6d281e669d.txt"


def seeds(*values):
    return per_seed(values)


# the thesis' repeat copy: D with S reach zero error fast, the DNC never solves it
COPY = {"DNC exact match": seeds(0.0, 0.0, 0.0), "DNC-DS exact match": seeds(1.0, 0.99, 1.0),
        "DNC-MDS exact match": seeds(1.0, 1.0, 1.0), "DNC mean loss": seeds(40.0, 42.0, 41.0),
        "DNC-DS mean loss": seeds(12.0, 15.0, 11.0), "DNC-MDS mean loss": seeds(9.0, 10.0, 8.0)}
# Fig. 2.4: DNC-DS reads through sharp forward links, DNC-D by content from blurry ones
LINKS = {"DNC-DS forward peak": 0.97, "DNC-D forward peak": 0.2,
         "DNC-DS backward mode": 0.05, "DNC-DS content mode": 0.15, "DNC-DS forward mode": 0.8,
         "DNC-D backward mode": 0.1, "DNC-D content mode": 0.85, "DNC-D forward mode": 0.05}
DEALLOC = {"lookup weight of the freed cell with D": 1e-6,
           "lookup weight of the freed cell without D": 0.99, "uniform": 0.125}
# Fig. 2.2a: masked variants first, S behind its plain variant
RECALL = {"DNC mean loss": seeds(14.0, 15.0, 13.0), "DNC-M mean loss": seeds(11.0, 12.0, 10.0),
          "DNC-MS mean loss": seeds(13.0, 13.5, 12.5), "DNC-MD mean loss": seeds(12.0, 12.5, 11.0),
          "DNC-MDS mean loss": seeds(16.0, 16.3, 16.1), "the two best use M": True}
KEY_VALUE = {"DNC-M solved": seeds(True, True, False), "DNC solved": seeds(False, False, False),
             "DNC-M mean loss": seeds(5.0, 6.0, 9.0), "DNC mean loss": seeds(9.0, 9.5, 10.0)}
# Table 2.1
BABI = {"DNC-MD mean error": seeds(9.0, 10.0, 9.5), "DNC mean error": seeds(16.0, 17.0, 17.7),
        "DNC-MDS mean error": seeds(11.0, 10.0, 12.0), "Graves et al. mean error": 16.7}
SPREAD = {"DNC-MD seed std": 1.6, "DNC seed std": 5.2, "Graves et al. seed std": 7.6}

CASES = [
    # experiment, claim, values following the thesis, verdict, values without its effect
    ("dnc-repeat-copy", "sharpness-solves-repeat-copy", COPY, Verdict.REPRODUCES,
     {**COPY, "DNC-DS exact match": seeds(0.0, 0.0, 0.0),
      "DNC-MDS exact match": seeds(0.0, 0.0, 0.0)}),
    ("dnc-repeat-copy", "sharpness-solves-repeat-copy",
     {**COPY, "DNC-MDS exact match": seeds(0.9, 0.6, 0.8)}, Verdict.QUALITATIVE,
     {**COPY, "DNC-MDS mean loss": seeds(45.0, 44.0, 43.0)}),
    ("dnc-repeat-copy", "sharpness-gives-sharp-forward-reads", LINKS, Verdict.REPRODUCES,
     {**LINKS, "DNC-DS forward mode": 0.1, "DNC-DS content mode": 0.85}),
    ("dnc-repeat-copy", "sharpness-gives-sharp-forward-reads",
     {**LINKS, "DNC-DS forward peak": 0.8}, Verdict.QUALITATIVE,
     {**LINKS, "DNC-D content mode": 0.1, "DNC-D backward mode": 0.85}),
    ("dnc-associative-recall", "masking-variants-learn-recall-fastest", RECALL,
     Verdict.REPRODUCES, {**RECALL, "the two best use M": False,
                          "DNC-M mean loss": seeds(16.0, 16.0, 16.0)}),
    ("dnc-associative-recall", "sharpness-hurts-recall", RECALL, Verdict.REPRODUCES,
     {**RECALL, "DNC-MS mean loss": seeds(10.0, 11.0, 9.0)}),
    ("dnc-key-value", "masking-solves-key-value", KEY_VALUE, Verdict.REPRODUCES,
     {**KEY_VALUE, "DNC-M solved": seeds(False, False, False)}),
    ("dnc-key-value", "read-mask-switches-with-the-query",
     {"mask change at the switch": 0.43, "mask change within the key phase": 0.03},
     Verdict.REPRODUCES,
     {"mask change at the switch": 0.03, "mask change within the key phase": 0.03}),
    ("dnc-babi", "md-lowers-mean-error", BABI, Verdict.REPRODUCES,
     {**BABI, "DNC-MD mean error": seeds(18.0, 17.0, 19.0)}),
    ("dnc-babi", "md-lowers-mean-error", {**BABI, "DNC-MD mean error": seeds(14.0, 15.0, 14.5)},
     Verdict.QUALITATIVE, {**BABI, "DNC mean error": seeds(9.0, 9.0, 9.0)}),
    ("dnc-babi", "md-lowers-variance", SPREAD, Verdict.REPRODUCES,
     {**SPREAD, "DNC-MD seed std": 6.0}),
    ("dnc-babi", "sharpness-costs-a-little", BABI, Verdict.REPRODUCES,
     {**BABI, "DNC-MDS mean error": seeds(8.0, 9.0, 8.5)}),
    ("dnc-babi", "sharpness-costs-a-little", BABI, Verdict.REPRODUCES,
     {**BABI, "DNC-MDS mean error": seeds(20.0, 18.0, 19.0)}),
]
# the claims on constructed states, in each algorithmic experiment
for _name in ("dnc-repeat-copy", "dnc-associative-recall", "dnc-key-value"):
    CASES += [
        (_name, "dealloc-erases-freed-cells", DEALLOC, Verdict.REPRODUCES,
         {**DEALLOC, "lookup weight of the freed cell with D": 0.9}),
        (_name, "dealloc-erases-freed-cells", DEALLOC, Verdict.REPRODUCES,
         {**DEALLOC, "lookup weight of the freed cell without D": 1e-6}),
        (_name, "sharpening-never-flattens-links",
         {"smallest gain of the peak": 0.0, "distributions": 256}, Verdict.REPRODUCES,
         {"smallest gain of the peak": -0.2, "distributions": 256}),
    ]


@pytest.mark.parametrize("name, claim_id, passing, verdict, failing", CASES,
                         ids=[f"{c[0]}:{c[1]}:{i}" for i, c in enumerate(CASES)])
def test_claim_passes_on_the_thesis_and_fails_without_its_effect(name, claim_id, passing,
                                                                  verdict, failing):
    spec = registry.experiment(name).spec.claims[claim_id]
    assert spec.source.document == DOCUMENT
    assert judge(claim_id, spec, Measured(passing)).verdict == verdict
    assert judge(claim_id, spec, Measured(failing)).verdict == Verdict.FAILS


def test_every_claim_of_the_chapter_has_a_case():
    for name in ("dnc-repeat-copy", "dnc-associative-recall", "dnc-key-value", "dnc-babi"):
        covered = {claim for experiment, claim, *_ in CASES if experiment == name}
        assert covered == set(registry.experiment(name).spec.claims), name


def test_claims_without_the_thesis_numbers_say_so_and_table_2_1_is_referenced():
    """The algorithmic tasks are figures without numbers: claims there carry no reference
    unless the text states one ("zero error", "peaking near 1.0"), and a note; Table 2.1's
    means are references with their std."""
    for name in ("dnc-repeat-copy", "dnc-associative-recall", "dnc-key-value"):
        for claim_id, spec in registry.experiment(name).spec.claims.items():
            assert spec.note, claim_id
    copy = registry.experiment("dnc-repeat-copy").spec.claims
    assert {n: r.mean for n, r in copy["sharpness-solves-repeat-copy"].references.items()} == {
        "DNC-DS exact match": 1.0, "DNC-MDS exact match": 1.0, "DNC exact match": 0.0}
    for name in ("dnc-associative-recall", "dnc-key-value"):
        for spec in registry.experiment(name).spec.claims.values():
            assert not spec.references
    babi = registry.experiment("dnc-babi").spec.claims
    assert {n: (r.mean, r.std) for n, r in babi["sharpness-costs-a-little"].references.items()} \
        == {"DNC-MDS mean error": (11.0, 3.8), "DNC-MD mean error": (9.5, 1.6),
            "DNC mean error": (16.9, 5.2)}
    recall = registry.experiment("dnc-associative-recall").spec.claims
    assert "B in [2, 4]" in recall["masking-variants-learn-recall-fastest"].note
