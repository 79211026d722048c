"""A small image CNN in the spirit of the thesis' simple CIFAR-10 CNN (Tab. B.4), sized
for square images given as rows of integer pixel ids (task ``digits``: 8x8, ids 0..16).

The ids become floats id / (vocab - 1) in [0, 1] on one input channel. Then 3x3 ReLU
convolutions (padding 1) with widths ``channels``, a 2x2 max-pool after every
``pool_every`` of them (and after the last one), dropout after each pool, ReLU linear
layers ``hidden`` (dropout after each) and the output layer: logits [batch, 1, classes]
(one answer slot, the classifier contract). Dropout follows
:func:`~sglab.models.dropout.apply_dropout`, so seeds can train together as an
ensemble. Layer names are ``convs.i``, ``hidden.i`` and ``output``: the class-removal
masks fix ``output.*`` to the full-task mask.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import Field, model_validator
from torch import nn

from sglab import registry
from sglab.config import ModelConfig
from sglab.errors import SglabError
from sglab.models.dropout import apply_dropout


class CNNConfig(ModelConfig):
    name: Literal["cnn"] = "cnn"
    channels: list[int] = Field(default_factory=lambda: [32, 64],
                                description="Output channels of the 3x3 convolutions.")
    pool_every: int = Field(2, ge=1, description="A 2x2 max-pool after every this many "
                                                 "convolutions (and after the last).")
    hidden: list[int] = Field(default_factory=lambda: [128],
                              description="Widths of the ReLU linear layers after the convs.")
    classes: int = Field(10, ge=2, description="Output classes.")
    dropout: float = Field(0.0, ge=0, lt=1, description="Dropout after each pool and hidden "
                                                        "layer (Tab. B.4 uses 0.25 and 0.5).")
    classifier: Literal[True] = True

    @model_validator(mode="after")
    def _check(self):
        if not self.channels or any(c < 1 for c in self.channels):
            raise ValueError("channels must list at least one width >= 1")
        if any(width < 1 for width in self.hidden):
            raise ValueError("hidden widths must be >= 1")
        return self


class CNN(nn.Module):
    is_causal = False

    def __init__(self, config: CNNConfig, vocab_size: int, max_len: int):
        super().__init__()
        side = math.isqrt(max_len)
        if side * side != max_len:
            raise SglabError(f"model cnn reads square images: the task's rows have {max_len} "
                             "pixels, not a square number")
        pools = math.ceil(len(config.channels) / config.pool_every)
        if side >> pools == 0:
            raise SglabError(f"model cnn: {pools} 2x2 pools shrink a {side}x{side} image to "
                             "nothing; use fewer convolutions or a larger pool_every")
        self.config, self.side, self.levels = config, side, max(vocab_size - 1, 1)
        widths = [1, *config.channels]
        self.convs = nn.ModuleList(nn.Conv2d(a, b, 3, padding=1)
                                   for a, b in zip(widths, widths[1:]))
        sizes = [config.channels[-1] * (side >> pools) ** 2, *config.hidden]
        self.hidden = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes, sizes[1:]))
        self.output = nn.Linear(sizes[-1], config.classes)

    def forward(self, input_ids: torch.Tensor, key_padding_mask=None) -> torch.Tensor:
        x = (input_ids.float() / self.levels).view(-1, 1, self.side, self.side)
        last = len(self.convs) - 1
        for i, conv in enumerate(self.convs):
            x = torch.relu(conv(x))
            if (i + 1) % self.config.pool_every == 0 or i == last:
                x = apply_dropout(F.max_pool2d(x, 2), self.config.dropout, self.training)
        x = x.flatten(1)
        for layer in self.hidden:
            x = apply_dropout(torch.relu(layer(x)), self.config.dropout, self.training)
        return self.output(x).unsqueeze(1)


@registry.register("model", "cnn", CNNConfig,
                   "small image CNN: 3x3 ReLU convs, max-pools, linear layers (thesis Tab. B.4)")
def make_cnn(config: CNNConfig, vocab_size: int, max_len: int) -> CNN:
    return CNN(config, vocab_size, max_len)
