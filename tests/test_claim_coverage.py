"""Every claim of every registered experiment is judged in a test on constructed values: its
id is among the cases of one of the claims test files (tests/test_*claims.py), which feed
values on which it must pass and values on which it must fail."""

import importlib
import sys
from pathlib import Path

from sglab import registry

TESTS = Path(__file__).resolve().parent


def strings_in(value, seen=None) -> set[str]:
    """Every string reachable from ``value``: containers, and the parametrize marks of test
    functions (the claim ids a test file judges, however it builds them)."""
    seen = {} if seen is None else seen  # id -> the object, kept alive so ids stay unique
    if id(value) in seen:
        return set()
    seen[id(value)] = value
    if isinstance(value, str):
        return {value}
    found: set[str] = set()
    if isinstance(value, dict):
        for key, item in value.items():
            found |= strings_in(key, seen) | strings_in(item, seen)
    elif isinstance(value, (list, tuple, set, frozenset)):
        for item in value:
            found |= strings_in(item, seen)
    elif callable(value):
        for mark in getattr(value, "pytestmark", []):
            found |= strings_in(list(mark.args), seen)
    return found


def judged_ids() -> set[str]:
    sys.path.insert(0, str(TESTS))
    try:
        found: set[str] = set()
        for path in sorted(TESTS.glob("test_*claims.py")):
            module = importlib.import_module(path.stem)
            found |= strings_in(list(vars(module).values())) | {path.read_text()}
        return found
    finally:
        sys.path.remove(str(TESTS))


def untested_claims(judged: set[str]) -> list[str]:
    text = "\n".join(judged)
    return [f"{name}: {claim_id}" for name, experiment in sorted(registry.experiments().items())
            for claim_id in experiment.spec.claims
            if claim_id not in judged and f'"{claim_id}"' not in text]


def test_every_registered_claim_has_a_test():
    assert untested_claims(judged_ids()) == []


def test_a_claim_without_a_test_is_found():
    judged = {s.replace("correlations-off-diagonal", "x") for s in judged_ids()}
    assert "symmetry: correlations-off-diagonal" in untested_claims(judged)
