"""How transformers learn topic structure (Li, Li & Risteski 2023): LDA data, pretrained models."""
