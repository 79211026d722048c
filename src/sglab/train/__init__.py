"""Training: the Trainer loop and atomic, verifiable checkpoints.

``Trainer`` and ``train`` load on first use, so light modules of the package (the run
log's switch, read by the CLI before any command runs) load without torch."""

__all__ = ["Trainer", "train"]


def __getattr__(name: str):
    if name in __all__:
        from sglab.train import loop

        return getattr(loop, name)
    raise AttributeError(f"module 'sglab.train' has no attribute {name!r}")
