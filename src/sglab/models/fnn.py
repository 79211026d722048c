"""A feedforward classifier over fixed-width token inputs (thesis Ch. 3, App. B.3).

Each input position is one-hot encoded over the vocabulary without padding (a padding
token, a zeroed input, gives an all-zero block), the blocks are concatenated and fed
through ReLU layers ``hidden`` (``input_encoding: value`` feeds one number per position
instead, id / (vocab - 1): pixel intensities for images such as ``digits``); the output
layer gives ``outputs`` answer slots of vocabulary logits, [batch, outputs, vocab]
(``classes`` logits a slot instead when set). ``passes: per_pair`` runs the net twice,
once with the second half of the positions zeroed (read out: the first half of the
slots) and once with the first half zeroed (the second half of the slots): the double
addition FNN of the thesis, which cannot reuse weights within one pass. ``input_mean`` and
``input_std`` standardize the values. ``init: xavier`` (Xavier-normal weights with the ReLU
gain, zero biases) is the thesis code's initialization on permuted MNIST only, the one task
that calls it; its arithmetic FNNs keep PyTorch's Linear init, ``init: torch``.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import Field, model_validator
from torch import nn

from sglab import registry
from sglab.config import ModelConfig


class FNNConfig(ModelConfig):
    name: Literal["fnn"] = "fnn"
    hidden: list[int] = Field(default_factory=lambda: [400, 400, 200],
                              description="Widths of the ReLU hidden layers.")
    outputs: int = Field(2, ge=1, description="Answer slots (the task's answer digits).")
    classes: int | None = Field(None, ge=2, description="Logits per answer slot (null: the "
                                                       "vocabulary size; digits: 10).")
    passes: Literal["single", "per_pair"] = "single"
    input_encoding: Literal["one_hot", "value"] = Field(
        "one_hot", description="one_hot: a one-hot block per position; value: id / (vocab - 1) "
                               "per position (one input each, e.g. pixel intensities).")
    input_mean: float = Field(0.0, description="input_encoding value: subtracted from the values "
                                               "(the thesis code standardizes images).")
    input_std: float = Field(1.0, gt=0, description="input_encoding value: the values are "
                                                    "divided by it after input_mean.")
    init: Literal["torch", "xavier"] = Field(
        "torch", description="torch: PyTorch's Linear init (Kaiming-uniform weights and biases); "
                             "xavier: the thesis code's Xavier-normal weights with the ReLU gain "
                             "(gain 1 on the output layer) and zero biases.")
    classifier: Literal[True] = True

    @model_validator(mode="after")
    def _check(self):
        if any(width < 1 for width in self.hidden):
            raise ValueError("hidden widths must be >= 1")
        if self.input_encoding == "one_hot" and (self.input_mean, self.input_std) != (0.0, 1.0):
            raise ValueError("input_mean and input_std standardize input_encoding=value; "
                             "one-hot blocks are not standardized: drop them or set "
                             "input_encoding=value")
        if self.passes == "per_pair" and self.outputs % 2:
            raise ValueError(f"passes=per_pair splits the answer slots in two: set an even "
                             f"outputs (got {self.outputs})")
        return self


class FNN(nn.Module):
    is_causal = False

    def __init__(self, config: FNNConfig, vocab_size: int, width: int):
        super().__init__()
        self.config, self.vocab_size, self.width = config, vocab_size, width
        inputs = width * (vocab_size - 1) if config.input_encoding == "one_hot" else width
        self.classes = config.classes or vocab_size
        sizes = [inputs, *config.hidden, config.outputs * self.classes]
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes, sizes[1:]))
        if config.init == "xavier":
            for i, layer in enumerate(self.layers):
                last = i == len(self.layers) - 1
                nn.init.xavier_normal_(layer.weight,
                                       gain=1.0 if last else nn.init.calculate_gain("relu"))
                nn.init.zeros_(layer.bias)

    def net(self, input_ids: torch.Tensor) -> torch.Tensor:
        if self.config.input_encoding == "one_hot":
            x = F.one_hot(input_ids, self.vocab_size)[..., 1:].flatten(1).float()
        else:
            x = input_ids.float() / max(self.vocab_size - 1, 1)
            x = (x - self.config.input_mean) / self.config.input_std
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < len(self.layers) - 1:
                x = torch.relu(x)
        return x.view(-1, self.config.outputs, self.classes)

    def forward(self, input_ids: torch.Tensor, key_padding_mask=None) -> torch.Tensor:
        if self.config.passes == "single":
            return self.net(input_ids)
        half, slots = self.width // 2, self.config.outputs // 2
        position = torch.arange(self.width, device=input_ids.device)
        first = self.net(torch.where(position < half, input_ids, 0))
        second = self.net(torch.where(position >= half, input_ids, 0))
        return torch.cat([first[:, :slots], second[:, slots:]], 1)


@registry.register("model", "fnn", FNNConfig, "feedforward ReLU net over one-hot positions")
def make_fnn(config: FNNConfig, vocab_size: int, max_len: int) -> FNN:
    return FNN(config, vocab_size, max_len)
