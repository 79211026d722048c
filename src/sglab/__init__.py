"""sglab: a lab for studying systematic generalization in neural networks.

Data flows one way: config -> task + model -> Trainer -> run directory (+ store)
-> analysis -> report. Experiments compose these pieces.

From Python: :func:`train_run`, :func:`load_run`, :func:`runs` (see :mod:`sglab.api`);
they are imported on first use, so ``import sglab`` stays light.
"""

from sglab.errors import SglabError

__all__ = ["SglabError", "__version__", "load_run", "runs", "train_run"]
__version__ = "0.1.0"

_API = ("load_run", "runs", "train_run", "Run")


def __getattr__(name: str):
    if name in _API:
        from sglab import api

        return getattr(api, name)
    raise AttributeError(f"module 'sglab' has no attribute {name!r}")
