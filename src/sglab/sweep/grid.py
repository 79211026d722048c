"""Grid x seeds expansion.

A sweep file::

    name: pe-vs-nope
    base:                      # a partial RunConfig
      task: {name: addition}
      train: {steps: 2000}
    grid:                      # dotted key -> list of values; the product is taken
      model.pos_encoding: [learned, none]
      model.residual_ablation: [[], [0], [0, 1]]
    seeds: [0, 1, 2]           # or an integer n for seeds 0..n-1
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator

from sglab.config import RunConfig, StrictModel, build_run_config, load_yaml, validate
from sglab.errors import SglabError


class SweepSpec(StrictModel):
    name: str = "sweep"
    base: dict[str, Any] = Field(default_factory=dict)
    grid: dict[str, list[Any]] = Field(default_factory=dict)
    seeds: list[int] = Field(default_factory=lambda: [0])

    @field_validator("name")
    @classmethod
    def _plain_name(cls, name: str) -> str:
        """The name names files (results/NAME, the tag sweep/NAME): one plain file name."""
        if (not name.strip() or name in (".", "..") or name.startswith(".")
                or any(c in name for c in "/\\") or any(ord(c) < 32 for c in name)):
            raise ValueError(f"{name!r} is not a plain file name: a sweep's name names its "
                             "output directory (results/NAME), so it has no '/' or '\\', "
                             "does not start with '.' and is not empty; e.g. pe-vs-nope")
        return name

    @field_validator("seeds", mode="before")
    @classmethod
    def _seed_count(cls, value):
        if isinstance(value, int):
            if value < 1:
                raise ValueError("seeds must be a positive count or a list of seeds")
            return list(range(value))
        return value

    @field_validator("grid")
    @classmethod
    def _non_empty(cls, grid):
        empty = [k for k, v in grid.items() if not v]
        if empty:
            raise ValueError(f"grid keys {empty} have no values")
        return grid


def expand(spec: SweepSpec, overrides: list[str] | None = None) -> list[RunConfig]:
    """All configs of the grid, seeds innermost. Every config is validated first,
    so a bad value fails before anything runs or is written."""
    keys = list(spec.grid)
    configs = []
    for values in itertools.product(*(spec.grid[k] for k in keys)):
        cell = dict(zip(keys, values))
        for seed in spec.seeds:
            base = build_run_config(spec.base, [*(overrides or [])]).to_dict()
            configs.append(build_run_config(base, {**cell, "seed": seed}))
    return configs


def load_sweep(path: str | Path) -> SweepSpec:
    """The sweep file at ``path``; an empty one, or one with neither ``base`` nor ``grid``,
    is an error (it would otherwise train one run of the default config)."""
    data = load_yaml(path)
    if not data.get("base") and not data.get("grid"):
        raise SglabError(
            f"sweep file {str(path)!r} is empty or has neither 'base' nor 'grid'; write for "
            "example:\n  name: pe\n  base: {task: {name: addition}}\n  grid: "
            "{model.pos_encoding: [learned, none]}\n  seeds: 3")
    return validate(SweepSpec, data)
