"""Training: the Trainer loop and atomic, verifiable checkpoints."""

from sglab.train.loop import Trainer, train

__all__ = ["Trainer", "train"]
