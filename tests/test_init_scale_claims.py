"""The init-scale chapter's claims (Zhang et al. 2024) judged on constructed values: a passing
verdict on values that follow the seed, FAILS where its effect is reversed or absent."""

import pytest

from sglab.experiments.claims import Measured, Verdict, judge
from sglab.experiments.init_scale.init_scale import InitScale

EXPERIMENT = InitScale()

# Fig. 2: at every depth the smallest init is inferential and a larger one symmetric
PHASE = {"depth": [2, 3], "inferential at the largest γ": [0.97, 0.91],
         "symmetric at the largest γ": [0.01, 0.04], "seen pairs at the largest γ": [0.99, 0.96],
         "symmetric cells at a smaller γ": ["0.3, 0.5", "0.5"],
         "a smaller γ symmetric": [True, True]}
CONDENSE = {"W_Q(1) fraction, inferential": 0.12, "W_Q(1) fraction, symmetric": 0.85}
BY_GAMMA = {"depth": [2, 3], "W_Q(1) fraction at the largest γ": [0.1, 0.2],
            "W_Q(1) fraction at the smallest γ": [0.88, 0.9]}
SPECTRUM = {"embedding effective rank, inferential": 4.2,
            "embedding effective rank, symmetric": 31.0}
TSNE = {"cos (3,4)-(4,3), inferential": 0.2, "cos (3,4)-(4,3), symmetric": 0.97,
        "cos (3,4)-(1,2), symmetric": 0.1}
FLOW = {"layer-1 anchors→key, inferential": 0.7, "layer-1 anchors→key, symmetric": 0.1,
        "layer-1 last→anchors, inferential": 0.2, "layer-1 last→anchors, symmetric": 0.9}

CASES = [
    # claim, values following the seed, values without its effect
    ("small-init-inferential-large-init-symmetric", PHASE,
     # depth 3 symmetric at the smallest init too (the effect absent at one depth)
     {**PHASE, "inferential at the largest γ": [0.97, 0.05],
      "symmetric at the largest γ": [0.01, 0.92]}),
    ("small-init-inferential-large-init-symmetric", PHASE,
     {**PHASE, "a smaller γ symmetric": [True, False]}),
    ("small-init-inferential-large-init-symmetric", PHASE,
     {**PHASE, "seen pairs at the largest γ": [0.99, 0.5]}),  # shaded: not a solution
    ("inferential-condenses", CONDENSE,
     {"W_Q(1) fraction, inferential": 0.85, "W_Q(1) fraction, symmetric": 0.12}),
    ("condensation-grows-with-gamma", BY_GAMMA,
     {**BY_GAMMA, "W_Q(1) fraction at the largest γ": [0.1, 0.95]}),
    ("inferential-embedding-low-rank", SPECTRUM,
     {"embedding effective rank, inferential": 31.0,
      "embedding effective rank, symmetric": 31.0}),
    ("symmetric-clusters-mirrored-pairs", TSNE, {**TSNE, "cos (3,4)-(4,3), symmetric": 0.15}),
    ("attention-information-flow", FLOW,
     {**FLOW, "layer-1 anchors→key, inferential": 0.05}),
]


@pytest.mark.parametrize("claim_id, follows, without", CASES)
def test_claim_passes_on_the_seed_and_fails_without_its_effect(claim_id, follows, without):
    spec = EXPERIMENT.spec.claims[claim_id]
    assert spec.source.document == "004_cc40e9fcbd7676e3.txt"
    assert judge(claim_id, spec, Measured(follows)).verdict == Verdict.REPRODUCES
    assert judge(claim_id, spec, Measured(without)).verdict == Verdict.FAILS


def test_every_claim_has_a_case():
    assert {case[0] for case in CASES} == set(EXPERIMENT.spec.claims)


def test_the_phase_claim_judges_every_depth_and_the_default_has_three():
    """One failing depth fails the claim; the default grid runs depths 2-4 up to the paper's
    largest gamma 0.8, 3 seeds."""
    params = EXPERIMENT.preset("default")
    assert params["depths"] == [2, 3, 4] and params["seeds"] == [0, 1, 2]
    assert max(params["gammas"]) == 0.8
    assert len(EXPERIMENT.arms(params)) == 3 * 4 * 3
