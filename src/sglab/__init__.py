"""sglab: a lab for studying systematic generalization in neural networks.

Data flows one way: config -> task + model -> Trainer -> run directory (+ store)
-> analysis -> report. Experiments compose these pieces.
"""

from sglab.errors import SglabError

__all__ = ["SglabError", "__version__"]
__version__ = "0.1.0"
