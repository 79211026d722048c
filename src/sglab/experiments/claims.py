"""Claims: the seed's statement with the seed's numbers, judged on our measurements.

A claim's spec lives in the experiment's spec file (``<experiment>.yaml``), not in code:

    nope-matches-learned-pe:
      statement: NoPE with causal attention learns 3-digit addition about as well as ...
      source: {document: 002_b61e1c6be3673e32.txt, where: Sec. 3, Table 1}
      references:
        NoPE: {mean: 0.99}
      effect: ["learned PE ≥ 0.85", "NoPE ≥ 0.85", "|gap| ≤ 0.05"]

The experiment's analysis measures the named values (:class:`Measured`; a value measured
once per seed is a :class:`PerSeed` list, in seed order) or says why it cannot
(:class:`NotMeasured`). :func:`judge` then decides, on one scale for every claim:

- ``REPRODUCES``: every effect rule holds on the means over seeds (the medians where the
  spec says ``statistic: median``, as a seed that reports medians) (and on each seed where
  the spec says ``every_seed``: the seed's own spread shows no failing seed, as 1.00 ± 0.00),
  and every referenced value's mean lies within its tolerance of the seed's number
  (default ``max(0.05, 2 × the seed's std)``; :class:`Reference`);
- ``QUALITATIVE``: the effect holds as above, our numbers are outside the tolerance;
- ``FAILS``: the effect does not hold (on the mean, or on a seed where every seed must);
- ``NOT MEASURED``: not measurable at this preset, with the reason.

Effect rules are short texts, so the rule shown in the report is the rule that decides:
``NAME ≥ 0.9``, ``NAME > OTHER + 0.1``, ``|NAME| ≤ 0.05``, ``NAME`` (true),
``slope(NAME over OTHER) < 0``, and alternatives joined by `` or ``. A yes/no value measured
per seed is judged on its mean, the fraction of seeds where it holds: ``NAME`` then needs
every seed.
"""

from __future__ import annotations

import math
import operator
import re
import statistics
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

# ----------------------------------------------------------------------------- values


class PerSeed(list):
    """One measured value per seed, in seed order: judged on its mean, shown per seed."""


def per_seed(values: Sequence[float]) -> PerSeed:
    return PerSeed(float(v) if not isinstance(v, bool) else v for v in values)


def mean_of(value: Any) -> Any:
    """The mean over seeds of a :class:`PerSeed` value (booleans: the fraction true);
    anything else unchanged."""
    if isinstance(value, PerSeed):
        if not value:
            return math.nan
        return statistics.fmean(float(v) for v in value)
    return value


def center_of(value: Any, statistic: str = "mean") -> Any:
    """The mean (or, with ``statistic="median"``, the median) over seeds of a
    :class:`PerSeed` value; yes/no values are always the fraction true; anything else
    unchanged."""
    if (statistic == "median" and isinstance(value, PerSeed) and value
            and not all(isinstance(v, bool) for v in value)):
        return statistics.median(float(v) for v in value)
    return mean_of(value)


def std_of(value: Any) -> float | None:
    """The sample standard deviation over seeds (None for one seed or a non-seed value)."""
    if isinstance(value, PerSeed) and len(value) > 1:
        return statistics.stdev(float(v) for v in value)
    return None


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


# ----------------------------------------------------------------------------- rules


class Rule(ABC):
    """A condition over named values. A list value (one entry per layer, say) must satisfy
    the condition in every entry; lists read together are paired by position."""

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
        value = _entry(values[self.name], index)
        if isinstance(value, (bool, np.bool_)):
            return bool(value)
        return float(value) == 1.0  # the mean of a per-seed yes/no: true on every seed


@dataclass(frozen=True)
class SlopeNegative(Rule):
    """The least-squares slope of a list of values is below zero, against the list
    ``over`` (another value's name) or against the positions 0, 1, 2, ..."""

    name: str
    over: str | None = None

    def names(self) -> list[str]:
        return [self.name] + ([self.over] if self.over else [])

    def describe(self) -> str:
        return f"slope({self.name}{f' over {self.over}' if self.over else ''}) < 0"

    def holds(self, values) -> bool:
        # below -1e-12, not 0: a least-squares fit of a flat series returns rounding noise
        # such as -8e-17, which is no fall
        return slope(values, self.name, self.over) < -1e-12

    def derived(self, values) -> str:
        return f"slope {slope(values, self.name, self.over):+.4g}"

    def holds_at(self, values, index) -> bool:  # the rule is about the whole list
        return self.holds(values)


def slope(values: Mapping[str, Any], name: str, over: str | None = None) -> float:
    """Least-squares slope of ``values[name]`` against ``values[over]`` (or positions);
    0.0 for fewer than two points."""
    series = np.asarray(values[name], dtype=float)
    x = np.asarray(values[over], dtype=float) if over else np.arange(series.size, dtype=float)
    if series.size < 2:
        return 0.0
    return float(np.polyfit(x, series, 1)[0])


@dataclass(frozen=True)
class AnyOf(Rule):
    """Alternatives: the rule holds where any of them holds."""

    rules: tuple[Rule, ...]

    def names(self) -> list[str]:
        return list(dict.fromkeys(n for r in self.rules for n in r.names()))

    def describe(self) -> str:
        return " or ".join(r.describe() for r in self.rules)

    def holds_at(self, values, index) -> bool:
        return any(r.holds_at(values, index) for r in self.rules)

    def derived(self, values) -> str:
        return ", ".join(d for d in (r.derived(values) for r in self.rules) if d)


_OPERATOR = re.compile(r" (≥|≤|>=|<=|>|<) ")
_ASCII = {">=": "≥", "<=": "≤"}
_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_MARGIN = re.compile(rf"^(.*\S) ([+\-−]) ({_NUMBER})$")
_SLOPE = re.compile(r"^slope\((.+?)(?: over (.+))?\)$")


def parse_rule(text: str) -> Rule:
    """A rule from its text (the grammar is in the module docstring); ValueError if the
    text is not one."""
    text = text.strip()
    if " or " in text:
        return AnyOf(tuple(parse_rule(part) for part in text.split(" or ")))
    found = _OPERATOR.findall(text)
    if not found:
        if not text or _SLOPE.match(text) or text.startswith("|"):
            raise ValueError(f"rule {text!r} has no comparison (≥, ≤, >, <)")
        return IsTrue(text)
    if len(found) > 1:
        raise ValueError(f"rule {text!r} has more than one comparison")
    left, symbol, right = _OPERATOR.split(text)
    symbol = _ASCII.get(symbol, symbol)
    if slope_match := _SLOPE.match(left):
        if symbol != "<" or right.strip() != "0":
            raise ValueError(f"rule {text!r}: a slope rule reads 'slope(NAME over NAME) < 0'")
        return SlopeNegative(slope_match.group(1), slope_match.group(2))
    if left.startswith("|") and left.endswith("|"):
        if symbol != "≤" or not re.fullmatch(_NUMBER, right):
            raise ValueError(f"rule {text!r}: an absolute value reads '|NAME| ≤ NUMBER'")
        return AbsAtMost(left[1:-1], float(right))
    if re.fullmatch(_NUMBER, right):
        return Compare(left, symbol, float(right))
    if margin := _MARGIN.match(right):
        sign = -1.0 if margin.group(2) in "-−" else 1.0
        return Compare(left, symbol, margin.group(1), sign * float(margin.group(3)))
    return Compare(left, symbol, right)


# ----------------------------------------------------------------------------- specs


class Source(BaseModel):
    """Where the seed states the claim: the document's file name in the seeds folder and the
    table, figure or section."""

    model_config = ConfigDict(extra="forbid")
    document: str
    where: str


class Reference(BaseModel):
    """The seed's number for one of our measured values: mean ± std over ``seeds`` runs.

    ``tolerance``: how far our mean may lie from it and still reproduce; by default
    ``max(0.05, 2 × std)`` (for accuracies). A tolerance looser than that needs a
    ``tolerance_reason`` (the seed's text that allows it)."""

    model_config = ConfigDict(extra="forbid")
    mean: float
    std: float | None = None
    seeds: int | None = None
    tolerance: float | None = Field(default=None, ge=0)
    tolerance_reason: str | None = None

    def default_tolerance(self) -> float:
        return max(0.05, 2 * (self.std or 0.0))

    def allowed(self) -> float:
        return self.default_tolerance() if self.tolerance is None else self.tolerance

    def describe(self) -> str:
        spread = f" ± {self.std:g}" if self.std is not None else ""
        seeds = f" ({self.seeds} seeds)" if self.seeds else ""
        return f"{self.mean:g}{spread}{seeds}"


class ClaimSpec(BaseModel):
    """One claim of an experiment's spec file (see the module docstring)."""

    model_config = ConfigDict(extra="forbid")
    statement: str
    source: Source
    references: dict[str, Reference] = Field(default_factory=dict)
    effect: list[str] = Field(min_length=1)
    every_seed: bool = False
    # what the rules and references read over seeds: the seed's own statistic (Table 4.1
    # reports "the median of 5 runs")
    statistic: Literal["mean", "median"] = "mean"
    note: str | None = None

    @field_validator("effect")
    @classmethod
    def _rules_parse(cls, effect: list[str]) -> list[str]:
        for text in effect:
            parse_rule(text)
        return effect

    @field_validator("references")
    @classmethod
    def _looser_needs_reason(cls, references: dict[str, Reference]) -> dict[str, Reference]:
        for name, ref in references.items():
            if (ref.tolerance is not None and ref.tolerance > ref.default_tolerance()
                    and not ref.tolerance_reason):
                raise ValueError(f"reference {name!r}: tolerance {ref.tolerance:g} is looser than "
                                 f"the default {ref.default_tolerance():g}; give the seed's "
                                 "text that allows it as tolerance_reason")
        return references

    def rules(self) -> list[Rule]:
        return [parse_rule(text) for text in self.effect]


# ----------------------------------------------------------------------------- verdicts


class Verdict(StrEnum):
    REPRODUCES = "REPRODUCES"
    QUALITATIVE = "QUALITATIVE"
    FAILS = "FAILS"
    NOT_MEASURED = "NOT MEASURED"


@dataclass
class Measured:
    """The values a claim reads (``PerSeed`` lists for per-seed values) and a line of context
    (what the values are: the split, the checkpoint, the unit)."""

    values: dict[str, Any]
    context: str = ""


@dataclass
class NotMeasured:
    reason: str


@dataclass
class Claim:
    """A judged claim, as the report and ``results.json`` show it."""

    id: str
    statement: str
    source: str
    verdict: Verdict
    evidence: str
    values: dict[str, Any] = field(default_factory=dict)
    references: dict[str, dict[str, Any]] = field(default_factory=dict)
    note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "statement": self.statement, "source": self.source,
                "verdict": self.verdict.value, "evidence": self.evidence,
                "values": self.values, "references": self.references,
                **({"note": self.note} if self.note else {})}


def _seed_count(values: Mapping[str, Any]) -> int | None:
    counts = {len(v) for v in values.values() if isinstance(v, PerSeed)}
    if len(counts) > 1:
        raise ValueError(f"per-seed values of different lengths {sorted(counts)}")
    return counts.pop() if counts else None


def _shown(value: Any, statistic: str = "mean") -> dict[str, Any] | Any:
    if isinstance(value, PerSeed):
        shown = {"mean": mean_of(value), "std": std_of(value), "seeds": list(value)}
        if statistic == "median":
            shown["median"] = center_of(value, statistic)
        return shown
    if isinstance(value, np.ndarray):
        return value.tolist()
    return value


def _format_shown(name: str, value: Any, statistic: str = "mean") -> str:
    if isinstance(value, PerSeed):
        return (f"{name} {format_value(center_of(value, statistic))} "
                f"(seeds {format_value(list(value))})")
    return f"{name} {format_value(value)}"


def judge(claim_id: str, spec: ClaimSpec, measurement: Measured | NotMeasured) -> Claim:
    """The verdict of one claim on its measurement (see the module docstring)."""
    source = f"{spec.source.document}, {spec.source.where}"
    if isinstance(measurement, NotMeasured):
        return Claim(claim_id, spec.statement, source, Verdict.NOT_MEASURED,
                     f"not measured: {measurement.reason}", note=spec.note)
    values = measurement.values
    rules = spec.rules()
    read = {n for r in rules for n in r.names()} | set(spec.references)
    missing = sorted(read - set(values))
    if missing:
        raise KeyError(f"claim {claim_id!r} reads values its analysis did not measure: {missing}")
    means = {name: center_of(value, spec.statistic) for name, value in values.items()}
    failed = [r.describe() for r in rules if not r.holds(means)]
    seeds = _seed_count(values)
    failing_seeds: list[int] = []
    if spec.every_seed and seeds:
        for index in range(seeds):
            one = {n: (v[index] if isinstance(v, PerSeed) else v) for n, v in values.items()}
            if not all(r.holds(one) for r in rules):
                failing_seeds.append(index)
    outside = []
    references = {}
    for name, ref in spec.references.items():
        ours, allowed = means[name], ref.allowed()
        within = bool(abs(float(ours) - ref.mean) <= allowed)
        references[name] = {**ref.model_dump(exclude_none=True), "allowed": allowed,
                            "ours": ours, "within": within}
        if not within:
            outside.append(f"{name} {format_value(ours)} vs the seed's {ref.describe()} "
                           f"(tolerance {allowed:g})")
    if failed or failing_seeds:
        verdict = Verdict.FAILS
    else:
        verdict = Verdict.QUALITATIVE if outside else Verdict.REPRODUCES
    derived = [d for d in (r.derived(means) for r in rules) if d]
    parts = [measurement.context,
             ", ".join([_format_shown(n, v, spec.statistic) for n, v in values.items()]
                       + derived),
             "effect: " + "; ".join(spec.effect) + (f" (on the {spec.statistic} and every seed)"
                                                     if spec.every_seed
                                                     else f" (on the {spec.statistic})")]
    if failed:
        parts.append("does not hold: " + "; ".join(failed))
    if failing_seeds:
        parts.append(f"fails on seed position(s) {failing_seeds}")
    if spec.references:
        parts.append("outside tolerance: " + "; ".join(outside) if outside
                     else "within tolerance of the seed's numbers")
    return Claim(claim_id, spec.statement, source, verdict,
                 "; ".join(p for p in parts if p),
                 {n: _shown(v, spec.statistic) for n, v in values.items()}, references,
                 spec.note)


def judge_all(specs: Mapping[str, ClaimSpec],
              measurements: Mapping[str, Measured | NotMeasured]) -> list[Claim]:
    """Every claim of the spec, in the spec's order; an analysis that measures a claim the
    spec does not have, or leaves one out, is a programming error."""
    unknown = sorted(set(measurements) - set(specs))
    left_out = sorted(set(specs) - set(measurements))
    if unknown or left_out:
        raise KeyError(f"the analysis measured claims not in the spec {unknown} and left out "
                       f"claims of the spec {left_out}")
    return [judge(claim_id, spec, measurements[claim_id]) for claim_id, spec in specs.items()]


def verdict_counts(claims: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """``{verdict: count}`` over claim dicts, every verdict present (0 where none)."""
    counts = {v.value: 0 for v in Verdict}
    for claim in claims:
        counts[claim["verdict"]] += 1
    return counts


def summary_line(claims: Sequence[Mapping[str, Any]]) -> str:
    """``2 REPRODUCES, 1 QUALITATIVE, 1 FAILS, 0 NOT MEASURED``."""
    return ", ".join(f"{n} {v}" for v, n in verdict_counts(claims).items())


__all__ = ["Claim", "ClaimSpec", "Measured", "NotMeasured", "PerSeed", "Reference", "Rule",
           "Source", "Verdict", "format_value", "judge", "judge_all", "mean_of", "parse_rule",
           "per_seed", "slope", "std_of", "summary_line", "verdict_counts"]
