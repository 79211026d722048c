"""Encoder-decoder Transformer of thesis chapter 4, built from the one stack's blocks.

Layers are :class:`~sglab.models.transformer.Block` with post-LN and ReLU; decoder
blocks add the cross-attention sub-block (thesis Sec. 4.1.2)::

    encoder:  x = LN(x + Drop(SelfAttn(x)));            x = LN(x + Drop(FF(x)))
    decoder:  y = LN(y + Drop(CausalSelfAttn(y)));      y = LN(y + Drop(CrossAttn(y, x)))
              y = LN(y + Drop(FF(y)))

* Tied decoder embeddings: ``logits = h E_out^T + b`` with the decoder's input table
  ``E_out`` and a learned bias ``b``; ``tie_embeddings: false`` gives a separate output
  layer ``logits = h W_out^T + b`` (``output``; the authors' weight-mask Transformer has
  one, thesis B.3.7, and weight masks never touch embedding tables).
* ``pos_encoding``: ``sinusoidal`` adds the absolute encoding (thesis Eq. C.1) only at
  the input of the first layer, encoder and decoder; ``relative`` uses Transformer-XL
  attention in every self-attention layer (symmetric in the encoder, causal in the
  decoder) and adds nothing to the embeddings; cross-attention never sees positions.
* ``universal``: one encoder and one decoder layer, each applied ``n_layers`` times
  with shared weights (no ACT, no step embedding; thesis Sec. 4.1.2).
* ``embedding_scaling`` (thesis Sec. 4.2.3, App. C.4), for ``H_i = a E[w_i] + c P_i``:

  ====  ===============================================  ======  =============
  teu   E ~ U(+-sqrt(6 / (d_model + N_words))) (Glorot)   a = sqrt(d_model)  c = 1
  none  E ~ N(0, 1) (PyTorch default)                     a = 1   c = 1
  ped   E ~ N(0, 2 / d_model) (Kaiming, as in the code)   a = 1   c = 1 / sqrt(d_model)
  ====  ===============================================  ======  =============

  The thesis writes PED's init as N(0, 1/sqrt(d_model)); the authors' code, which
  produced its numbers, calls ``kaiming_normal_`` (std sqrt(2 / d_model)). The scheme
  applies to the encoder and the decoder input embeddings; relative models have no P
  term, so there it only sets the token init and scale.

Other linear weights are Xavier-uniform, biases zero. Hook names: ``source_embed``,
``target_embed``, ``encoder.{i}.*`` and ``decoder.{i}.*`` (the Block names, plus
``decoder.{i}.cross_attn.pattern`` and ``decoder.{i}.cross_out``), ``final``.
"""

from __future__ import annotations

import math
from typing import ClassVar, Literal

import torch
from pydantic import Field, model_validator
from torch import nn

from sglab import registry
from sglab.config import ModelConfig, check_switches
from sglab.errors import SglabError
from sglab.models.dropout import Dropout
from sglab.models.hookpoint import HookPoint
from sglab.models.positional import sinusoidal_table
from sglab.models.transformer import Block, TransformerConfig


class Seq2SeqConfig(ModelConfig):
    name: Literal["seq2seq"] = "seq2seq"
    encoder_decoder: ClassVar[bool] = True
    n_layers: int = Field(3, ge=1, description="Layers in the encoder and in the decoder each.")
    n_heads: int = Field(8, ge=1)
    d_model: int = Field(128, ge=2)
    d_ff: int = Field(256, ge=1)
    pos_encoding: Literal["sinusoidal", "relative", "none"] = Field(
        "sinusoidal", description="sinusoidal: absolute encoding added at the first layer; "
                                  "relative: Transformer-XL attention in every self-attention.")
    universal: bool = Field(False, description="Share one layer across depth (encoder and decoder).")
    embedding_scaling: Literal["teu", "none", "ped"] = Field(
        "ped", description="teu: Glorot init, tokens x sqrt(d); none: N(0,1); "
                           "ped: Kaiming init, positions / sqrt(d).")
    dropout: float = Field(0.1, ge=0, lt=1)
    embedding_dropout: float | None = Field(
        None, ge=0, lt=1, description="Dropout on the embedded inputs of the encoder and the "
                                      "decoder; None: model.dropout. The thesis code drops "
                                      "them in its positional encoding, which its relative "
                                      "models replace by the identity (no dropout).")
    encoder_sos: bool = Field(False, description="Prepend a start token of its own to every "
                                                 "encoder input (<sos> x <eos>), as the thesis "
                                                 "code's encoder does.")
    bias: bool = Field(True, description="Biases in linear layers and LayerNorms.")
    tie_embeddings: bool = Field(True, description="Output logits from the decoder's input "
                                                   "embedding table; false: a separate "
                                                   "linear output layer (output.weight).")

    @model_validator(mode="after")
    def _check(self):
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} must be divisible by n_heads={self.n_heads}")
        return self

    @model_validator(mode="after")
    def _check_switches(self):
        """Fields set away from their default must have an effect (see check_switches)."""
        check_switches(self, {
            "universal": (self.n_layers > 1, "n_layers > 1"),
        })
        return self


def embedding_scales(scheme: str, d_model: int) -> tuple[float, float]:
    """(a, c) of H_i = a E[w_i] + c P_i (thesis Sec. 4.2.3)."""
    if scheme == "teu":
        return math.sqrt(d_model), 1.0
    if scheme == "ped":
        return 1.0, 1.0 / math.sqrt(d_model)
    if scheme == "none":
        return 1.0, 1.0
    raise ValueError(f"unknown embedding scaling {scheme!r}")


@torch.no_grad()
def init_embedding(weight: torch.Tensor, scheme: str) -> None:
    """Initialise an [N_words, d_model] table as the scheme prescribes (App. C.4)."""
    n_words, d_model = weight.shape
    if scheme == "teu":
        bound = math.sqrt(6.0 / (d_model + n_words))  # Glorot uniform
        weight.uniform_(-bound, bound)
    elif scheme == "ped":
        weight.normal_(0.0, math.sqrt(2.0 / d_model))  # kaiming_normal_ (fan_in = d_model)
    elif scheme == "none":
        weight.normal_(0.0, 1.0)
    else:
        raise ValueError(f"unknown embedding scaling {scheme!r}")


class Seq2SeqTransformer(nn.Module):
    is_causal = True  # the decoder is causal; the Trainer needs no prefix expansion

    def __init__(self, config: Seq2SeqConfig, vocab_size: int, max_len: int):
        super().__init__()
        self.config = config
        common = dict(n_layers=config.n_layers, n_heads=config.n_heads, d_model=config.d_model,
                      ffn={"kind": "dense", "d_ff": config.d_ff, "activation": "relu"},
                      block={"kind": "plain", "norm": "post"}, dropout=config.dropout,
                      bias=config.bias,
                      positions="relative" if config.pos_encoding == "relative" else "none")
        encoder_config = TransformerConfig(attention_mask="bidirectional", **common)
        decoder_config = TransformerConfig(attention_mask="causal", **common)
        unique = 1 if config.universal else config.n_layers
        self.encoder = nn.ModuleList(Block(encoder_config, i, None) for i in range(unique))
        self.decoder = nn.ModuleList(Block(decoder_config, i, None, cross_attention=True)
                                     for i in range(unique))
        # the encoder's start token, if any, is the id after the shared vocabulary
        self.source_embedding = nn.Embedding(vocab_size + int(config.encoder_sos), config.d_model)
        self.target_embedding = nn.Embedding(vocab_size, config.d_model)
        if config.tie_embeddings:
            self.output_bias = nn.Parameter(torch.zeros(vocab_size))
        else:
            self.output = nn.Linear(config.d_model, vocab_size)
        self.token_scale, self.position_scale = embedding_scales(config.embedding_scaling,
                                                                 config.d_model)
        if config.pos_encoding == "sinusoidal":
            self.register_buffer("positions", sinusoidal_table(max_len, config.d_model),
                                 persistent=False)
        else:
            self.positions = None
        self.drop = Dropout(config.dropout if config.embedding_dropout is None
                            else config.embedding_dropout)
        self.source_embed, self.target_embed, self.final = HookPoint(), HookPoint(), HookPoint()
        self._init_weights()

    def _init_weights(self) -> None:
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.xavier_uniform_(module.weight)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
        init_embedding(self.source_embedding.weight, self.config.embedding_scaling)
        init_embedding(self.target_embedding.weight, self.config.embedding_scaling)

    def layers(self, stack: nn.ModuleList):
        """The layer applied at each depth (the same one ``n_layers`` times if universal)."""
        return [stack[i % len(stack)] for i in range(self.config.n_layers)]

    def _embed(self, table: nn.Embedding, ids: torch.Tensor) -> torch.Tensor:
        x = self.token_scale * table(ids)  # H_i = a E[w_i] + c P_i
        if self.positions is not None:
            length = ids.shape[1]
            table_p = (self.positions if length <= len(self.positions)
                       else sinusoidal_table(length, self.config.d_model).to(x.device))
            x = x + self.position_scale * table_p[:length]
        return x

    def with_sos(self, source_ids: torch.Tensor, source_mask: torch.Tensor | None
                 ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The encoder input with the start token prepended (if ``encoder_sos``) and its mask
        (True: a token to attend to)."""
        if not self.config.encoder_sos:
            return source_ids, source_mask
        sos = torch.full_like(source_ids[:, :1], self.source_embedding.num_embeddings - 1)
        if source_mask is not None:
            source_mask = torch.cat([torch.ones_like(source_mask[:, :1]), source_mask], 1)
        return torch.cat([sos, source_ids], 1), source_mask

    def encode(self, source_ids: torch.Tensor, source_mask: torch.Tensor | None) -> torch.Tensor:
        """Encoder states of ``source_ids`` as given (see :meth:`with_sos`)."""
        x = self.drop(self.source_embed(self._embed(self.source_embedding, source_ids)))
        for block in self.layers(self.encoder):
            x = block(x, source_mask)
        return x

    def decode(self, input_ids: torch.Tensor, memory: torch.Tensor,
               source_mask: torch.Tensor | None) -> torch.Tensor:
        y = self.drop(self.target_embed(self._embed(self.target_embedding, input_ids)))
        for block in self.layers(self.decoder):
            y = block(y, None, memory, source_mask)
        if not self.config.tie_embeddings:
            return self.output(self.final(y))
        return self.final(y) @ self.target_embedding.weight.T + self.output_bias

    def forward(self, input_ids: torch.Tensor, key_padding_mask: torch.Tensor | None = None,
                source_ids: torch.Tensor | None = None,
                source_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Teacher-forced logits of the decoder input ``input_ids`` given the source."""
        if source_ids is None:
            raise SglabError("model.name=seq2seq needs a sequence-to-sequence task that supplies "
                             "source_ids, e.g. task.name=scan")
        source_ids, source_mask = self.with_sos(source_ids, source_mask)
        return self.decode(input_ids, self.encode(source_ids, source_mask), source_mask)

    @torch.no_grad()
    def generate(self, source_ids: torch.Tensor, source_mask: torch.Tensor | None,
                 max_steps: int, eos_id: int, suppress_eos: bool = False) -> list[list[int]]:
        """Greedy decoding from ``<eos>`` (= BOS) for at most ``max_steps`` tokens.

        Each sequence ends at its first EOS (not included in the result); with
        ``suppress_eos`` EOS is never chosen and every sequence runs ``max_steps``.
        The whole prefix is re-decoded at every step, which keeps relative distances
        exact without a cache (sequences here are short).
        """
        source_ids, source_mask = self.with_sos(source_ids, source_mask)
        memory = self.encode(source_ids, source_mask)
        return greedy_decode(lambda ids: self.decode(ids, memory, source_mask)[:, -1],
                             source_ids.shape[0], max_steps, eos_id, suppress_eos,
                             source_ids.device)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


def greedy_decode(next_logits, batch: int, max_steps: int, eos_id: int, suppress_eos: bool,
                  device) -> list[list[int]]:
    """Greedy decoding from ``<eos>`` (= BOS): ``next_logits(ids)`` gives the logits
    [batch, vocab] after the decoder inputs ``ids`` [batch, t]. Each sequence ends at its
    first EOS (not included); with ``suppress_eos`` it runs ``max_steps`` tokens."""
    ids = torch.full((batch, 1), eos_id, dtype=torch.long, device=device)
    done = torch.zeros(batch, dtype=torch.bool, device=device)
    for _ in range(max_steps):
        logits = next_logits(ids)
        if suppress_eos:
            logits[:, eos_id] = float("-inf")
        next_ids = logits.argmax(-1).masked_fill(done, eos_id)
        ids = torch.cat([ids, next_ids[:, None]], 1)
        done |= next_ids == eos_id
        if bool(done.all()):
            break
    return [row[: row.index(eos_id)] if eos_id in row else row for row in ids[:, 1:].tolist()]


@registry.register("model", "seq2seq", Seq2SeqConfig,
                   "encoder-decoder transformer (post-LN; absolute or relative, universal)")
def make_seq2seq(config: Seq2SeqConfig, vocab_size: int, max_len: int) -> Seq2SeqTransformer:
    return Seq2SeqTransformer(config, vocab_size, max_len)


__all__ = ["Seq2SeqConfig", "Seq2SeqTransformer", "embedding_scales", "greedy_decode",
           "init_embedding"]
