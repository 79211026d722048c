"""LSTM and bidirectional LSTM sequence classifiers (the NDR baselines, thesis Ch. 5).

The sequence is read left to right (and right to left for ``lstm`` with
``bidirectional: true``); the class logits come from the final state: the last real
token's output (forward direction) concatenated with the first token's output of the
backward direction. Returns logits of shape [batch, 1, vocab] (the classifier
contract of :class:`sglab.tasks.base.SequenceClassificationTask`).
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field, model_validator
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from sglab import registry
from sglab.config import ModelConfig
from sglab.models.dropout import Dropout
from sglab.models.hookpoint import HookPoint


class LSTMClassifierConfig(ModelConfig):
    name: Literal["lstm"] = "lstm"
    d_model: int = Field(200, ge=1, description="Hidden units in total (split over directions).")
    n_layers: int = Field(1, ge=1)
    bidirectional: bool = False
    dropout: float = Field(0.5, ge=0, lt=1, description="On the embeddings and the final state.")
    classifier: Literal[True] = Field(True, description="Always a sequence classifier.")

    @model_validator(mode="after")
    def _check_directions(self):
        if self.bidirectional and self.d_model % 2:
            raise ValueError(f"bidirectional=true splits d_model over two directions: set an even "
                             f"d_model (got {self.d_model})")
        return self


class LSTMClassifier(nn.Module):
    is_causal = False

    def __init__(self, config: LSTMClassifierConfig, vocab_size: int):
        super().__init__()
        directions = 2 if config.bidirectional else 1
        if config.d_model % directions:
            raise ValueError("a bidirectional LSTM needs an even d_model")
        hidden = config.d_model // directions
        self.embedding = nn.Embedding(vocab_size, hidden)
        self.lstm = nn.LSTM(hidden, hidden, config.n_layers, batch_first=True,
                            bidirectional=config.bidirectional,
                            dropout=config.dropout if config.n_layers > 1 else 0.0)
        self.drop = Dropout(config.dropout)
        self.final = HookPoint()
        self.head = nn.Linear(config.d_model, vocab_size)
        self.hidden = hidden

    def forward(self, input_ids: torch.Tensor,
                key_padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        batch, length = input_ids.shape
        lengths = (key_padding_mask.long().sum(1) if key_padding_mask is not None
                   else torch.full((batch,), length, dtype=torch.long))
        packed = pack_padded_sequence(self.drop(self.embedding(input_ids)), lengths.cpu(),
                                      batch_first=True, enforce_sorted=False)
        outputs, _ = pad_packed_sequence(self.lstm(packed)[0], batch_first=True,
                                         total_length=length)
        rows = torch.arange(batch, device=input_ids.device)
        state = outputs[rows, lengths.to(input_ids.device) - 1, : self.hidden]
        if self.lstm.bidirectional:
            state = torch.cat([state, outputs[:, 0, self.hidden:]], dim=-1)
        return self.head(self.final(self.drop(state)))[:, None]


@registry.register("model", "lstm", LSTMClassifierConfig,
                   "LSTM / bidirectional LSTM sequence classifier")
def make_lstm(config: LSTMClassifierConfig, vocab_size: int, max_len: int) -> LSTMClassifier:
    return LSTMClassifier(config, vocab_size)
