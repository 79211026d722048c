"""Named experiments: one package per chapter; each experiment a module (runs, measurements,
figures) beside its spec file (presets and claims with the source's numbers)."""

from sglab.experiments.base import Experiment, run_experiment
from sglab.experiments.claims import Claim

__all__ = ["Claim", "Experiment", "run_experiment"]
