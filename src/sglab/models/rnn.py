"""LSTM and bidirectional LSTM sequence classifiers (the NDR baselines, thesis Ch. 5).

The sequence is read left to right (and right to left for ``lstm`` with
``bidirectional: true``); the class logits come from the final state: the last real
token's output (forward direction; with ``end_token``, the end token's) concatenated
with the first token's output of the backward direction. Returns logits of shape
[batch, 1, vocab] (the classifier contract of
:class:`sglab.tasks.base.SequenceClassificationTask`).

Three switches give the sequence classifier of the CTL++ code (thesis App. E.1.2,
``models/encoder_decoder.py``): ``end_token`` appends a learned end-of-sequence token
after each row's last real token (its own embedding row), ``embedding_width`` embeds
at the full state size rather than the per-direction one (Table E.1: 408k parameters),
and ``final_dropout: false`` drops the embeddings only, not the final state.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import Field, model_validator
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from sglab import registry
from sglab.config import ModelConfig, check_switches
from sglab.models.dropout import Dropout
from sglab.models.hookpoint import HookPoint


class LSTMClassifierConfig(ModelConfig):
    name: Literal["lstm"] = "lstm"
    d_model: int = Field(200, ge=1, description="Hidden units in total (split over directions).")
    n_layers: int = Field(1, ge=1)
    bidirectional: bool = False
    dropout: float = Field(0.5, ge=0, lt=1, description="On the embeddings and the final state.")
    final_dropout: bool = Field(True, description="Dropout on the final state too; false: on "
                                                  "the embeddings only (the CTL++ code).")
    embedding_width: int | None = Field(
        None, ge=1, description="Width of the token embeddings; null: the hidden size of one "
                                "direction (the CTL++ code: the whole state, d_model).")
    end_token: bool = Field(False, description="Append a learned end token after each row's "
                                               "last real token (the CTL++ code's encoder).")
    classifier: Literal[True] = Field(True, description="Always a sequence classifier.")
    outputs: int = Field(1, ge=1, description="Answer slots read from the final state "
                                              "(logits [batch, outputs, vocab]).")
    input_mode: Literal["tokens", "repeat"] = Field(
        "tokens", description="tokens: one embedded token a step; repeat: the one-hot "
                              "positions of the whole input (padding = zeros) as one vector, "
                              "fed repeat_steps times (thesis B.3 add/mul and double addition).")
    repeat_steps: int = Field(3, ge=1, description="Steps of input_mode=repeat.")
    schedule: Literal["together", "forced"] = Field(
        "together", description="input_mode=repeat: together = all positions on every step, "
                                "read at the last; forced = the first half of the positions "
                                "on the first half of the steps (read the first half of the "
                                "slots there), then the second half, no state reset.")

    @model_validator(mode="after")
    def _check_switches(self):
        repeat = self.input_mode == "repeat"
        check_switches(self, {"repeat_steps": (repeat, "input_mode=repeat"),
                              "schedule": (repeat, "input_mode=repeat"),
                              "embedding_width": (not repeat, "input_mode=tokens"),
                              "end_token": (not repeat, "input_mode=tokens"),
                              "final_dropout": (self.dropout > 0, "dropout > 0")})
        if repeat and self.bidirectional:
            raise ValueError("input_mode=repeat reads one vector per step: set "
                             "bidirectional=false")
        if self.schedule == "forced" and (self.repeat_steps % 2 or self.outputs % 2):
            raise ValueError("schedule=forced splits the steps and the answer slots in two: set "
                             f"an even repeat_steps and outputs (got {self.repeat_steps}, "
                             f"{self.outputs})")
        return self

    @model_validator(mode="after")
    def _check_directions(self):
        if self.bidirectional and self.d_model % 2:
            raise ValueError(f"bidirectional=true splits d_model over two directions: set an even "
                             f"d_model (got {self.d_model})")
        return self


class LSTMClassifier(nn.Module):
    is_causal = False

    def __init__(self, config: LSTMClassifierConfig, vocab_size: int, width: int = 0):
        super().__init__()
        self.config, self.vocab_size, self.width = config, vocab_size, width
        directions = 2 if config.bidirectional else 1
        if config.d_model % directions:
            raise ValueError("a bidirectional LSTM needs an even d_model")
        hidden = config.d_model // directions
        embedding_width = config.embedding_width or hidden
        if config.input_mode == "tokens":  # the end token is the extra last row
            self.embedding = nn.Embedding(vocab_size + int(config.end_token), embedding_width)
        inputs = embedding_width if config.input_mode == "tokens" else width * (vocab_size - 1)
        self.lstm = nn.LSTM(inputs, hidden, config.n_layers, batch_first=True,
                            bidirectional=config.bidirectional,
                            dropout=config.dropout if config.n_layers > 1 else 0.0)
        self.drop = Dropout(config.dropout)
        self.final = HookPoint()
        self.head = nn.Linear(config.d_model, vocab_size * config.outputs)
        self.hidden = hidden

    def read(self, state: torch.Tensor) -> torch.Tensor:
        if self.config.final_dropout:
            state = self.drop(state)
        return self.head(self.final(state)).view(len(state), self.config.outputs, -1)

    def forward_repeat(self, input_ids: torch.Tensor) -> torch.Tensor:
        """input_mode=repeat: the whole input as one vector per step."""
        cfg = self.config

        def vector(ids):
            return F.one_hot(ids, self.vocab_size)[..., 1:].flatten(1).float()

        if cfg.schedule == "together":
            steps = vector(input_ids)[:, None].expand(-1, cfg.repeat_steps, -1)
            return self.read(self.lstm(steps)[0][:, -1])
        half, steps, slots = self.width // 2, cfg.repeat_steps // 2, cfg.outputs // 2
        position = torch.arange(self.width, device=input_ids.device)
        first = vector(torch.where(position < half, input_ids, 0))[:, None].expand(-1, steps, -1)
        second = vector(torch.where(position >= half, input_ids, 0))[:, None].expand(-1, steps, -1)
        outputs = self.lstm(torch.cat([first, second], 1))[0]
        return torch.cat([self.read(outputs[:, steps - 1])[:, :slots],
                          self.read(outputs[:, -1])[:, slots:]], 1)

    def forward(self, input_ids: torch.Tensor,
                key_padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        if self.config.input_mode == "repeat":
            return self.forward_repeat(input_ids)
        batch, length = input_ids.shape
        lengths = (key_padding_mask.long().sum(1) if key_padding_mask is not None
                   else torch.full((batch,), length, dtype=torch.long))
        if self.config.end_token:  # id vocab_size at each row's first padded column
            input_ids = torch.cat([input_ids, input_ids.new_zeros(batch, 1)], 1)
            input_ids = input_ids.scatter(1, lengths[:, None].to(input_ids.device),
                                          self.vocab_size)
            lengths, length = lengths + 1, length + 1
        packed = pack_padded_sequence(self.drop(self.embedding(input_ids)), lengths.cpu(),
                                      batch_first=True, enforce_sorted=False)
        outputs, _ = pad_packed_sequence(self.lstm(packed)[0], batch_first=True,
                                         total_length=length)
        rows = torch.arange(batch, device=input_ids.device)
        state = outputs[rows, lengths.to(input_ids.device) - 1, : self.hidden]
        if self.lstm.bidirectional:
            state = torch.cat([state, outputs[:, 0, self.hidden:]], dim=-1)
        return self.read(state)


@registry.register("model", "lstm", LSTMClassifierConfig,
                   "LSTM / bidirectional LSTM sequence classifier")
def make_lstm(config: LSTMClassifierConfig, vocab_size: int, max_len: int) -> LSTMClassifier:
    return LSTMClassifier(config, vocab_size, max_len)
