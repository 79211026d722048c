"""LSTM encoder-decoder of Lake and Baroni (2018), the recurrent SCAN model of thesis
Sec. 3.3 / App. B.3.7 (Fig. 3.5, B.8): "a 2-layer LSTM encoder-decoder, embedding 16,
teacher forcing with probability 0.5"; the weight-mask code (``models/encoder_decoder.py``
of the thesis's weight-mask repository) adds hidden size 200 and dropout 0.5.

    encoder:  (h, c) = LSTM_enc(Drop(E_src[x_1 .. x_n <eos>]))      final state, per layer
    decoder:  o_t = LSTM_dec(Drop(E_tgt[y_{t-1}]), state_{t-1}),    state_0 = (h, c)
              logits_t = W_out o_t + b                             (``output``)

* No attention: the encoder's final state (of each layer) is the decoder's initial state.
  Padded source positions are skipped (packed sequences), so a row's state is that of its
  own last token.
* Dropout (``dropout``) on the embeddings of both sides and between stacked layers.
* ``teacher_forcing``: the probability that a training batch is teacher-forced (the
  decoder reads ``<eos> y_1 .. y_m``); otherwise the decoder reads its own previous argmax
  for the whole batch (one draw per batch from torch's generator, as the code draws one
  per batch). Evaluation is always teacher-forced, which scores greedy decoding exactly
  (:mod:`sglab.tasks.seq2seq`); :meth:`LSTMSeq2Seq.generate` decodes step by step.
* Init as the code's LSTM cell: per gate N(0, s) with s = sqrt(2 / (in + H)) / sqrt(2)
  on the input weights and sqrt(1 / H) / sqrt(2) on the recurrent ones, the candidate
  (cell) gate's input weights times tanh's gain and its recurrent block orthogonal with
  gain 5/3 / sqrt(2); forget-gate bias 1, other biases 0 (``bias_hh`` 0). The output
  layer and embeddings keep PyTorch's defaults.

Hook names: ``final`` (the decoder's top-layer outputs, before ``output``).
"""

from __future__ import annotations

import math
from typing import ClassVar, Literal

import torch
from pydantic import Field
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence

from sglab import registry
from sglab.config import ModelConfig
from sglab.errors import SglabError
from sglab.models.dropout import Dropout
from sglab.models.hookpoint import HookPoint
from sglab.models.seq2seq import greedy_decode


class LSTMSeq2SeqConfig(ModelConfig):
    name: Literal["lstm_seq2seq"] = "lstm_seq2seq"
    encoder_decoder: ClassVar[bool] = True
    d_model: int = Field(200, ge=1, description="Hidden units of each LSTM layer.")
    n_layers: int = Field(2, ge=1, description="Layers of the encoder and of the decoder each.")
    embedding_width: int = Field(16, ge=1, description="Token embedding width (both sides).")
    dropout: float = Field(0.5, ge=0, lt=1, description="On the embeddings and between layers.")
    teacher_forcing: float = Field(
        0.5, ge=0, le=1, description="Probability that a training batch is teacher-forced; "
                                     "otherwise the decoder reads its own previous argmax.")


@torch.no_grad()
def init_lstm_like_code(lstm: nn.LSTM) -> None:
    """The weight-mask code's LSTM cell init on every layer of ``lstm`` (gates i, f, g, o)."""
    hidden = lstm.hidden_size
    sigmoid, tanh = nn.init.calculate_gain("sigmoid"), nn.init.calculate_gain("tanh")
    for layer in range(lstm.num_layers):
        w_ih, w_hh = getattr(lstm, f"weight_ih_l{layer}"), getattr(lstm, f"weight_hh_l{layer}")
        inputs = w_ih.shape[1]
        w_hh.normal_(0, math.sqrt(1 / hidden) / math.sqrt(2) * sigmoid)
        w_ih.normal_(0, math.sqrt(2 / (inputs + hidden)) / math.sqrt(2) * sigmoid)
        cell = slice(2 * hidden, 3 * hidden)
        nn.init.orthogonal_(w_hh[cell], gain=tanh / math.sqrt(2))
        w_ih[cell] *= tanh / sigmoid
        getattr(lstm, f"bias_hh_l{layer}").zero_()
        bias = getattr(lstm, f"bias_ih_l{layer}")
        bias.zero_()
        bias[hidden: 2 * hidden] = 1.0


class LSTMSeq2Seq(nn.Module):
    is_causal = True  # the decoder reads left to right; the Trainer needs no prefix expansion

    def __init__(self, config: LSTMSeq2SeqConfig, vocab_size: int):
        super().__init__()
        self.config = config
        between = config.dropout if config.n_layers > 1 else 0.0
        self.source_embedding = nn.Embedding(vocab_size, config.embedding_width)
        self.target_embedding = nn.Embedding(vocab_size, config.embedding_width)
        self.encoder = nn.LSTM(config.embedding_width, config.d_model, config.n_layers,
                               batch_first=True, dropout=between)
        self.decoder = nn.LSTM(config.embedding_width, config.d_model, config.n_layers,
                               batch_first=True, dropout=between)
        self.output = nn.Linear(config.d_model, vocab_size)
        self.drop = Dropout(config.dropout)
        self.final = HookPoint()
        init_lstm_like_code(self.encoder)
        init_lstm_like_code(self.decoder)

    def encode(self, source_ids: torch.Tensor, source_mask: torch.Tensor | None):
        """The encoder's final (h, c), each [layers, batch, d_model], at each row's last token."""
        batch, length = source_ids.shape
        lengths = (source_mask.long().sum(1) if source_mask is not None
                   else torch.full((batch,), length, dtype=torch.long))
        packed = pack_padded_sequence(self.drop(self.source_embedding(source_ids)),
                                      lengths.cpu(), batch_first=True, enforce_sorted=False)
        return self.encoder(packed)[1]

    def decode_step(self, ids: torch.Tensor, state):
        """Logits [batch, t, vocab] after reading ``ids`` [batch, t], and the new state."""
        outputs, state = self.decoder(self.drop(self.target_embedding(ids)), state)
        return self.output(self.final(outputs)), state

    def forward(self, input_ids: torch.Tensor, key_padding_mask: torch.Tensor | None = None,
                source_ids: torch.Tensor | None = None,
                source_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Logits [batch, len(input_ids), vocab] for the decoder input ``<eos> y_1 .. y_m``:
        teacher-forced, or in training with probability 1 - ``teacher_forcing`` from the
        decoder's own previous argmax (the first input, ``<eos>``, is always given)."""
        if source_ids is None:
            raise SglabError("model.name=lstm_seq2seq needs a sequence-to-sequence task that "
                             "supplies source_ids, e.g. task.name=scan")
        state = self.encode(source_ids, source_mask)
        forced = (not self.training or self.config.teacher_forcing >= 1
                  or float(torch.rand(())) < self.config.teacher_forcing)
        if forced:  # padded decoder steps come after a row's targets and change nothing
            return self.decode_step(input_ids, state)[0]
        ids, logits = input_ids[:, :1], []
        for _ in range(input_ids.shape[1]):
            step, state = self.decode_step(ids, state)
            logits.append(step)
            ids = step.argmax(-1)
        return torch.cat(logits, 1)

    @torch.no_grad()
    def generate(self, source_ids: torch.Tensor, source_mask: torch.Tensor | None,
                 max_steps: int, eos_id: int, suppress_eos: bool = False) -> list[list[int]]:
        """Greedy decoding from ``<eos>`` (= BOS) for at most ``max_steps`` tokens
        (:func:`sglab.models.seq2seq.greedy_decode`), one decoder step per token."""
        state = self.encode(source_ids, source_mask)

        def next_logits(ids: torch.Tensor) -> torch.Tensor:  # reads only the newest token
            nonlocal state
            logits, state = self.decode_step(ids[:, -1:], state)
            return logits[:, -1]

        return greedy_decode(next_logits, source_ids.shape[0], max_steps, eos_id, suppress_eos,
                             source_ids.device)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


@registry.register("model", "lstm_seq2seq", LSTMSeq2SeqConfig,
                   "LSTM encoder-decoder without attention (Lake & Baroni; thesis Fig. 3.5)")
def make_lstm_seq2seq(config: LSTMSeq2SeqConfig, vocab_size: int, max_len: int) -> LSTMSeq2Seq:
    return LSTMSeq2Seq(config, vocab_size)


__all__ = ["LSTMSeq2Seq", "LSTMSeq2SeqConfig", "init_lstm_like_code"]
