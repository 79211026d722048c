"""One Transformer stack; every architectural choice of the seeds is a config switch.

Block with pre-LN (nanoGPT):   x = x + attn(ln_1(x));  x = x + mlp(ln_2(x))
Block with post-LN:            x = ln_1(x + attn(x));  x = ln_2(x + mlp(x))
Residual ablation of a layer (Zuo & Guerzhoy, Sec. 5) removes both of its
residual connections: x = attn(ln_1(x)); x = mlp(ln_2(x)).

Switches for the one-layer topic model of Li et al. (2023),
f(X) = W_E^T (W_V W_E X) Attn(W_E X) + b: ``ffn: none`` (no MLP sub-block),
``embedding: one_hot`` (W_E = I, frozen; needs d_model = vocabulary size),
``uniform_attention`` (W_Q = W_K = 0, frozen), ``identity_value`` (W_V = I, frozen),
``attention_out_projection: false`` (no W_O) and ``output_bias`` (b).

Hook names: ``embed``, ``blocks.{i}.attn.pattern``, ``blocks.{i}.attn_out``,
``blocks.{i}.resid_mid``, ``blocks.{i}.mlp.hidden``, ``blocks.{i}.mlp_out``,
``blocks.{i}.resid_post`` (the block output), ``final`` (input of the unembedding).
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field, model_validator
from torch import nn

from sglab import registry
from sglab.config import ModelConfig
from sglab.errors import SglabError
from sglab.models.attention import CrossAttention, SelfAttention
from sglab.models.hookpoint import HookPoint
from sglab.models.init import apply_init
from sglab.models.positional import AbsolutePositions, Rotary
from sglab.models.relative import RelativeSelfAttention


class TransformerConfig(ModelConfig):
    name: Literal["transformer"] = "transformer"
    n_layers: int = Field(4, ge=1)
    n_heads: int = Field(4, ge=1)
    d_model: int = Field(128, ge=1)
    d_ff: int | None = Field(None, ge=1, description="MLP width (null = 4 * d_model).")
    pos_encoding: Literal["learned", "sinusoidal", "none", "rotary", "relative"] = Field(
        "learned", description="relative: Transformer-XL relative attention in every layer, "
                               "no absolute positions.")
    attention_mask: Literal["causal", "bidirectional"] = "causal"
    norm: Literal["pre", "post", "none"] = "pre"
    residual_ablation: list[int] = Field(
        default_factory=list, description="Layers whose two residual connections are removed."
    )
    activation: Literal["gelu", "relu"] = "gelu"
    init: Literal["default", "gamma"] = "default"
    init_gamma: float = Field(0.5, gt=0, description="sigma = d_in^-gamma when init=gamma.")
    tie_embeddings: bool = True
    dropout: float = Field(0.0, ge=0, lt=1)
    bias: bool = False
    max_len: int | None = Field(None, ge=1, description="Longest input (null = the task's).")
    ffn: Literal["dense", "none"] = Field("dense", description="none: blocks have no MLP sub-block.")
    embedding: Literal["learned", "one_hot"] = Field(
        "learned", description="one_hot: token embeddings fixed to the identity (d_model must "
                               "equal the vocabulary size); tied decoder = identity too.")
    uniform_attention: bool = Field(
        False, description="Fix W_Q = W_K = 0: every query attends uniformly to the allowed keys.")
    identity_value: bool = Field(False, description="Fix the value projection W_V to the identity.")
    attention_out_projection: bool = Field(
        True, description="false: no output projection W_O after attention (heads concatenated).")
    output_bias: bool = Field(False, description="A trainable bias b added to the output logits.")

    @model_validator(mode="after")
    def _check(self):
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} must be divisible by n_heads={self.n_heads}")
        if self.pos_encoding == "rotary" and (self.d_model // self.n_heads) % 2:
            raise ValueError("rotary positions need an even head dimension (d_model / n_heads)")
        bad = [i for i in self.residual_ablation if not 0 <= i < self.n_layers]
        if bad:
            raise ValueError(
                f"residual_ablation has layer indices {bad} outside 0..{self.n_layers - 1}"
            )
        if self.ffn == "none" and self.d_ff is not None:
            raise ValueError(f"d_ff={self.d_ff} has no effect with ffn=none; remove d_ff")
        return self


class MLP(nn.Module):
    def __init__(self, d_model: int, d_ff: int, bias: bool, activation: str, dropout: float):
        super().__init__()
        self.up = nn.Linear(d_model, d_ff, bias=bias)
        self.out = nn.Linear(d_ff, d_model, bias=bias)
        self.act = nn.GELU() if activation == "gelu" else nn.ReLU()
        self.hidden = HookPoint()
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        return self.drop(self.out(self.hidden(self.act(self.up(x)))))


def _norm(config: TransformerConfig) -> nn.Module:
    if config.norm == "none":
        return nn.Identity()
    return nn.LayerNorm(config.d_model, bias=config.bias)


class Block(nn.Module):
    """One layer. ``cross_attention=True`` adds an encoder-decoder attention sub-block
    between self-attention and the MLP (the decoder layer of a seq2seq model):
    post-LN  x = ln_cross(x + cross(x, memory)),  pre-LN  x = x + cross(ln_cross(x), memory).
    """

    def __init__(self, config: TransformerConfig, index: int, rotary: nn.Module | None,
                 cross_attention: bool = False):
        super().__init__()
        self.norm_placement = config.norm
        self.residual = index not in config.residual_ablation
        has_mlp = config.ffn == "dense"
        self.ln_1, self.ln_2 = _norm(config), _norm(config) if has_mlp else nn.Identity()
        causal = config.attention_mask == "causal"
        if config.pos_encoding == "relative":
            self.attn = RelativeSelfAttention(config.d_model, config.n_heads, causal, config.bias,
                                              config.dropout, config.attention_out_projection)
        else:
            self.attn = SelfAttention(config.d_model, config.n_heads, causal, config.bias,
                                      config.dropout, rotary, config.attention_out_projection)
        self.mlp = (MLP(config.d_model, config.d_ff or 4 * config.d_model, config.bias,
                        config.activation, config.dropout) if has_mlp else None)
        self.resid_drop = nn.Dropout(config.dropout)
        self.attn_out, self.resid_mid = HookPoint(), HookPoint()
        self.mlp_out, self.resid_post = HookPoint(), HookPoint()
        self.cross_attn = (CrossAttention(config.d_model, config.n_heads, config.bias,
                                          config.dropout) if cross_attention else None)
        if cross_attention:
            self.ln_cross, self.cross_out = _norm(config), HookPoint()

    def _cross(self, x: torch.Tensor, memory: torch.Tensor | None,
               memory_mask: torch.Tensor | None) -> torch.Tensor:
        if self.cross_attn is None:
            return x
        if memory is None:
            raise ValueError("a block with cross-attention needs the encoder output (memory)")
        skip = 1.0 if self.residual else 0.0
        if self.norm_placement == "post":
            h = self.cross_out(self.resid_drop(self.cross_attn(x, memory, memory_mask)))
            return self.ln_cross(skip * x + h)
        h = self.cross_out(self.resid_drop(self.cross_attn(self.ln_cross(x), memory, memory_mask)))
        return skip * x + h

    def forward(self, x: torch.Tensor, key_padding_mask: torch.Tensor | None,
                memory: torch.Tensor | None = None,
                memory_mask: torch.Tensor | None = None) -> torch.Tensor:
        skip = 1.0 if self.residual else 0.0
        if self.norm_placement == "post":
            x = self.ln_1(skip * x + self.attn_out(self.resid_drop(self.attn(x, key_padding_mask))))
            x = self.resid_mid(self._cross(x, memory, memory_mask))
            if self.mlp is None:
                return self.resid_post(x)
            return self.resid_post(self.ln_2(skip * x + self.mlp_out(self.mlp(x))))
        h = self.attn_out(self.resid_drop(self.attn(self.ln_1(x), key_padding_mask)))
        x = self.resid_mid(self._cross(x + h if self.residual else h, memory, memory_mask))
        if self.mlp is None:
            return self.resid_post(x)
        h = self.mlp_out(self.mlp(self.ln_2(x)))
        return self.resid_post(x + h if self.residual else h)


class Transformer(nn.Module):
    """Decoder-only (causal) or encoder-only (bidirectional) language model."""

    def __init__(self, config: TransformerConfig, vocab_size: int, max_len: int):
        super().__init__()
        self.config = config
        self.is_causal = config.attention_mask == "causal"
        max_len = config.max_len or max_len
        self.tok_emb = nn.Embedding(vocab_size, config.d_model)
        self.positions = (
            AbsolutePositions(config.pos_encoding, max_len, config.d_model)
            if config.pos_encoding in ("learned", "sinusoidal") else None
        )
        rotary = (Rotary(config.d_model // config.n_heads, max_len)
                  if config.pos_encoding == "rotary" else None)
        self.embed = HookPoint()
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(Block(config, i, rotary) for i in range(config.n_layers))
        self.ln_f = _norm(config) if config.norm == "pre" else nn.Identity()
        self.final = HookPoint()
        self.head = None if config.tie_embeddings else nn.Linear(config.d_model, vocab_size, bias=False)
        apply_init(self, config.init, config.init_gamma, config.n_layers)
        if config.embedding == "one_hot":
            if config.d_model != vocab_size:
                raise SglabError(
                    f"model.embedding=one_hot needs model.d_model equal to the vocabulary size "
                    f"({vocab_size}), got d_model={config.d_model}; set model.d_model={vocab_size}"
                    + (" and model.n_heads to a divisor of it" if vocab_size % config.n_heads else "")
                )
            with torch.no_grad():
                self.tok_emb.weight.copy_(torch.eye(vocab_size))
            self.tok_emb.weight.requires_grad_(False)
        for block in self.blocks:
            block.attn.freeze(config.uniform_attention, config.identity_value)
        self.output_bias = nn.Parameter(torch.zeros(vocab_size)) if config.output_bias else None

    def forward(self, input_ids: torch.Tensor,
                key_padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        x = self.tok_emb(input_ids)
        if self.positions is not None:
            x = self.positions(x)
        x = self.drop(self.embed(x))
        for block in self.blocks:
            x = block(x, key_padding_mask)
        x = self.final(self.ln_f(x))
        logits = x @ self.tok_emb.weight.T if self.head is None else self.head(x)
        return logits if self.output_bias is None else logits + self.output_bias

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def flops_per_token(self, length: int) -> float:
        """Training FLOPs per token (forward + backward = 3x forward), PaLM appendix B style."""
        c = self.config
        d_ff = 0 if c.ffn == "none" else c.d_ff or 4 * c.d_model
        matmul_params = c.n_layers * (4 * c.d_model**2 + 2 * c.d_model * d_ff)
        matmul_params += self.tok_emb.weight.numel()  # unembedding
        attention = c.n_layers * 2 * length * c.d_model  # QK^T and PV per token
        return 6 * matmul_params + 6 * attention


@registry.register("model", "transformer", TransformerConfig, "one configurable transformer stack")
def make_transformer(config: TransformerConfig, vocab_size: int, max_len: int) -> Transformer:
    return Transformer(config, vocab_size, max_len)


def build_model(config: ModelConfig, vocab_size: int, max_len: int) -> nn.Module:
    return registry.entry("model", config.name).factory(config, vocab_size, max_len)


__all__ = ["Transformer", "TransformerConfig", "build_model"]
