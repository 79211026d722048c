"""Sweeps: grid x seeds expansion and backends that run the configs."""

from sglab.sweep.grid import SweepSpec, expand, load_sweep
from sglab.sweep.local import run_configs

__all__ = ["SweepSpec", "expand", "load_sweep", "run_configs"]
