"""Choosing names (hook points, weights, metrics) with shell-wildcard patterns.

Used by training (``train.weight_norms``) and analysis (``analysis.hooks``) alike, so it
lives below both.
"""

from __future__ import annotations

import fnmatch

from sglab.errors import SglabError


def match_names(names: list[str], patterns: list[str], what: str = "hook point") -> list[str]:
    """The names matched by shell-wildcard ``patterns``, in order, without repeats.

    A pattern that matches nothing is a SglabError that shows what names look like.
    """
    chosen: list[str] = []
    for pattern in patterns:
        matches = [n for n in names if fnmatch.fnmatchcase(n, pattern)]
        if not matches:
            sample = ", ".join(names[:8])
            raise SglabError(f"no {what} matches {pattern!r}; names look like: {sample}, ...")
        chosen.extend(m for m in matches if m not in chosen)
    return chosen


__all__ = ["match_names"]
