"""Named experiments: one module per seed claim set (presets, runs, claims, report)."""

from sglab.experiments.base import Claim, Experiment, run_experiment

__all__ = ["Claim", "Experiment", "run_experiment"]
