"""Claims judged against the seed's numbers: one verdict scale, the rule shown is the rule
that decides, and every verdict level reached on constructed values."""

import pytest
from pydantic import ValidationError

from sglab.experiments.claims import (
    AbsAtMost,
    AnyOf,
    ClaimSpec,
    Compare,
    IsTrue,
    Measured,
    NotMeasured,
    SlopeNegative,
    Verdict,
    judge,
    judge_all,
    parse_rule,
    per_seed,
    summary_line,
)

SOURCE = {"document": "001_76659a6d281e669d.txt", "where": "Table 5.1"}


def spec(**fields) -> ClaimSpec:
    return ClaimSpec.model_validate({"statement": "s", "source": SOURCE, **fields})


# ----------------------------------------------------------------------------- rule texts


@pytest.mark.parametrize("text, rule", [
    ("NDR forward ≥ 0.95", Compare("NDR forward", "≥", 0.95)),
    ("NDR forward >= 0.95", Compare("NDR forward", "≥", 0.95)),
    ("a < 1e-5", Compare("a", "<", 1e-5)),
    ("bidirectional NoPE ≤ order-blind ceiling + 0.02",
     Compare("bidirectional NoPE", "≤", "order-blind ceiling", 0.02)),
    ("x ≤ causal NoPE - 0.5", Compare("x", "≤", "causal NoPE", -0.5)),
    ("+ rel + gate backward < + abs/rel + gate backward",
     Compare("+ rel + gate backward", "<", "+ abs/rel + gate backward")),
    ("|gap| ≤ 0.05", AbsAtMost("gap", 0.05)),
    ("every column opens", IsTrue("every column opens")),
    ("slope(converged fraction over ablated layers) < 0",
     SlopeNegative("converged fraction", "ablated layers")),
    ("slope(loss) < 0", SlopeNegative("loss", None)),
    ("a ≥ 0.9 or b ≥ 0.9", AnyOf((Compare("a", "≥", 0.9), Compare("b", "≥", 0.9)))),
])
def test_rule_texts_parse_to_the_rule_they_name(text, rule):
    assert parse_rule(text) == rule


@pytest.mark.parametrize("text", ["a ≥ 0.1 ≥ b", "|gap| ≥ 0.05", "slope(x) > 0", "", "|x|"])
def test_malformed_rules_are_refused(text):
    with pytest.raises(ValueError):
        parse_rule(text)


def test_the_rule_shown_is_the_rule_that_decides():
    rule = parse_rule("NoPE ≥ 0.85")
    assert rule.describe() == "NoPE ≥ 0.85"
    assert rule.holds({"NoPE": 0.85}) and not rule.holds({"NoPE": 0.85 - 1e-9})
    margin = parse_rule("a ≤ b - 0.5")
    assert margin.describe() == "a ≤ b − 0.5"
    assert margin.holds({"a": 0.1, "b": 0.7}) and not margin.holds({"a": 0.1, "b": 0.59})


def test_slope_and_alternatives():
    falling = {"fraction": [1.0, 1.0, 0.5, 0.0], "layers": [0, 1, 2, 3]}
    assert parse_rule("slope(fraction over layers) < 0").holds(falling)
    assert not parse_rule("slope(fraction) < 0").holds({"fraction": [0.0, 1.0]})
    either = parse_rule("a ≥ 0.9 or b ≥ 0.9")
    assert either.holds({"a": 0.1, "b": 0.95}) and not either.holds({"a": 0.1, "b": 0.5})


# ----------------------------------------------------------------------------- verdicts


def test_reproduces_when_the_effect_holds_and_the_mean_is_within_tolerance():
    claim = judge("c", spec(references={"NDR": {"mean": 1.0, "std": 0.0, "seeds": 5}},
                            effect=["NDR ≥ 0.95"]),
                  Measured({"NDR": per_seed([0.99, 0.97, 1.0])}))
    assert claim.verdict is Verdict.REPRODUCES
    assert claim.values["NDR"]["seeds"] == [0.99, 0.97, 1.0]
    assert claim.references["NDR"]["within"] is True


def test_qualitative_when_the_effect_holds_but_the_numbers_are_off():
    claim = judge("c", spec(references={"NDR": {"mean": 0.98, "std": 0.01}},
                            effect=["NDR > BiLSTM"]),
                  Measured({"NDR": per_seed([0.80, 0.84]), "BiLSTM": per_seed([0.5, 0.6])}))
    assert claim.verdict is Verdict.QUALITATIVE
    assert "outside tolerance" in claim.evidence and "tolerance 0.05" in claim.evidence


def test_default_tolerance_is_twice_the_seeds_std_but_at_least_005():
    ref = {"mean": 0.75, "std": 0.10}
    within = judge("c", spec(references={"x": ref}, effect=["x ≥ 0"]),
                   Measured({"x": per_seed([0.56, 0.57])}))  # 0.185 off, allowed 0.2
    outside = judge("c", spec(references={"x": ref}, effect=["x ≥ 0"]),
                    Measured({"x": per_seed([0.54, 0.54])}))  # 0.21 off
    assert within.verdict is Verdict.REPRODUCES and outside.verdict is Verdict.QUALITATIVE
    small = judge("c", spec(references={"x": {"mean": 1.0, "std": 0.0}}, effect=["x ≥ 0"]),
                  Measured({"x": 0.94}))
    assert small.verdict is Verdict.QUALITATIVE  # 0.06 off, allowed max(0.05, 0) = 0.05


def test_a_reversed_effect_fails():
    claim = judge("c", spec(references={"NDR": {"mean": 0.98}}, effect=["NDR > BiLSTM"]),
                  Measured({"NDR": per_seed([0.54, 0.46]), "BiLSTM": per_seed([0.58, 0.90])}))
    assert claim.verdict is Verdict.FAILS
    assert "does not hold: NDR > BiLSTM" in claim.evidence


def test_an_absent_effect_fails_where_the_seeds_is_large():
    """Table 6.1: 'R' minus 'A' is 0.41 in the thesis; a difference of 0.00 is a failure."""
    claim = judge("c", spec(references={"R - A": {"mean": 0.41}}, effect=["R - A ≥ 0.1"]),
                  Measured({"R - A": per_seed([0.01, -0.01, 0.0])}))
    assert claim.verdict is Verdict.FAILS


def test_every_seed_fails_on_one_failing_seed_even_with_a_good_mean():
    claim = spec(references={"NDR backward": {"mean": 1.0, "std": 0.0, "seeds": 5}},
                 effect=["NDR backward ≥ 0.9"], every_seed=True)
    values = Measured({"NDR backward": per_seed([1.0, 1.0, 1.0, 1.0, 0.6])})  # mean 0.92
    assert judge("c", claim, values).verdict is Verdict.FAILS
    assert "seed position(s) [4]" in judge("c", claim, values).evidence
    lenient = claim.model_copy(update={"every_seed": False})
    assert judge("c", lenient, values).verdict is Verdict.QUALITATIVE


def test_not_measured_carries_its_reason():
    claim = judge("c", spec(effect=["x ≥ 0"]), NotMeasured("needs the bAbI files"))
    assert claim.verdict is Verdict.NOT_MEASURED and "bAbI" in claim.evidence


def test_rates_over_seeds_compare_as_numbers():
    """Table 6.1: 0% of NDR seeds above 95% on 'A'."""
    rule = spec(references={"share above 0.95": {"mean": 0.0}}, effect=["share above 0.95 ≤ 0.5"])
    assert judge("c", rule, Measured({"share above 0.95": 0.0})).verdict is Verdict.REPRODUCES
    assert judge("c", rule, Measured({"share above 0.95": 1 / 3})).verdict is Verdict.QUALITATIVE
    assert judge("c", rule, Measured({"share above 0.95": 1.0})).verdict is Verdict.FAILS


def test_a_looser_tolerance_needs_the_seeds_reason():
    with pytest.raises(ValidationError, match="tolerance_reason"):
        spec(references={"x": {"mean": 0.5, "tolerance": 0.3}}, effect=["x ≥ 0"])
    spec(references={"x": {"mean": 0.5, "tolerance": 0.3, "tolerance_reason": "'sometimes'"}},
         effect=["x ≥ 0"])
    spec(references={"x": {"mean": 0.5, "tolerance": 0.01}}, effect=["x ≥ 0"])  # tighter: fine


def test_specs_refuse_unknown_fields_and_bad_rules():
    with pytest.raises(ValidationError):
        spec(effect=["x ≥ 0"], reference={"x": {"mean": 1.0}})
    with pytest.raises(ValidationError):
        spec(effect=["|x| ≥ 0"])
    with pytest.raises(ValidationError):
        spec(effect=[])


def test_unmeasured_values_and_unjudged_claims_are_errors():
    with pytest.raises(KeyError, match="did not measure"):
        judge("c", spec(effect=["x ≥ 0"], references={"y": {"mean": 1.0}}),
              Measured({"x": 1.0}))
    with pytest.raises(KeyError, match="left out"):
        judge_all({"a": spec(effect=["x ≥ 0"])}, {})
    with pytest.raises(KeyError, match="not in the spec"):
        judge_all({}, {"a": Measured({"x": 1.0})})


def test_summary_counts_every_verdict():
    claims = [{"verdict": "REPRODUCES"}, {"verdict": "FAILS"}, {"verdict": "FAILS"}]
    assert summary_line(claims) == "1 REPRODUCES, 0 QUALITATIVE, 2 FAILS, 0 NOT MEASURED"


def test_a_yes_no_value_per_seed_needs_every_seed():
    rule = spec(effect=["clusters follow the groups"])
    assert judge("c", rule, Measured({"clusters follow the groups": per_seed(
        [True, True, True])})).verdict is Verdict.REPRODUCES
    assert judge("c", rule, Measured({"clusters follow the groups": per_seed(
        [True, False, True])})).verdict is Verdict.FAILS


# ----------------------------------------------------------------------------- each rule's edge


@pytest.mark.parametrize("symbol, ascii_symbol, below, equal, above", [
    ("≥", ">=", False, True, True), ("≤", "<=", True, True, False),
    (">", ">", False, False, True), ("<", "<", True, False, False),
])
def test_each_comparison_holds_exactly_where_its_symbol_says(symbol, ascii_symbol, below, equal,
                                                            above):
    for text in (f"x {symbol} 0.5", f"x {ascii_symbol} 0.5", f"x {symbol} y",
                 f"x {symbol} y + 0.25", f"x {symbol} y - 0.25"):
        rule = parse_rule(text)
        offset = 0.25 if "+" in text else -0.25 if " - " in text else 0.0
        y = 0.5 - offset  # the right side is 0.5 in every text
        assert [rule.holds({"x": x, "y": y}) for x in (0.25, 0.5, 0.75)] == [below, equal, above], text
    # judged on means over seeds, and on every seed where the spec asks
    claim = spec(effect=[f"x {symbol} 0.5"], every_seed=True)
    for x, holds in ((0.25, below), (0.5, equal), (0.75, above)):
        verdict = judge("c", claim, Measured({"x": per_seed([x, x])})).verdict
        assert verdict is (Verdict.REPRODUCES if holds else Verdict.FAILS), (symbol, x)


def test_a_compare_of_lists_must_hold_in_every_entry_paired_by_position():
    rule = parse_rule("a > b")
    assert rule.holds({"a": [2.0, 3.0], "b": [1.0, 2.0]})
    assert not rule.holds({"a": [2.0, 3.0], "b": [1.0, 3.0]})  # the second pair fails
    assert not rule.holds({"a": [3.0, 2.0], "b": [2.5, 2.5]})  # the second pair fails
    assert parse_rule("a ≥ 0.5").holds({"a": [0.5, 0.9]})
    assert not parse_rule("a ≥ 0.5").holds({"a": [0.9, 0.4]})
    assert not parse_rule("a ≥ 0.5").holds({"a": []})  # nothing measured holds nothing
    with pytest.raises(ValueError, match="lengths"):
        rule.holds({"a": [1.0, 2.0], "b": [1.0]})
    with pytest.raises(KeyError, match="unmeasured"):
        rule.holds({"a": 1.0})


def test_an_absolute_value_rule_is_at_most_its_limit_on_both_sides():
    rule = parse_rule("|gap| ≤ 0.25")
    assert rule == AbsAtMost("gap", 0.25) and rule.describe() == "|gap| ≤ 0.25"
    assert [rule.holds({"gap": g}) for g in (-0.5, -0.25, 0.0, 0.25, 0.5)] == [
        False, True, True, True, False]
    assert rule.holds({"gap": [0.1, -0.2]}) and not rule.holds({"gap": [0.1, -0.3]})
    claim = spec(effect=["|gap| ≤ 0.05"])
    assert judge("c", claim, Measured({"gap": per_seed([0.03, -0.01])})).verdict \
        is Verdict.REPRODUCES
    assert judge("c", claim, Measured({"gap": per_seed([-0.2, -0.1])})).verdict is Verdict.FAILS


def test_a_true_rule_needs_a_true_value_or_every_seed_true():
    rule = parse_rule("it works")
    assert rule.holds({"it works": True}) and not rule.holds({"it works": False})
    assert rule.holds({"it works": 1.0}) and not rule.holds({"it works": 0.99})
    assert not rule.holds({"it works": 0.0})
    import numpy as np
    assert rule.holds({"it works": np.bool_(True)}) and not rule.holds({"it works": np.bool_(False)})
    assert rule.holds({"it works": [True, True]}) and not rule.holds({"it works": [True, False]})
    claim = spec(effect=["it works"])
    assert judge("c", claim, Measured({"it works": False})).verdict is Verdict.FAILS
    assert judge("c", claim, Measured({"it works": True})).verdict is Verdict.REPRODUCES


def test_slope_is_the_least_squares_slope_and_must_be_negative():
    from sglab.experiments.claims import slope

    assert slope({"y": [3.0, 2.0, 1.0]}, "y") == pytest.approx(-1.0)
    assert slope({"y": [1.0, 3.0, 2.0, 6.0]}, "y") == pytest.approx(1.4)  # by hand: 7 / 5
    assert slope({"y": [4.0, 2.0, 0.0], "x": [0.0, 1.0, 4.0]}, "y", "x") == pytest.approx(
        -12 / 13)  # sum (x - 5/3)(y - 2) / sum (x - 5/3)^2 = -8 / (26/3)
    assert slope({"y": [1.0]}, "y") == 0.0 and slope({"y": []}, "y") == 0.0
    # (a flat [1, 1] fits a slope of -8e-17 in floating point: the rule says < 0, not < -eps)
    falling, flat, rising = ({"y": v} for v in ([2.0, 1.0], [0.0, 0.0], [1.0, 2.0]))
    rule = parse_rule("slope(y) < 0")
    assert [rule.holds(v) for v in (falling, flat, rising)] == [True, False, False]
    over = parse_rule("slope(y over x) < 0")
    assert over.holds({"y": [1.0, 2.0], "x": [1.0, 0.0]})  # rising by position, falling in x
    assert not over.holds({"y": [1.0, 2.0], "x": [0.0, 1.0]})
    assert rule.derived(falling) == "slope -1" and over.describe() == "slope(y over x) < 0"
    assert rule.describe() == "slope(y) < 0"
    claim = spec(effect=["slope(y) < 0"])
    assert judge("c", claim, Measured({"y": [0.9, 0.5, 0.1]})).verdict is Verdict.REPRODUCES
    assert "slope -0.4" in judge("c", claim, Measured({"y": [0.9, 0.5, 0.1]})).evidence
    assert judge("c", claim, Measured({"y": [0.1, 0.5, 0.9]})).verdict is Verdict.FAILS


def test_alternatives_hold_where_any_holds_and_say_which_values_they_read():
    rule = parse_rule("a ≥ 0.9 or |b| ≤ 0.1 or slope(c) < 0")
    assert rule.names() == ["a", "b", "c"]
    assert rule.describe() == "a ≥ 0.9 or |b| ≤ 0.1 or slope(c) < 0"
    falling, rising = [1.0, 0.0], [0.0, 1.0]
    assert rule.holds({"a": 0.95, "b": 1.0, "c": rising})
    assert rule.holds({"a": 0.0, "b": -0.05, "c": rising})
    assert rule.holds({"a": 0.0, "b": 1.0, "c": falling})
    assert not rule.holds({"a": 0.0, "b": 1.0, "c": rising})
    assert rule.derived({"a": 0.0, "b": 1.0, "c": rising}) == "slope +1"


def test_the_default_tolerance_includes_its_edge_and_a_given_one_replaces_it():
    ref = {"mean": 0.5, "std": 0.125}  # allowed max(0.05, 0.25) = 0.25, exact in binary
    edge = judge("c", spec(references={"x": ref}, effect=["x ≥ 0"]), Measured({"x": 0.75}))
    assert edge.verdict is Verdict.REPRODUCES and edge.references["x"]["allowed"] == 0.25
    past = judge("c", spec(references={"x": ref}, effect=["x ≥ 0"]), Measured({"x": 0.875}))
    assert past.verdict is Verdict.QUALITATIVE
    below = judge("c", spec(references={"x": ref}, effect=["x ≥ 0"]), Measured({"x": 0.125}))
    assert below.verdict is Verdict.QUALITATIVE  # |ours - mean| on either side
    no_std = judge("c", spec(references={"x": {"mean": 0.5}}, effect=["x ≥ 0"]),
                   Measured({"x": 0.5625}))
    assert no_std.verdict is Verdict.QUALITATIVE and no_std.references["x"]["allowed"] == 0.05
    given = {"mean": 0.5, "std": 0.125, "tolerance": 0.0625}
    tight = judge("c", spec(references={"x": given}, effect=["x ≥ 0"]), Measured({"x": 0.625}))
    assert tight.verdict is Verdict.QUALITATIVE and tight.references["x"]["allowed"] == 0.0625
    zero = judge("c", spec(references={"x": {"mean": 0.5, "tolerance": 0.0}}, effect=["x ≥ 0"]),
                 Measured({"x": 0.5}))
    assert zero.verdict is Verdict.REPRODUCES and zero.references["x"]["allowed"] == 0.0


def test_a_failed_effect_fails_even_within_tolerance_and_names_every_failing_rule():
    claim = judge("c", spec(references={"x": {"mean": 0.5}}, effect=["x ≥ 0.9", "x ≤ 0.1",
                                                                   "x ≥ 0"]),
                  Measured({"x": 0.5}))
    assert claim.verdict is Verdict.FAILS
    assert "does not hold: x ≥ 0.9; x ≤ 0.1" in claim.evidence
    assert claim.references["x"]["within"] is True


def test_every_seed_judges_each_seed_with_the_other_values_as_they_are():
    claim = spec(effect=["a > b", "c"], every_seed=True)
    good = Measured({"a": per_seed([0.9, 0.8]), "b": 0.5, "c": True})
    assert judge("c", claim, good).verdict is Verdict.REPRODUCES
    one_low = Measured({"a": per_seed([0.9, 0.4]), "b": 0.5, "c": True})  # mean 0.65 passes
    judged = judge("c", claim, one_low)
    assert judged.verdict is Verdict.FAILS and "fails on seed position(s) [1]" in judged.evidence
    assert "does not hold" not in judged.evidence  # the mean holds
    assert "(on the mean and every seed)" in judged.evidence
    first_low = Measured({"a": per_seed([0.4, 0.9, 0.9]), "b": 0.5, "c": True})
    assert "seed position(s) [0]" in judge("c", claim, first_low).evidence
    mean_only = judge("c", claim.model_copy(update={"every_seed": False}), one_low)
    assert mean_only.verdict is Verdict.REPRODUCES and "(on the mean)" in mean_only.evidence
    with pytest.raises(ValueError, match="different lengths"):
        judge("c", claim, Measured({"a": per_seed([0.9, 0.8]), "b": per_seed([0.1]), "c": True}))


def test_the_evidence_shows_context_values_per_seed_and_the_tolerance():
    claim = judge("c", spec(references={"x": {"mean": 0.9, "std": 0.01, "seeds": 5}},
                            effect=["x ≥ 0.5"]),
                  Measured({"x": per_seed([0.8, 0.6]), "n": 3}, context="OOD test"))
    assert claim.evidence == ("OOD test; x 0.7 (seeds [0.8, 0.6]), n 3; effect: x ≥ 0.5 "
                              "(on the mean); outside tolerance: x 0.7 vs the seed's 0.9 ± 0.01 "
                              "(5 seeds) (tolerance 0.05)")
    assert claim.values == {"x": {"mean": pytest.approx(0.7), "std": pytest.approx(0.1414, rel=1e-3),
                                  "seeds": [0.8, 0.6]}, "n": 3}
    assert claim.references["x"] == {"mean": 0.9, "std": 0.01, "seeds": 5,
                                     "allowed": 0.05, "ours": pytest.approx(0.7),
                                     "within": False}
    assert claim.source == "001_76659a6d281e669d.txt, Table 5.1"
    assert claim.to_dict()["verdict"] == "QUALITATIVE" and "note" not in claim.to_dict()
    within = judge("c", spec(references={"x": {"mean": 0.7}}, effect=["x ≥ 0.5"],
                             note="a note"), Measured({"x": 0.7}))
    assert within.evidence.endswith("within tolerance of the seed's numbers")
    assert within.to_dict()["note"] == "a note"


# ----------------------------------------------------------------------------- what is shown


def test_malformed_rules_say_what_is_wrong():
    with pytest.raises(ValueError, match="has no comparison"):
        parse_rule("slope(x)")
    with pytest.raises(ValueError, match="more than one comparison"):
        parse_rule("a ≥ 0.1 ≥ b")
    with pytest.raises(ValueError, match="more than one comparison"):
        parse_rule("a < b < c < d")
    with pytest.raises(ValueError, match="a slope rule reads"):
        parse_rule("slope(x) > 0")
    with pytest.raises(ValueError, match="an absolute value reads"):
        parse_rule("|gap| ≥ 0.05")
    # a bar on one side only is a name, not an absolute value
    assert parse_rule("|gap ≤ 0.05") == Compare("|gap", "≤", 0.05)
    assert parse_rule("gap| ≤ 0.05") == Compare("gap|", "≤", 0.05)


def test_a_comparison_describes_its_margin_with_its_sign():
    assert Compare("a", "≤", "b", 0.5).describe() == "a ≤ b + 0.5"
    assert Compare("a", "≤", "b", 2.0).describe() == "a ≤ b + 2"
    assert Compare("a", "≤", "b", -0.5).describe() == "a ≤ b − 0.5"
    assert Compare("a", "≤", "b").describe() == "a ≤ b"
    assert Compare("a", "≥", 0.5, 0.25).describe() == "a ≥ 0.75"  # a number absorbs it
    assert Compare("a", ">", 0.5, 0.25).holds({"a": 0.7}) is False


def test_references_describe_mean_spread_and_seed_count():
    from sglab.experiments.claims import Reference

    assert Reference(mean=0.5).describe() == "0.5"
    assert Reference(mean=0.5, std=0.1).describe() == "0.5 ± 0.1"
    assert Reference(mean=0.5, std=0.0, seeds=5).describe() == "0.5 ± 0 (5 seeds)"
    assert Reference(mean=1.0, seeds=3).describe() == "1 (3 seeds)"


def test_values_are_shown_as_text():
    import math

    import numpy as np

    from sglab.experiments.claims import format_value

    assert format_value(True) == "yes" and format_value(False) == "no"
    assert format_value(np.int64(7)) == "7" and format_value(3) == "3"
    assert format_value(0.123456) == "0.1235" and format_value(np.float32(0.5)) == "0.5"
    assert format_value(math.nan) == "n/a"
    assert format_value([0.5, True, "x"]) == "[0.5, yes, x]"
    assert format_value(np.array([1.0, 2.0])) == "[1, 2]"
    assert format_value("relative") == "relative" and format_value(None) == "None"


def test_per_seed_values_are_floats_and_yes_no_stays_yes_no():
    import numpy as np

    from sglab.experiments.claims import mean_of, std_of

    values = per_seed([1, np.float32(0.5), 2])
    assert values == [1.0, 0.5, 2.0] and all(type(v) is float for v in values)
    flags = per_seed([True, False])
    assert flags == [True, False] and all(type(v) is bool for v in flags)
    assert mean_of(flags) == 0.5 and mean_of(per_seed([])) != mean_of(per_seed([]))  # nan
    assert mean_of(0.25) == 0.25
    assert std_of(per_seed([0.5])) is None and std_of(0.5) is None and std_of([1.0, 2.0]) is None
    assert std_of(per_seed([1.0, 3.0])) == pytest.approx(2 ** 0.5)


def test_alternatives_read_list_entries_and_show_every_slope():
    rule = parse_rule("a ≥ 0.5 or b ≥ 0.5")
    assert rule.holds({"a": [0.6, 0.1], "b": [0.1, 0.6]})  # entry by entry
    assert not rule.holds({"a": [0.6, 0.1], "b": [0.1, 0.4]})
    slopes = parse_rule("slope(a) < 0 or slope(b over x) < 0")
    assert slopes.names() == ["a", "b", "x"]
    assert slopes.derived({"a": [0.0, 1.0], "b": [1.0, 2.0], "x": [1.0, 0.0]}) == \
        "slope +1, slope -1"


def test_a_slope_over_another_value_reads_it():
    rule = parse_rule("slope(y over x) < 0")
    assert rule.names() == ["y", "x"]
    assert rule.derived({"y": [1.0, 2.0], "x": [1.0, 0.0]}) == "slope -1"
    with pytest.raises(KeyError, match="did not measure"):
        judge("c", spec(effect=["slope(y over x) < 0"]), Measured({"y": [1.0, 2.0]}))


def test_judged_claims_carry_their_id_statement_source_and_note():
    specs = {
        "first": spec(statement="one", effect=["x ≥ 0.5", "y"], note="n1",
                      references={"x": {"mean": 0.9}, "z": {"mean": 0.1}}),
        "second": spec(statement="two", effect=["x ≥ 0"]),
    }
    measured = {"first": Measured({"x": 0.6, "y": True, "z": 0.5}),
                "second": NotMeasured("needs a GPU")}
    first, second = judge_all(specs, measured)
    assert (first.id, first.statement, first.source, first.note) == (
        "first", "one", "001_76659a6d281e669d.txt, Table 5.1", "n1")
    assert first.verdict is Verdict.QUALITATIVE
    assert first.evidence == (
        "x 0.6, y yes, z 0.5; effect: x ≥ 0.5; y (on the mean); outside tolerance: "
        "x 0.6 vs the seed's 0.9 (tolerance 0.05); z 0.5 vs the seed's 0.1 (tolerance 0.05)")
    assert first.to_dict() == {
        "id": "first", "statement": "one", "source": "001_76659a6d281e669d.txt, Table 5.1",
        "verdict": "QUALITATIVE", "evidence": first.evidence,
        "values": {"x": 0.6, "y": True, "z": 0.5}, "references": first.references,
        "note": "n1"}
    assert (second.id, second.statement, second.source, second.verdict) == (
        "second", "two", "001_76659a6d281e669d.txt, Table 5.1", Verdict.NOT_MEASURED)
    assert second.evidence == "not measured: needs a GPU" and second.note is None
    noted = judge("c", spec(effect=["x ≥ 0"], note="why"), NotMeasured("no data"))
    assert noted.note == "why" and noted.to_dict()["note"] == "why"
    every = judge("c", spec(effect=["x ≥ 0"], every_seed=True), Measured({"x": per_seed([1.0])}))
    assert every.evidence == "x 1 (seeds [1]); effect: x ≥ 0 (on the mean and every seed)"


def test_a_flat_series_has_no_negative_slope():
    """np.polyfit returns about -8e-17 for [1, 1]: rounding noise is no fall."""
    assert not parse_rule("slope(x) < 0").holds({"x": [1.0, 1.0]})
    assert not parse_rule("slope(x over t) < 0").holds({"x": [0.3, 0.3, 0.3], "t": [0, 1, 2]})
    assert parse_rule("slope(x) < 0").holds({"x": [1.0, 0.999]})


def test_a_median_claim_judges_rules_and_references_on_the_median_over_seeds():
    # 5 seeds, one collapsed: the mean (0.8) is outside 1.0's tolerance, the median (1.0) is
    # not, and the rule reads the median too (Table 4.1 reports "the median of 5 runs")
    values = {"Rel Uni": per_seed([1.0, 0.0, 1.0, 1.0, 1.0]),
              "Trafo": per_seed([0.3, 0.2, 0.9, 0.1, 0.25])}
    fields = {"references": {"Rel Uni": {"mean": 1.0, "seeds": 5}},
              "effect": ["Rel Uni > Trafo + 0.7"]}
    by_mean = judge("c", spec(**fields), Measured(values))
    by_median = judge("c", spec(statistic="median", **fields), Measured(values))
    assert by_mean.verdict is Verdict.FAILS  # 0.8 > 0.35 + 0.7 does not hold
    assert by_median.verdict is Verdict.REPRODUCES  # 1.0 > 0.25 + 0.7
    assert by_median.references["Rel Uni"]["ours"] == 1.0
    assert by_median.values["Trafo"]["median"] == 0.25
    assert by_median.values["Trafo"]["mean"] == pytest.approx(0.35)
    assert "(on the median)" in by_median.evidence and "Trafo 0.25 (seeds" in by_median.evidence
    assert "median" not in by_mean.values["Trafo"]


def test_a_median_claim_still_needs_every_seed_of_a_yes_no_value():
    claim = judge("c", spec(statistic="median", effect=["solved"]),
                  Measured({"solved": per_seed([True, False, True])}))
    assert claim.verdict is Verdict.FAILS  # the fraction true, 2/3, not the median (True)


def test_a_claim_statistic_is_mean_or_median():
    with pytest.raises(ValidationError):
        spec(statistic="max", effect=["a ≥ 0"])
