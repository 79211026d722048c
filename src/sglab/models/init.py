"""Weight initialization schemes.

``default``: GPT-2 / nanoGPT -- N(0, 0.02) for linear and embedding weights, the
output projections of attention and MLP scaled by 1/sqrt(2 * n_layers), zero biases.

``gamma``: the initialization rate of Zhang et al. -- every linear and embedding
weight ~ N(0, sigma^2) with sigma = d_in^-gamma, d_in the fan-in of the layer that
owns the weight. An embedding multiplies a one-hot input, so its d_in is the
number of rows (vocabulary size, or max_len for learned positions). Larger gamma
= smaller init; gamma = 0.5 is the usual 1/sqrt(d_in) scale. Biases are zero and
LayerNorm gains one in both schemes.

``torch``: every module keeps PyTorch's own initialization (embeddings N(0, 1),
linear layers Kaiming-uniform), as in the Neural Data Router code; the transformer
stack adds that code's Xavier init of geometric attention and copy-gated layers
(``models.transformer.init_ndr_weights``). With a copy gate, unit-scale embeddings
matter: a column that copies keeps its token identity at the scale of the updates.

``fan_in``: the init of the thesis Ch. 7 code -- linear weights N(0, 2 / (n_layers *
fan_in)), embeddings N(0, 1), zero biases (MoE and PKM layers init themselves).
"""

from __future__ import annotations

import math

from torch import nn


def init_std(module: nn.Module, gamma: float) -> float:
    """sigma = d_in^-gamma for an nn.Linear or nn.Embedding."""
    d_in = module.in_features if isinstance(module, nn.Linear) else module.num_embeddings
    return d_in ** (-gamma)


def apply_init(model: nn.Module, scheme: str, gamma: float, n_layers: int) -> None:
    if scheme == "torch":  # keep the modules' own initializations
        return
    residual_out_names = ("attn.out", "mlp.out")
    for name, module in model.named_modules():
        if isinstance(module, (nn.Linear, nn.Embedding)):
            if scheme == "gamma":
                std = init_std(module, gamma)
            elif scheme == "fan_in":  # thesis Ch. 7 code: sqrt(2 / (n_layers fan_in)); embeddings N(0, 1)
                std = (1.0 if isinstance(module, nn.Embedding)
                       else math.sqrt(2 / (n_layers * module.in_features)))
            elif name.endswith(residual_out_names):
                std = 0.02 / math.sqrt(2 * n_layers)
            else:
                std = 0.02
            nn.init.normal_(module.weight, mean=0.0, std=std)
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
