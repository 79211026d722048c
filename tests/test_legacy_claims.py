"""Claims built from measured values: the rendered pass rule is the rule that decides."""

import pytest

from sglab.experiments.legacy_claims import (
    abs_at_most,
    any_of,
    at_least,
    at_most,
    claim,
    greater_than,
    less_than,
    not_measurable,
    slope_negative,
)


@pytest.mark.parametrize("threshold", [0.85, 0.9, 0.95])
def test_the_threshold_in_the_text_is_the_one_checked(threshold):
    rule = at_least("NoPE", threshold)
    below = claim("c", "s", {"NoPE": threshold - 1e-9}, [rule])
    exact = claim("c", "s", {"NoPE": threshold}, [rule])
    assert f"pass if NoPE ≥ {threshold:g}" in exact.evidence
    assert below.passed is False and exact.passed is True


def test_comparisons_against_other_values_render_the_margin():
    values = {"bidirectional": 0.30, "ceiling": 0.29, "causal": 0.95}
    rules = [at_most("bidirectional", "ceiling", 0.02), at_most("bidirectional", "causal", -0.5)]
    result = claim("c", "s", values, rules)
    assert "bidirectional ≤ ceiling + 0.02" in result.evidence
    assert "bidirectional ≤ causal − 0.5" in result.evidence
    assert result.passed is True
    values["causal"] = 0.79
    assert claim("c", "s", values, rules).passed is False


def test_list_values_must_hold_in_every_entry_pairwise():
    rule = greater_than("same", "different")
    assert claim("c", "s", {"same": [0.3, 0.2], "different": [0.1, 0.1]}, [rule]).passed
    failing = claim("c", "s", {"same": [0.3, 0.05], "different": [0.1, 0.1]}, [rule])
    assert failing.passed is False and "(every entry)" in failing.evidence
    with pytest.raises(ValueError):
        rule.holds({"same": [1.0, 2.0], "different": [0.0]})


def test_any_of_is_decided_per_entry():
    rule = any_of(greater_than("ratio", 1.0), less_than("different", 0.0))
    assert rule.holds({"ratio": [2.0, 0.5], "different": [0.1, -0.2]})
    assert not rule.holds({"ratio": [2.0, 0.5], "different": [0.1, 0.2]})
    assert "(ratio > 1 or different < 0)" in rule.describe()


def test_slope_and_absolute_rules():
    falling = {"fraction": [1.0, 1.0, 0.5, 0.0], "layers": [0, 1, 2, 3]}
    assert slope_negative("fraction", over="layers").holds(falling)
    assert not slope_negative("fraction").holds({"fraction": [0.0, 1.0]})
    assert not slope_negative("fraction").holds({"fraction": [1.0]})
    assert abs_at_most("gap", 0.05).holds({"gap": -0.05})
    assert not abs_at_most("gap", 0.05).holds({"gap": -0.06})


def test_no_rules_or_unmeasured_values_never_pass_silently():
    assert claim("c", "s", {"x": 1.0}, []).passed is False
    with pytest.raises(KeyError):
        claim("c", "s", {"x": 1.0}, [at_least("y", 0.0)])


def test_not_measurable_is_none_with_the_reason():
    result = not_measurable("c", "s", "needs two seeds")
    assert result.passed is None and "needs two seeds" in result.evidence
    assert set(result.to_dict()) == {"id", "statement", "evidence", "passed"}


def test_a_slope_rule_reports_the_slope_it_judged():
    values = {"fraction": [1.0, 0.5, 0.0], "layers": [0, 1, 2]}
    result = claim("c", "s", values, [slope_negative("fraction", over="layers")])
    assert result.passed is True and "slope -0.5" in result.evidence
