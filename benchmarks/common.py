"""What the benchmark scripts share: the ``--quick`` switch every script has.

``--quick`` runs a script in seconds on a CPU (``tests/test_benchmarks.py`` runs each one
so), to show that it still works; its figures mean nothing.
"""

from __future__ import annotations

import argparse
from typing import Any


def parse_with_quick(parser: argparse.ArgumentParser, quick: dict[str, Any],
                     argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the arguments; with ``--quick``, every option named in ``quick`` (by its dest)
    that was left at its default takes the quick value instead."""
    parser.add_argument("--quick", action="store_true",
                        help="a few seconds on a CPU, to check that the script works: "
                             + ", ".join(f"{k.replace('_', '-')}={v}" for k, v in quick.items()))
    args = parser.parse_args(argv)
    if args.quick:
        for dest, value in quick.items():
            if getattr(args, dest) == parser.get_default(dest):
                setattr(args, dest, value)
    return args


def significant(value: float, digits: int = 3) -> float:
    """``value`` to ``digits`` significant figures: a slow rate (0.0225 steps/s) keeps its
    figures where rounding to decimals would make it 0."""
    return float(f"{value:.{digits}g}")
