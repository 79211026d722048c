"""The claims of masks-add-mul, masks-double-add and masks-sharing (thesis Ch. 3, App. B.3),
judged on constructed measurements: values that follow the thesis pass, values where the
effect is reversed or absent fail."""

import copy

import pytest
import torch

from sglab.experiments.claims import Measured, NotMeasured, Verdict, judge
from sglab.experiments.masks.weight_masks import guarded
from sglab.registry import experiment

PASSING = {Verdict.REPRODUCES, Verdict.QUALITATIVE}
LAYERS = ["l0", "l1", "l2", "l3"]  # l0 and l3: the first and last (I/O) weight layers

# Table B.1 (FNN, LSTM) and Tables 3.1 / B.2 (FNN, LSTM, LSTM forced), as fractions:
# tested group -> mask -> accuracy. "(hidden)": Table B.2's hidden-only inversion.
ADD_MUL = {
    "FNN": {"op=add": {"full": 1.0, "add": 1.0, "not add": 0.13, "mul": 0.01, "not mul": 0.20},
            "op=mul": {"full": 1.0, "add": 0.0, "not add": 0.69, "mul": 1.0, "not mul": 0.17}},
    "LSTM": {"op=add": {"full": 1.0, "add": 1.0, "not add": 0.02, "mul": 0.02, "not mul": 0.01},
             "op=mul": {"full": 1.0, "add": 0.03, "not add": 0.06, "mul": 1.0, "not mul": 0.02}},
}
DOUBLE_ADD = {
    "FNN": {"pair=1": {"full": 1.0, "pair1": 1.0, "not pair1": 0.20, "pair2": 0.01,
                       "not pair2": 0.92, "not pair1 (hidden)": 0.07, "not pair2 (hidden)": 0.63},
            "pair=2": {"full": 1.0, "pair1": 0.01, "not pair1": 0.94, "pair2": 1.0,
                       "not pair2": 0.21, "not pair1 (hidden)": 0.62, "not pair2 (hidden)": 0.08}},
    "LSTM": {"pair=1": {"full": 1.0, "pair1": 1.0, "not pair1": 0.02, "pair2": 0.01,
                        "not pair2": 0.99, "not pair1 (hidden)": 0.16, "not pair2 (hidden)": 0.99},
             "pair=2": {"full": 1.0, "pair1": 0.01, "not pair1": 1.0, "pair2": 1.0,
                        "not pair2": 0.02, "not pair1 (hidden)": 0.97, "not pair2 (hidden)": 0.16}},
    "LSTM forced": {
        "pair=1": {"full": 1.0, "pair1": 1.0, "not pair1": 0.04, "pair2": 0.01, "not pair2": 0.99,
                   "not pair1 (hidden)": 0.25, "not pair2 (hidden)": 0.76},
        "pair=2": {"full": 1.0, "pair1": 0.01, "not pair1": 0.96, "pair2": 1.0, "not pair2": 0.03,
                   "not pair1 (hidden)": 0.94, "not pair2 (hidden)": 0.42}},
}
# Fig. 3.2: under each mask, the share of the other op's examples answered with the sum, the
# product or neither (rows: add inputs, mul inputs): the FNN performs the mask's operation,
# the LSTM mostly neither
CONFUSION = {
    "FNN": {"add": [[1.0, 0.0, 0.0], [0.9, 0.0, 0.1]], "mul": [[0.01, 0.9, 0.09], [0.0, 1.0, 0.0]]},
    "LSTM": {"add": [[1.0, 0.0, 0.0], [0.1, 0.03, 0.87]],
             "mul": [[0.02, 0.1, 0.88], [0.0, 1.0, 0.0]]},
}


def seed(table, subsets, io, hidden, kept=None, confusion=None) -> dict:
    """One seed's measures: accuracy per mask and group from ``table`` (1.0 for the masks it
    leaves out: the unmasked net, the half masks), the subtask masks sharing ``io`` of their
    weights in the first and last layer and ``hidden`` in the others."""
    groups = list(table)
    masks = ["none", "full", "full, first half", "full, second half",
             *(m for n in subsets for m in (n, f"not {n}", f"not {n} (hidden)"))]
    accuracy = {m: {g: table[g].get(m, 1.0) for g in groups} for m in masks}
    layer_sharing = {layer: io if layer in ("l0", "l3") else hidden for layer in LAYERS}
    out = {"accuracy": accuracy, "layers": LAYERS,
           "sharing": {n: dict(layer_sharing) for n in subsets},
           "kept": kept or {"full": 500, **{n: 100 for n in subsets}}}
    if confusion:
        out["confusion"] = {m: torch.tensor(rows) for m, rows in confusion.items()}
    return out


def add_mul_values(variant, change=None, seeds=3) -> dict[str, Measured]:
    """The values of ``variant``'s add/mul claims on ``seeds`` seeds that follow the thesis
    (Table B.1, Figs 3.1, 3.2, B.6: mul keeps 3.8 times the weights of add), each changed by
    ``change(seed measures, position)``."""
    exp = experiment("masks-add-mul")
    measured = []
    for position in range(seeds):
        one = seed(ADD_MUL[variant], ["add", "mul"], io=0.9, hidden=0.4,
                   kept={"full": 500, "add": 100, "mul": 380}, confusion=CONFUSION[variant])
        if change:
            change(one, position)
        measured.append(one)
    return exp.claim_values(variant, measured)


def double_add_values(variant, change=None, seeds=3) -> dict[str, Measured]:
    """The values of ``variant``'s double-addition claims following Tables 3.1/B.2 and Figs
    3.3/B.2 (no sharing in the first and last layers; the edited FNN shares its hidden
    weights almost entirely, the unedited one little), each seed changed by ``change``."""
    exp = experiment("masks-double-add")

    def seeds_of(name, hidden):
        out = []
        for position in range(seeds):
            one = seed(DOUBLE_ADD["FNN" if name == "FNN sanity" else name], ["pair1", "pair2"],
                       io=0.0, hidden=hidden)
            if change and name == variant:
                change(one, position)
            out.append(one)
        return out

    if variant in exp.edited:
        return exp.edited_values(variant, seeds_of(variant, 0.97), seeds_of("FNN", 0.3))
    return exp.claim_values(variant, seeds_of(variant, 0.3))


def set_accuracy(mask, group, value):
    def change(one, position):
        one["accuracy"][mask][group] = value
    return change


def set_sharing(io=None, hidden=None):
    def change(one, position):
        for shares in one["sharing"].values():
            for layer in shares:
                value = io if layer in ("l0", "l3") else hidden
                if value is not None:
                    shares[layer] = value
    return change


def set_kept(add, mul):
    def change(one, position):
        one["kept"].update(add=add, mul=mul)
    return change


def set_confusion(mask, row, values):
    def change(one, position):
        one["confusion"][mask][row] = torch.tensor(values)
    return change


def on_one_seed(change):
    """``change`` applied to the last seed only."""
    def changed(one, position):
        if position == 2:
            change(one, position)
    return changed


# claim -> (a change that breaks the effect the thesis states)
ADD_MUL_BROKEN = {
    "full-mask-keeps-accuracy": set_accuracy("full", "op=mul", 0.5),
    "mask-specializes": set_accuracy("add", "op=mul", 0.9),  # the add mask multiplies too
    "inverted-mask-fails-own": set_accuracy("not add", "op=add", 0.9),
    # removing the add mask's weights leaves multiplication as it was: fully separated
    "inverted-masks-limited-separation": set_accuracy("not add", "op=mul", 1.0),
    "io-shared-more-than-hidden": set_sharing(io=0.2, hidden=0.5),
    "mul-uses-more-weights": set_kept(add=380, mul=100),
    "add-mask-adds-mul-inputs": set_confusion("add", 1, [0.05, 0.0, 0.95]),
    "mul-mask-multiplies-add-inputs": set_confusion("mul", 0, [0.01, 0.05, 0.94]),
    "add-mask-answers-none": set_confusion("add", 1, [0.9, 0.0, 0.1]),
    "mul-mask-answers-none": set_confusion("mul", 0, [0.01, 0.9, 0.09]),
}
DOUBLE_ADD_BROKEN = {
    "full-mask-keeps-accuracy": set_accuracy("full", "pair=2", 0.5),
    "mask-specializes": set_accuracy("pair1", "pair=2", 0.9),
    "inverted-mask-fails-own": set_accuracy("not pair2", "pair=2", 0.8),
    "inverted-mask-keeps-other-pair": set_accuracy("not pair1", "pair=2", 0.3),
    # the hidden-only inverted pair 1 mask works as well on pair 1 as on pair 2
    "hidden-inversion-separates-pairs": set_accuracy("not pair1 (hidden)", "pair=1", 0.9),
    "no-io-sharing": set_sharing(io=0.3),
    "sanity-sharing-near-total": set_sharing(hidden=0.3),  # no more than the unedited net
}


def claim_ids(name):
    return list(experiment(name).spec.claims)


def split(claim_id):
    name, _, variant = claim_id.partition("[")
    return name, variant[:-1]


@pytest.mark.parametrize("claim_id", claim_ids("masks-add-mul"))
def test_add_mul_claims_follow_table_b1_and_figs_3_1_3_2(claim_id):
    spec = experiment("masks-add-mul").spec.claims[claim_id]
    name, variant = split(claim_id)
    good = judge(claim_id, spec, add_mul_values(variant)[name])
    assert good.verdict is Verdict.REPRODUCES, good.evidence
    bad = judge(claim_id, spec, add_mul_values(variant, ADD_MUL_BROKEN[name])[name])
    assert bad.verdict is Verdict.FAILS, bad.evidence


@pytest.mark.parametrize("claim_id", claim_ids("masks-double-add"))
def test_double_add_claims_follow_tables_3_1_b2_and_figs_3_3_b2(claim_id):
    spec = experiment("masks-double-add").spec.claims[claim_id]
    name, variant = split(claim_id)
    good = judge(claim_id, spec, double_add_values(variant)[name])
    assert good.verdict is Verdict.REPRODUCES, good.evidence
    bad = judge(claim_id, spec, double_add_values(variant, DOUBLE_ADD_BROKEN[name])[name])
    assert bad.verdict is Verdict.FAILS, bad.evidence


def test_claims_with_every_seed_fail_on_one_failing_seed():
    spec = experiment("masks-add-mul").spec.claims["mask-specializes[FNN]"]
    assert spec.every_seed
    values = add_mul_values("FNN", on_one_seed(set_accuracy("add", "op=mul", 0.25)))
    claim = judge("mask-specializes[FNN]", spec, values["mask-specializes"])
    # the mean (0.083) stays under 0.1, the third seed does not
    assert claim.verdict is Verdict.FAILS and "seed position(s) [2]" in claim.evidence
    spec = experiment("masks-add-mul").spec.claims["inverted-mask-fails-own[FNN]"]
    assert not spec.every_seed  # Table B.1: 13 ± 5.5% and 17 ± 5.8%
    values = add_mul_values("FNN", on_one_seed(set_accuracy("not add", "op=add", 0.35)))
    assert judge("inverted-mask-fails-own[FNN]", spec,
                 values["inverted-mask-fails-own"]).verdict in PASSING


def test_numbers_off_the_thesis_are_qualitative():
    # mul keeps twice the weights of add: more, as stated, but not 3.8 times
    spec = experiment("masks-add-mul").spec.claims["mul-uses-more-weights[FNN]"]
    values = add_mul_values("FNN", set_kept(add=100, mul=200))["mul-uses-more-weights"]
    assert judge("mul-uses-more-weights[FNN]", spec, values).verdict is Verdict.QUALITATIVE
    # the hidden-only inverted pair masks keep their own pair at 30% (the thesis: 7-8%)
    spec = experiment("masks-double-add").spec.claims["hidden-inversion-separates-pairs[FNN]"]
    change = set_accuracy("not pair1 (hidden)", "pair=1", 0.3)
    values = double_add_values("FNN", change)["hidden-inversion-separates-pairs"]
    assert judge("hidden-inversion-separates-pairs[FNN]", spec,
                 values).verdict is Verdict.QUALITATIVE


def test_claims_wait_for_nets_that_learned_the_task():
    exp = experiment("masks-double-add")
    weak = [seed({g: dict(t, full=0.5) for g, t in DOUBLE_ADD["FNN"].items()},
                 ["pair1", "pair2"], io=0.0, hidden=0.3) for _ in range(3)]
    for one in weak:
        one["accuracy"]["none"]["pair=2"] = 0.5
    good = [seed(DOUBLE_ADD["FNN"], ["pair1", "pair2"], io=0.0, hidden=0.9) for _ in range(3)]
    # an edited variant waits for the nets it edits too
    for measured, variant in (({"FNN": weak}, "FNN"),
                              ({"FNN": weak, "FNN sanity": good}, "FNN sanity")):
        values = exp.checked_values(variant, measured)
        assert values and all(isinstance(v, NotMeasured) for v in values.values())
        assert all("reach only 0.500 exact match" in v.reason for v in values.values())
    measured = exp.checked_values("FNN", {"FNN": copy.deepcopy(good)})
    assert all(isinstance(v, Measured) for v in measured.values())
    assert guarded({"a": Measured({})}, 0.95, "x") == {"a": Measured({})}


# ----------------------------------------------------------------------------- masks-sharing
B = ["0.0001", "0.0003", "0.001"]
SIZES = ["200-200-100", "400-400-200", "800-800-400"]


def sharing_values(valid=None, share=None) -> dict[str, Measured]:
    """B.3.3/Figs B.4-B.5: every size valid at the two smaller betas (the larger chosen), the
    add mask's sharing moving little with beta and falling with size."""
    exp = experiment("masks-sharing")
    valid = valid or {s: B[:2] for s in SIZES}
    share = share or {s: dict(zip(B, [x + 0.02, x, x - 0.2])) for s, x in zip(SIZES, (0.8, 0.6, 0.4))}
    return exp.claims(exp.preset("default"), valid, share)


SHARING_BROKEN = {
    # the chosen betas two grid steps apart
    "beta-transfers-across-sizes": {"valid": {SIZES[0]: B[:1], SIZES[1]: B, SIZES[2]: B[:1]}},
    # only the chosen beta keeps the full-task mask valid
    "accuracy-insensitive-to-beta": {"valid": {s: [B[1]] for s in SIZES}},
    # the add mask's sharing drops by 0.3 from one valid beta to the next
    "sharing-insensitive-to-beta": {"share": {s: dict(zip(B, [x + 0.3, x, x])) for s, x in
                                              zip(SIZES, (0.6, 0.5, 0.4))}},
    # sharing rising with size
    "sharing-falls-with-size": {"share": {s: dict(zip(B, [x, x, x])) for s, x in
                                          zip(SIZES, (0.4, 0.6, 0.8))}},
}


@pytest.mark.parametrize("claim_id", claim_ids("masks-sharing"))
def test_sharing_claims_follow_figs_b4_b5(claim_id):
    spec = experiment("masks-sharing").spec.claims[claim_id]
    good = judge(claim_id, spec, sharing_values()[claim_id])
    assert good.verdict is Verdict.REPRODUCES, good.evidence
    bad = judge(claim_id, spec, sharing_values(**SHARING_BROKEN[claim_id])[claim_id])
    assert bad.verdict is Verdict.FAILS, bad.evidence


def test_sharing_claims_are_guarded_by_the_nets_they_compare_only():
    """A size with no valid beta is left out of the claims (B.3.3 cannot mask it), so its
    underfitting net does not block them; a weak net of a compared size does."""
    exp = experiment("masks-sharing")

    def cells(add, mul):
        return {b: [{"none": {"add": add, "mul": mul}}] for b in B}

    measured = {SIZES[0]: cells(0.99, 0.85), SIZES[1]: cells(1.0, 0.97), SIZES[2]: cells(1.0, 0.99)}
    valid = {SIZES[0]: [], SIZES[1]: B[:2], SIZES[2]: B[:2]}
    assert exp.weakest_net(measured, valid) == 0.97
    values = guarded(sharing_values(), exp.weakest_net(measured, valid), "x")
    assert all(isinstance(v, Measured) for v in values.values())
    # the same weak net in a compared size blocks every claim
    valid[SIZES[0]] = B[:1]
    assert exp.weakest_net(measured, valid) == 0.85
    values = guarded(sharing_values(), exp.weakest_net(measured, valid), "x")
    assert all(isinstance(v, NotMeasured) for v in values.values())
    # with no size maskable, every net counts (the reason names the weakest)
    assert exp.weakest_net(measured, {s: [] for s in SIZES}) == 0.85
