"""The CTL++ claims (thesis Ch. 6, App. E) judged on constructed values: values that follow
the thesis pass, values where its effect is reversed or absent fail."""

import pytest

from sglab.experiments.claims import Measured, PerSeed, Verdict, judge
from sglab.experiments.ctlpp.ctlpp import CTLPP
from sglab.experiments.ctlpp.ctlpp_staged import CTLPPStaged

SPECS = {"ctlpp": CTLPP().spec.claims, "ctlpp-staged": CTLPPStaged().spec.claims}
A_SHARE, R_SHARE = "NDR 'A' share of seeds above 0.95", "NDR 'R' share of seeds above 0.95"
T_SHARE = "Transformer 'R' share of seeds above 0.95"
ARI, GAP = "largest ARI over symbols", "largest group-specific gap"
CELL, OTHER = "NDR 16 functions, 6 symbols", "NDR best other cell"


def seeds(*values):
    return PerSeed(values)


def fitted(**changes):
    values = {name: seeds(1.0, 1.0, 1.0) for name in ("NDR A", "NDR R", "Bi-LSTM A", "Bi-LSTM R")}
    return {**values, **changes}


CASES = [
    # Table 6.1: IID 1.00 ± 0.00 for every model and split
    ("ctlpp", "iid-solved", fitted(), Verdict.REPRODUCES),
    ("ctlpp", "iid-solved", fitted(**{"NDR R": seeds(1.0, 1.0, 0.5)}), Verdict.FAILS),
    ("ctlpp", "iid-solved", fitted(**{"Bi-LSTM A": seeds(0.99, 0.99, 0.9)}), Verdict.FAILS),
    # "only the bi-LSTM solves these tasks consistently across seeds": 0.95 ± 0.03 / 1.00
    ("ctlpp", "bilstm-generalizes", {"Bi-LSTM A": seeds(0.95, 0.93, 0.97),
                                     "Bi-LSTM R": seeds(1.0, 1.0, 1.0)}, Verdict.REPRODUCES),
    ("ctlpp", "bilstm-generalizes", {"Bi-LSTM A": seeds(0.99, 0.5, 0.99),
                                     "Bi-LSTM R": seeds(1.0, 1.0, 1.0)}, Verdict.FAILS),
    ("ctlpp", "bilstm-generalizes", {"Bi-LSTM A": seeds(0.3, 0.4, 0.2),
                                     "Bi-LSTM R": seeds(0.5, 0.6, 0.7)}, Verdict.FAILS),
    # 0% of the NDR's seeds above 95% on 'A', 32% on 'R'
    ("ctlpp", "ndr-fails-often", {A_SHARE: seeds(False, False, False),
                                  R_SHARE: seeds(True, False, False)}, Verdict.REPRODUCES),
    ("ctlpp", "ndr-fails-often", {A_SHARE: seeds(True, True, False),
                                  R_SHARE: seeds(True, True, True)}, Verdict.FAILS),
    ("ctlpp", "ndr-fails-often", {A_SHARE: seeds(False, False, False),
                                  R_SHARE: seeds(True, True, True)}, Verdict.FAILS),
    # 'A' much harder than 'R': NDR 0.34 ± 0.26 vs 0.75 ± 0.27
    ("ctlpp", "a-harder-than-r", {"NDR A": seeds(0.3, 0.5, 0.2),
                                  "NDR R": seeds(0.99, 0.6, 0.7)}, Verdict.REPRODUCES),
    ("ctlpp", "a-harder-than-r", {"NDR A": seeds(0.9, 0.9, 0.9),
                                  "NDR R": seeds(1.0, 1.0, 1.0)}, Verdict.QUALITATIVE),
    ("ctlpp", "a-harder-than-r", {"NDR A": seeds(0.955, 0.96, 0.96),
                                  "NDR R": seeds(0.963, 0.963, 0.963)}, Verdict.FAILS),
    ("ctlpp", "a-harder-than-r", {"NDR A": seeds(0.8, 0.7, 0.75),
                                  "NDR R": seeds(0.3, 0.4, 0.35)}, Verdict.FAILS),
    # the Transformer: 0.21 ± 0.09 / 0.75 ± 0.25, 20% of its seeds above 95% on 'R'
    ("ctlpp", "transformer-fails-ood", {"Transformer A": 0.21, "Transformer R": 0.75,
                                        T_SHARE: 0.2}, Verdict.REPRODUCES),
    ("ctlpp", "transformer-fails-ood", {"Transformer A": 0.72, "Transformer R": 0.75,
                                        T_SHARE: 0.2}, Verdict.FAILS),
    ("ctlpp", "transformer-fails-ood", {"Transformer A": 0.21, "Transformer R": 0.99,
                                        T_SHARE: 0.9}, Verdict.FAILS),
    # successful seeds: one shared representation per symbol (no group clusters)
    ("ctlpp", "successful-seeds-share-representations", {ARI: [0.0, 0.1]}, Verdict.REPRODUCES),
    ("ctlpp", "successful-seeds-share-representations", {ARI: [0.0, 1.0]}, Verdict.FAILS),
    # failed seeds: a symbol's clusters follow the groups (Fig. 6.3a: perfect clustering)
    ("ctlpp", "failed-seeds-cluster-by-group", {ARI: [1.0, 0.74]}, Verdict.REPRODUCES),
    ("ctlpp", "failed-seeds-cluster-by-group", {ARI: [1.0, 0.1]}, Verdict.FAILS),
    ("ctlpp", "failed-seeds-cluster-by-group", {ARI: [0.0, 0.0]}, Verdict.FAILS),
    # Fig. E.2a: C_1 compatible only with G_a
    ("ctlpp", "clusters-group-specific", {GAP: [1.0, 0.6]}, Verdict.REPRODUCES),
    ("ctlpp", "clusters-group-specific", {GAP: [0.0, 0.1]}, Verdict.FAILS),
    ("ctlpp", "clusters-group-specific", {GAP: [-1.0]}, Verdict.FAILS),
    # Fig. 6.4: 100% only at 16 shared functions and 6 shared symbols
    ("ctlpp-staged", "staged-needs-overlap", {CELL: seeds(1.0, 1.0, 1.0), OTHER: 0.8},
     Verdict.REPRODUCES),
    ("ctlpp-staged", "staged-needs-overlap", {CELL: seeds(1.0, 1.0, 1.0), OTHER: 0.99},
     Verdict.FAILS),
    ("ctlpp-staged", "staged-needs-overlap", {CELL: seeds(1.0, 0.6, 1.0), OTHER: 0.5},
     Verdict.FAILS),
    ("ctlpp-staged", "staged-needs-overlap", {CELL: seeds(0.5, 0.6, 0.5), OTHER: 0.8},
     Verdict.FAILS),
    # Figs. E.3, E.4: fewer shared functions (symbols), worse
    *[("ctlpp-staged", f"{model.lower().replace('-', '')}-needs-overlap", values, verdict)
      for model in ("Bi-LSTM", "Transformer")
      for values, verdict in (
          ({f"{model} rise over shared functions": seeds(0.3, 0.2),
            f"{model} rise over shared symbols": seeds(0.1, 0.2)}, Verdict.REPRODUCES),
          ({f"{model} rise over shared functions": seeds(0.0, 0.0),
            f"{model} rise over shared symbols": seeds(0.1, 0.2)}, Verdict.FAILS),
          ({f"{model} rise over shared functions": seeds(0.3, 0.2),
            f"{model} rise over shared symbols": seeds(-0.1, -0.2)}, Verdict.FAILS))],
    # Fig. E.4: with 16 shared functions the Bi-LSTM significantly underperforms the NDR
    ("ctlpp-staged", "bilstm-below-ndr-at-16-functions",
     {"Bi-LSTM at 16 shared functions": seeds(0.5, 0.6),
      "NDR at 16 shared functions": seeds(0.9, 0.8)}, Verdict.REPRODUCES),
    ("ctlpp-staged", "bilstm-below-ndr-at-16-functions",
     {"Bi-LSTM at 16 shared functions": seeds(0.8, 0.78),
      "NDR at 16 shared functions": seeds(0.8, 0.8)}, Verdict.FAILS),
    ("ctlpp-staged", "bilstm-below-ndr-at-16-functions",
     {"Bi-LSTM at 16 shared functions": seeds(0.9, 0.9),
      "NDR at 16 shared functions": seeds(0.6, 0.7)}, Verdict.FAILS),
    # Fig. E.3: with 16 shared functions the Transformer outperforms the NDR
    ("ctlpp-staged", "transformer-above-ndr-at-16-functions",
     {"Transformer at 16 shared functions": seeds(0.95, 0.9),
      "NDR at 16 shared functions": seeds(0.8, 0.7)}, Verdict.REPRODUCES),
    ("ctlpp-staged", "transformer-above-ndr-at-16-functions",
     {"Transformer at 16 shared functions": seeds(0.8, 0.7),
      "NDR at 16 shared functions": seeds(0.8, 0.7)}, Verdict.FAILS),
    ("ctlpp-staged", "transformer-above-ndr-at-16-functions",
     {"Transformer at 16 shared functions": seeds(0.6, 0.7),
      "NDR at 16 shared functions": seeds(0.8, 0.9)}, Verdict.FAILS),
]


@pytest.mark.parametrize("experiment, claim_id, values, verdict", CASES,
                         ids=[f"{c[1]}-{c[3].name}-{i}" for i, c in enumerate(CASES)])
def test_claim_verdict_on_constructed_values(experiment, claim_id, values, verdict):
    claim = judge(claim_id, SPECS[experiment][claim_id], Measured(values))
    assert claim.verdict == verdict, claim.evidence
    assert claim.source.startswith("001_76659a6d281e669d.txt, ")


def test_every_claim_has_a_passing_and_a_failing_case():
    for experiment, specs in SPECS.items():
        for claim_id in specs:
            verdicts = {c[3] for c in CASES if c[:2] == (experiment, claim_id)}
            assert Verdict.FAILS in verdicts, claim_id
            assert verdicts & {Verdict.REPRODUCES, Verdict.QUALITATIVE}, claim_id


def test_the_thesis_numbers_are_the_references():
    ctlpp = SPECS["ctlpp"]
    harder = ctlpp["a-harder-than-r"].references
    assert (harder["NDR A"].mean, harder["NDR A"].std) == (0.34, 0.26)
    assert (harder["NDR R"].mean, harder["NDR R"].std, harder["NDR R"].seeds) == (0.75, 0.27, 25)
    shares = ctlpp["ndr-fails-often"].references
    assert (shares[A_SHARE].mean, shares[R_SHARE].mean) == (0.0, 0.32)
    transformer = ctlpp["transformer-fails-ood"].references
    assert (transformer["Transformer A"].mean, transformer["Transformer A"].std) == (0.21, 0.09)
    assert (transformer["Transformer R"].mean, transformer[T_SHARE].mean) == (0.75, 0.2)
    bilstm = ctlpp["bilstm-generalizes"].references
    assert (bilstm["Bi-LSTM A"].mean, bilstm["Bi-LSTM A"].std) == (0.95, 0.03)
    assert ctlpp["iid-solved"].references["NDR R"].std == 0.01
    assert SPECS["ctlpp-staged"]["staged-needs-overlap"].references[CELL].mean == 1.0
