"""The breaking-symmetry claims (Zuo & Guerzhoy) judged on constructed values: values that
follow the paper pass, values where its effect is reversed or absent fail."""

import pytest

from sglab.experiments.claims import Measured, PerSeed, Verdict, judge
from sglab.experiments.symmetry.symmetry import Symmetry

CLAIMS = Symmetry().spec.claims


def convergence(fractions):
    names = ["no layer removed", "one removed", "two removed", "three removed"]
    return {"ablated layers": [0, 1, 2, 3], "converged fraction": list(fractions),
            **dict(zip(names, fractions))}


CASES = [
    ("nope-matches-learned-pe", {"learned PE": PerSeed([0.99, 1.0, 0.98]),
                                 "NoPE": PerSeed([0.99, 0.98, 1.0]),
                                 "gap": PerSeed([0.0, 0.02, -0.02])}, Verdict.REPRODUCES),
    ("nope-matches-learned-pe", {"learned PE": PerSeed([0.9, 0.9, 0.9]),
                                 "NoPE": PerSeed([0.88, 0.88, 0.88]),
                                 "gap": PerSeed([0.02, 0.02, 0.02])}, Verdict.QUALITATIVE),
    ("nope-matches-learned-pe", {"learned PE": PerSeed([0.99, 1.0, 0.98]),
                                 "NoPE": PerSeed([0.3, 0.2, 0.4]),
                                 "gap": PerSeed([0.69, 0.8, 0.58])}, Verdict.FAILS),
    ("bidirectional-nope-permutation-invariant",
     {"bidirectional NoPE": 1e-7, "causal NoPE": 0.2, "causal learned PE": 0.3},
     Verdict.REPRODUCES),
    ("bidirectional-nope-permutation-invariant",
     {"bidirectional NoPE": 0.1, "causal NoPE": 0.2, "causal learned PE": 0.3}, Verdict.FAILS),
    ("bidirectional-nope-cannot-learn",
     {"bidirectional NoPE": PerSeed([0.0, 0.01]), "order-blind ceiling": 0.071,
      "causal NoPE": PerSeed([0.99, 0.98])}, Verdict.REPRODUCES),
    ("bidirectional-nope-cannot-learn",
     {"bidirectional NoPE": PerSeed([0.9, 0.95]), "order-blind ceiling": 0.071,
      "causal NoPE": PerSeed([0.99, 0.98])}, Verdict.FAILS),
    ("residual-ablation-hurts-convergence", convergence([1.0, 1.0, 0.5, 0.0]),
     Verdict.REPRODUCES),
    # two removed never converges: the effect holds, "sometimes converges" does not
    ("residual-ablation-hurts-convergence", convergence([1.0, 1.0, 0.0, 0.0]),
     Verdict.QUALITATIVE),
    ("residual-ablation-hurts-convergence", convergence([0.5, 1.0, 1.0, 1.0]), Verdict.FAILS),
    ("correlations-off-diagonal", {"removed {}": 0.3, "removed {0}": 0.2,
                                   "removed {0, 1}": 0.6}, Verdict.REPRODUCES),
    ("correlations-off-diagonal", {"removed {}": 0.6, "removed {0}": 0.2,
                                   "removed {0, 1}": 0.3}, Verdict.FAILS),
]


@pytest.mark.parametrize("claim_id, values, verdict", CASES,
                         ids=[f"{c[0]}-{c[2].value}" for c in CASES])
def test_claim_verdicts(claim_id, values, verdict):
    assert judge(claim_id, CLAIMS[claim_id], Measured(values)).verdict is verdict


def test_every_claim_has_a_passing_and_a_failing_case():
    passing = {c for c, _, v in CASES if v is not Verdict.FAILS}
    failing = {c for c, _, v in CASES if v is Verdict.FAILS}
    assert passing == failing == set(CLAIMS)
