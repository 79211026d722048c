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
