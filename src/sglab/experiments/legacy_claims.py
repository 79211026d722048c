"""Legacy claims (pass / fail against a rule, no reference to the seed's numbers), kept
while experiments move to :mod:`sglab.experiments.claims`.

A claim pairs a sentence from the paper with measured values (``{"NoPE": 0.98, ...}``)
and rules (``at_least("NoPE", 0.85)``). The same rule object both renders the pass
condition in the evidence text and decides the verdict, so the sentence and the check
cannot disagree. A value may be a list (one entry per seed or per layer): a rule then
has to hold for every entry (rules over several list values pair them by position).

    claim("nope-matches-learned-pe", "NoPE learns addition about as well as learned PE.",
          values={"learned PE": 0.99, "NoPE": 0.98, "gap": 0.01},
          rules=[at_least("learned PE", 0.85), at_least("NoPE", 0.85),
                 abs_at_most("gap", 0.05)])
"""

from __future__ import annotations

import math
import operator
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

Value = float | Sequence[float]


@dataclass
class Claim:
    """A sentence from the paper, the measured evidence, and whether it held.

    ``passed`` is None when the claim cannot be measured at this preset (the evidence
    says why).
    """

    id: str
    statement: str
    evidence: str = ""
    passed: bool | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def format_value(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        value = float(value)
        if math.isnan(value):
            return "n/a"
        return f"{value:.4g}"
    if isinstance(value, (list, tuple, np.ndarray)):
        return "[" + ", ".join(format_value(v) for v in value) + "]"
    return str(value)


def _length(value: Any) -> int | None:
    return len(value) if isinstance(value, (list, tuple, np.ndarray)) else None


def _entry(value: Any, index: int) -> Any:
    return value[index] if _length(value) is not None else value


class Rule(ABC):
    """A pass condition over named values."""

    @abstractmethod
    def names(self) -> list[str]:
        """The value names the rule reads."""

    @abstractmethod
    def describe(self) -> str:
        """The condition as text, e.g. ``NoPE ≥ 0.85``."""

    @abstractmethod
    def holds_at(self, values: Mapping[str, Any], index: int) -> bool:
        """Whether the condition holds for entry ``index`` of list values."""

    def derived(self, values: Mapping[str, Any]) -> str:
        """Values the rule computes itself (e.g. a slope), as text for the evidence."""
        return ""

    def holds(self, values: Mapping[str, Any]) -> bool:
        missing = [n for n in self.names() if n not in values]
        if missing:
            raise KeyError(f"rule {self.describe()!r} reads unmeasured values {missing}")
        lengths = {_length(values[n]) for n in self.names()} - {None}
        if len(lengths) > 1:
            raise ValueError(f"rule {self.describe()!r} pairs lists of lengths {sorted(lengths)}")
        count = lengths.pop() if lengths else 1
        return count > 0 and all(self.holds_at(values, i) for i in range(count))

    def every_entry(self, values: Mapping[str, Any]) -> bool:
        return any(_length(values[n]) is not None for n in self.names())


_SYMBOLS: dict[str, Callable[[float, float], bool]] = {
    "≥": operator.ge, "≤": operator.le, ">": operator.gt, "<": operator.lt,
}


@dataclass(frozen=True)
class Compare(Rule):
    """``left OP right + margin`` where ``right`` is a number or another value's name."""

    left: str
    symbol: str
    right: str | float
    margin: float = 0.0

    def names(self) -> list[str]:
        return [self.left] + ([self.right] if isinstance(self.right, str) else [])

    def describe(self) -> str:
        if not isinstance(self.right, str):
            return f"{self.left} {self.symbol} {self.right + self.margin:g}"
        offset = f" {'+' if self.margin >= 0 else '−'} {abs(self.margin):g}" if self.margin else ""
        return f"{self.left} {self.symbol} {self.right}{offset}"

    def holds_at(self, values, index) -> bool:
        left = float(_entry(values[self.left], index))
        right = (float(_entry(values[self.right], index)) if isinstance(self.right, str)
                 else float(self.right))
        return bool(_SYMBOLS[self.symbol](left, right + self.margin))


@dataclass(frozen=True)
class AbsAtMost(Rule):
    name: str
    limit: float

    def names(self) -> list[str]:
        return [self.name]

    def describe(self) -> str:
        return f"|{self.name}| ≤ {self.limit:g}"

    def holds_at(self, values, index) -> bool:
        return abs(float(_entry(values[self.name], index))) <= self.limit


@dataclass(frozen=True)
class IsTrue(Rule):
    name: str

    def names(self) -> list[str]:
        return [self.name]

    def describe(self) -> str:
        return self.name

    def holds_at(self, values, index) -> bool:
        return bool(_entry(values[self.name], index))


@dataclass(frozen=True)
class SlopeNegative(Rule):
    """The least-squares slope of a list of values is below zero, against the list
    ``over`` (another value's name) or against the positions 0, 1, 2, ..."""

    name: str
    over: str | None = None

    def names(self) -> list[str]:
        return [self.name] + ([self.over] if self.over else [])

    def describe(self) -> str:
        against = f" against {self.over}" if self.over else ""
        return f"the least-squares slope of {self.name}{against} is negative"

    def holds(self, values) -> bool:
        return slope(values, self.name, self.over) < 0

    def derived(self, values) -> str:
        return f"slope {slope(values, self.name, self.over):+.4g}"

    def holds_at(self, values, index) -> bool:  # the rule is about the whole list
        return self.holds(values)

    def every_entry(self, values) -> bool:
        return False


def slope(values: Mapping[str, Any], name: str, over: str | None = None) -> float:
    """Least-squares slope of ``values[name]`` against ``values[over]`` (or positions);
    0.0 for fewer than two points."""
    series = np.asarray(values[name], dtype=float)
    x = np.asarray(values[over], dtype=float) if over else np.arange(series.size, dtype=float)
    if series.size < 2:
        return 0.0
    return float(np.polyfit(x, series, 1)[0])


@dataclass(frozen=True)
class Combined(Rule):
    """Several rules joined by ``or`` (any holds) or ``and`` (all hold)."""

    rules: tuple[Rule, ...]
    word: str  # "or" | "and"

    def names(self) -> list[str]:
        return list(dict.fromkeys(n for r in self.rules for n in r.names()))

    def describe(self) -> str:
        return "(" + f" {self.word} ".join(r.describe() for r in self.rules) + ")"

    def holds_at(self, values, index) -> bool:
        combine = any if self.word == "or" else all
        return combine(r.holds_at(values, index) for r in self.rules)


def at_least(name: str, other: str | float, margin: float = 0.0) -> Rule:
    """``name ≥ other + margin`` (``other`` a number or a value name)."""
    return Compare(name, "≥", other, margin)


def at_most(name: str, other: str | float, margin: float = 0.0) -> Rule:
    """``name ≤ other + margin``."""
    return Compare(name, "≤", other, margin)


def greater_than(name: str, other: str | float, margin: float = 0.0) -> Rule:
    """``name > other + margin``."""
    return Compare(name, ">", other, margin)


def less_than(name: str, other: str | float, margin: float = 0.0) -> Rule:
    """``name < other + margin``."""
    return Compare(name, "<", other, margin)


def abs_at_most(name: str, limit: float) -> Rule:
    return AbsAtMost(name, limit)


def is_true(name: str) -> Rule:
    return IsTrue(name)


def slope_negative(name: str, over: str | None = None) -> Rule:
    return SlopeNegative(name, over)


def any_of(*rules: Rule) -> Rule:
    return Combined(tuple(rules), "or")


def all_of(*rules: Rule) -> Rule:
    return Combined(tuple(rules), "and")


def render_rules(rules: Sequence[Rule], values: Mapping[str, Any]) -> str:
    """``pass if A ≥ 0.85 and B ≤ C (in every seed)``."""
    parts = [r.describe() + (" (every entry)" if r.every_entry(values) else "") for r in rules]
    return "pass if " + " and ".join(parts)


def claim(id: str, statement: str, values: Mapping[str, Any], rules: Sequence[Rule],
          context: str = "", shown: Sequence[str] | None = None) -> Claim:
    """A claim whose verdict is every rule holding on ``values``.

    The evidence lists the measured values (``shown``, default all), the optional
    ``context`` and the pass rule rendered from the same rule objects that decide.
    """
    names = list(shown) if shown is not None else list(values)
    measured = ", ".join([f"{n} {format_value(values[n])}" for n in names]
                         + [d for d in (rule.derived(values) for rule in rules) if d])
    verdict = bool(rules) and all(rule.holds(values) for rule in rules)
    evidence = "; ".join(p for p in (context, measured, render_rules(rules, values)) if p)
    return Claim(id, statement, evidence, verdict)


def not_measurable(id: str, statement: str, reason: str) -> Claim:
    """A claim this preset cannot check (``passed`` None, the reason as evidence)."""
    return Claim(id, statement, f"not measurable: {reason}", None)


__all__ = ["Claim", "Rule", "abs_at_most", "all_of", "any_of", "at_least", "at_most", "claim",
           "format_value", "greater_than", "is_true", "less_than", "not_measurable",
           "render_rules", "slope", "slope_negative"]
