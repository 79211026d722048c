"""Models: one configurable Transformer stack and its parts."""

from sglab.models.transformer import Transformer, TransformerConfig, build_model

__all__ = ["Transformer", "TransformerConfig", "build_model"]
