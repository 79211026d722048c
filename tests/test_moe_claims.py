"""The MLP-approximation chapter's claims (thesis ch. 7) judged on constructed values: a passing
verdict on values that follow the thesis, FAILS where its effect is reversed or absent."""

import pytest

from sglab.experiments.claims import Measured, Verdict, judge, per_seed
from sglab.experiments.moe.ffn_approx import FfnApprox
from sglab.experiments.moe.moe_lm import MoeLM
from sglab.experiments.moe.moe_variants import MoeVariants

DOCUMENT = "001_76659a6d281e669d.txt"
EXPERIMENTS = {e.name: e for e in (MoeLM(), MoeVariants(), FfnApprox())}


def seeds(*values):
    return per_seed(values)


# Tab. 7.3: the σ-MoE as good as its dense twin at 25% of the MLP FLOPs
MATCH = {"sigma-MoE": seeds(2.49, 2.50, 2.48), "dense": seeds(2.48, 2.49, 2.48),
         "relative gap": seeds(0.004, 0.004, 0.0), "MLP FLOPs fraction": 128 / 516}
FLOP_MATCHED = {"sigma-MoE": seeds(2.49, 2.50, 2.48),
                "FLOP-matched dense": seeds(2.56, 2.57, 2.55)}
USAGE = {"dead experts": [0, 0, 0, 0, 0, 0, 0, 0],
         "usage entropy": [0.98, 0.96, 0.92, 0.95, 0.97, 0.94, 0.93, 0.96]}

# Tab. 7.4 / F.4 in bits per byte: the σ-MoE ahead of every variant, the dense twin of the
# 4x-experts model ahead of it; Fig. 7.3: Switch and softmax after top-K collapse at 4x
VARIANTS = {
    "dense": seeds(2.42, 2.41, 2.42), "sigma-MoE": seeds(2.40, 2.41, 2.40),
    "softmax (after top-k)": seeds(2.45, 2.44, 2.46),
    "softmax (before top-k)": seeds(2.47, 2.47, 2.46), "standard init": seeds(2.43, 2.42, 2.43),
    "no reg": seeds(2.44, 2.43, 2.43), "K=1": seeds(2.48, 2.49, 2.47),
    "Switch (K=1)": seeds(2.47, 2.46, 2.48), "S-BASE (K=1)": seeds(2.52, 2.53, 2.52),
    "S-BASE (same K)": seeds(2.55, 2.56, 2.55), "sigma-MoE, 4x experts": seeds(2.30, 2.31, 2.30),
    "dense twin of 4x experts": seeds(2.25, 2.26, 2.25),
    "Switch, 4x experts": seeds(2.40, 2.41, 2.41),
    "softmax (after top-k), 4x experts": seeds(2.38, 2.37, 2.38),
    "relative gap": seeds(-0.008, 0.0, -0.008),
    "relative gap, 4x experts": seeds(0.022, 0.022, 0.022),
}
ENTROPY = {"sigma-MoE, 4x experts": seeds(0.93, 0.92, 0.94),
           "Switch, 4x experts": seeds(0.70, 0.72, 0.69),
           "softmax (after top-k), 4x experts": seeds(0.75, 0.74, 0.78)}

# Tabs. 7.1, 7.2, F.1 in bits per byte; Fig. 7.1: a few percent of the units active
APPROX = {
    "dense": seeds(2.40, 2.41, 2.40), "Top-K (K=d_ff/16)": seeds(2.39, 2.40, 2.39),
    "Top-K (K=d_ff/8)": seeds(2.40, 2.40, 2.41), "Top-K (K=d_ff/4)": seeds(2.39, 2.41, 2.40),
    "relative gap (K=d_ff/8)": seeds(0.0, -0.004, 0.004),
    "relative gap (K=d_ff/4)": seeds(-0.004, 0.0, 0.0),
    "PKM ReLU (value count)": seeds(2.46, 2.47, 2.46),
    "PKM softmax (value count)": seeds(2.64, 2.63, 2.65),
    "PKM ReLU (param-matched)": seeds(2.45, 2.45, 2.44),
}
ACTIVE = {"active fraction": [0.05, 0.08, 0.04, 0.07, 0.06, 0.09],
          "mean active fraction": seeds(0.065, 0.055, 0.075)}


def worse(values, name, by=0.1):
    """``values`` with ``name`` raised by ``by`` on every seed."""
    return {**values, name: seeds(*(v + by for v in values[name]))}


CASES = [
    # experiment, claim, values following the thesis, verdict, values without its effect
    ("moe-lm", "sigma-moe-matches-dense", MATCH, Verdict.REPRODUCES,
     {**MATCH, "relative gap": seeds(0.05, 0.04, 0.06)}),
    # the 262M model's 12.5% of the FLOPs: the effect holds, the number is not Tab. 7.3's 25%
    ("moe-lm", "sigma-moe-matches-dense", {**MATCH, "MLP FLOPs fraction": 0.125},
     Verdict.QUALITATIVE, {**MATCH, "MLP FLOPs fraction": 1.0}),
    ("moe-lm", "sigma-moe-beats-flop-matched-dense", FLOP_MATCHED, Verdict.REPRODUCES,
     {"sigma-MoE": FLOP_MATCHED["FLOP-matched dense"],
      "FLOP-matched dense": FLOP_MATCHED["sigma-MoE"]}),
    ("moe-lm", "sigma-moe-uses-all-experts", USAGE, Verdict.REPRODUCES,
     {**USAGE, "dead experts": [0, 0, 3, 0, 0, 0, 0, 0]}),
    ("moe-lm", "sigma-moe-uses-all-experts", USAGE, Verdict.REPRODUCES,
     {**USAGE, "usage entropy": [0.98, 0.96, 0.92, 0.95, 0.97, 0.5, 0.93, 0.96]}),
    ("moe-variants", "sigma-moe-beats-switch-and-s-base-k1", VARIANTS, Verdict.REPRODUCES,
     worse(VARIANTS, "sigma-MoE")),
    ("moe-variants", "sigma-moe-beats-switch-and-s-base-k1", VARIANTS, Verdict.REPRODUCES,
     worse(VARIANTS, "sigma-MoE, 4x experts", 0.2)),
    ("moe-variants", "sigma-moe-beats-s-base-same-k", VARIANTS, Verdict.REPRODUCES,
     worse(VARIANTS, "sigma-MoE", 0.2)),
    ("moe-variants", "switch-and-softmax-after-collapse", ENTROPY, Verdict.REPRODUCES,
     {**ENTROPY, "Switch, 4x experts": seeds(0.97, 0.96, 0.97)}),
    ("moe-variants", "switch-and-softmax-after-collapse", ENTROPY, Verdict.REPRODUCES,
     {**ENTROPY, "sigma-MoE, 4x experts": seeds(0.6, 0.6, 0.6)}),
    ("moe-variants", "softmax-after-top-k-worse", VARIANTS, Verdict.REPRODUCES,
     worse(VARIANTS, "sigma-MoE")),
    ("moe-variants", "softmax-after-top-k-worse", VARIANTS, Verdict.REPRODUCES,
     worse(VARIANTS, "sigma-MoE, 4x experts", 0.2)),
    ("moe-variants", "softmax-before-top-k-worse", VARIANTS, Verdict.REPRODUCES,
     worse(VARIANTS, "sigma-MoE")),
    ("moe-variants", "standard-init-worse", VARIANTS, Verdict.REPRODUCES,
     worse(VARIANTS, "sigma-MoE")),
    ("moe-variants", "no-reg-worse", VARIANTS, Verdict.REPRODUCES,
     worse(VARIANTS, "sigma-MoE")),
    ("moe-variants", "fewer-active-experts-hurt", VARIANTS, Verdict.REPRODUCES,
     worse(VARIANTS, "sigma-MoE")),
    ("moe-variants", "more-experts-behind-dense-twin", VARIANTS, Verdict.REPRODUCES,
     worse(VARIANTS, "dense twin of 4x experts")),
    ("moe-variants", "more-experts-widen-gap-to-dense", VARIANTS, Verdict.REPRODUCES,
     {**VARIANTS, "relative gap": seeds(0.03, 0.03, 0.03)}),
    ("ffn-approx", "topk-moderate-k-matches-dense", APPROX, Verdict.REPRODUCES,
     {**APPROX, "relative gap (K=d_ff/8)": seeds(0.02, 0.03, 0.02)}),
    ("ffn-approx", "topk-moderate-k-matches-dense", APPROX, Verdict.REPRODUCES,
     {**APPROX, "relative gap (K=d_ff/4)": seeds(0.015, 0.02, 0.02)}),
    ("ffn-approx", "topk-improves-dense", APPROX, Verdict.REPRODUCES,
     worse(APPROX, "Top-K (K=d_ff/16)", 0.05)),
    ("ffn-approx", "pkm-relu-beats-softmax-and-trails-dense", APPROX, Verdict.REPRODUCES,
     worse(APPROX, "PKM ReLU (value count)", 0.3)),
    ("ffn-approx", "pkm-relu-beats-softmax-and-trails-dense", APPROX, Verdict.REPRODUCES,
     worse(APPROX, "dense", 0.1)),
    ("ffn-approx", "pkm-param-matched-beats-value-count", APPROX, Verdict.REPRODUCES,
     worse(APPROX, "PKM ReLU (param-matched)", 0.05)),
    ("ffn-approx", "most-mlp-units-inactive", ACTIVE, Verdict.REPRODUCES,
     {**ACTIVE, "active fraction": [0.45, 0.46, 0.44, 0.47, 0.45, 0.46]}),
    # fewer active units than the thesis's 1%: the effect holds, the number is outside 1-10%
    ("ffn-approx", "most-mlp-units-inactive",
     {"active fraction": [0.004, 0.005, 0.003, 0.006, 0.004, 0.005],
      "mean active fraction": seeds(0.0045, 0.0045, 0.0045)}, Verdict.QUALITATIVE,
     {**ACTIVE, "active fraction": [0.05, 0.08, 0.04, 0.07, 0.06, 0.12]}),
]


@pytest.mark.parametrize("name, claim_id, passing, verdict, failing", CASES,
                         ids=[f"{c[0]}:{c[1]}:{i}" for i, c in enumerate(CASES)])
def test_claim_passes_on_the_thesis_and_fails_without_its_effect(name, claim_id, passing,
                                                                  verdict, failing):
    spec = EXPERIMENTS[name].spec.claims[claim_id]
    assert spec.source.document == DOCUMENT
    assert judge(claim_id, spec, Measured(passing)).verdict == verdict
    assert judge(claim_id, spec, Measured(failing)).verdict == Verdict.FAILS


def test_every_claim_of_the_chapter_has_a_case():
    for name, experiment in EXPERIMENTS.items():
        covered = {claim for e, claim, *_ in CASES if e == name}
        assert covered == set(experiment.spec.claims), name


def test_proxy_metrics_carry_no_reference_and_say_why():
    """Bits per byte on the King James Bible do not compare with the thesis's bpc / perplexity:
    only the FLOPs fraction and the share of active units are referenced, every claim has a
    note, and each statement quotes the thesis's numbers (but the FLOP-matched baseline, which
    the thesis does not run)."""
    referenced = {}
    for experiment in EXPERIMENTS.values():
        for claim_id, spec in experiment.spec.claims.items():
            assert spec.note, claim_id
            numbers = any(ch.isdigit() for ch in spec.statement)
            assert numbers == (claim_id != "sigma-moe-beats-flop-matched-dense"), claim_id
            referenced.update({(claim_id, n): (r.mean, r.allowed())
                               for n, r in spec.references.items()})
    assert referenced == {
        ("sigma-moe-matches-dense", "MLP FLOPs fraction"): (0.25, 0.05),
        ("most-mlp-units-inactive", "mean active fraction"): (0.055, pytest.approx(0.045))}
    lm = EXPERIMENTS["moe-lm"].spec.claims["sigma-moe-matches-dense"]
    assert "1.08 vs 1.08" in lm.statement and "11.71 vs 11.81" in lm.statement
    variants = EXPERIMENTS["moe-variants"].spec.claims
    assert "10.37 vs 10.03" in variants["more-experts-behind-dense-twin"].statement
    assert "1-10%" in EXPERIMENTS["ffn-approx"].spec.claims["most-mlp-units-inactive"].statement


def test_default_presets_run_three_seeds():
    for experiment in EXPERIMENTS.values():
        assert experiment.preset("default")["seeds"] == [0, 1, 2]
