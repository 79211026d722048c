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

Switches of the Neural Data Router (thesis Ch. 5): ``attention: geometric``
(directional geometric attention, models/geometric.py) or ``abs_rel_gated``
(appendix D.2, models/abs_rel.py); ``copy_gate`` (copy-gated post-LN layer, Eqs.
5.1-5.5, see :class:`CopyGateBlock`); ``shared_layers`` (one layer applied
``n_layers`` times in training and ``eval_steps`` times in evaluation); ``readout``
(``first`` / ``last``: the model classifies the sequence from that column and
returns logits of shape [batch, 1, vocab]); ``act`` (adaptive computation time over
the shared layer's steps, thesis appendix D.1, see models/act.py: each column's output
is a halting-weighted mixture of its states, and the ponder loss is left in
``model.aux_loss`` for the Trainer).

Hook names: ``embed``, ``blocks.{i}.attn.pattern``, ``blocks.{i}.attn_out``,
``blocks.{i}.resid_mid``, ``blocks.{i}.mlp.hidden``, ``blocks.{i}.mlp_out``,
``blocks.{i}.resid_post`` (the block output), ``final`` (input of the unembedding);
copy-gated blocks add ``blocks.{i}.gate``; MoE blocks (``ffn: sigma_moe | switch | s_base``,
models/moe.py) add ``blocks.{i}.mlp.scores`` (selector logits), ``blocks.{i}.mlp.experts``
(the chosen experts) and ``blocks.{i}.mlp.gates`` (their selection weights), and leave
their balancing losses, summed over layers, in ``aux_loss``.
With shared layers ``i`` is the step: every step has its own hook points while the
weights are shared. ACT adds ``halting.weights`` (readout weight of every step) and
``halting.steps`` (halting step of every column).
"""

from __future__ import annotations

import copy
import inspect
import math
from collections import OrderedDict
from pathlib import Path
from typing import Literal

import torch
from pydantic import Field, model_validator
from torch import nn

from sglab import registry
from sglab.config import ModelConfig, check_switches
from sglab.errors import SglabError
from sglab.models.abs_rel import AbsRelGatedAttention
from sglab.models.act import AdaptiveHalting
from sglab.models.attention import CrossAttention, SelfAttention
from sglab.models.dropout import Dropout, keep_mask
from sglab.models.ffn import MOE_KINDS, make_ffn
from sglab.models.geometric import GeometricAttention
from sglab.models.hookpoint import HookPoint
from sglab.models.init import apply_init
from sglab.models.positional import AbsolutePositions, Rotary
from sglab.models.relative import RelativeSelfAttention

PAD_ID = 0  # sglab.tasks.base.Vocabulary: id 0 is always padding


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
    init: Literal["default", "gamma", "torch", "fan_in"] = Field(
        "default", description="default: GPT-2 style N(0, 0.02) (residual outputs scaled by "
                               "depth); gamma: N(0, d_in^-2gamma) (init-scale study); torch: "
                               "PyTorch's own module inits (embeddings N(0, 1)) with the NDR "
                               "code's Xavier init of geometric attention and copy-gated layers; "
                               "fan_in: N(0, 2 / (n_layers fan_in)) (thesis Ch. 7 code).")
    init_gamma: float = Field(0.5, gt=0, description="sigma = d_in^-gamma when init=gamma.")
    tie_embeddings: bool = True
    dropout: float = Field(0.0, ge=0, lt=1)
    bias: bool = False
    max_len: int | None = Field(None, ge=1, description="Longest input (null = the task's).")
    ffn: Literal["dense", "none", "topk", "pkm", "sigma_moe", "switch", "s_base"] = Field(
        "dense", description="none: blocks have no MLP sub-block; topk, pkm, sigma_moe, switch, "
                             "s_base: the MLP approximations of thesis Ch. 7 (models/ffn.py, "
                             "models/moe.py).")
    ffn_top_k: int | None = Field(None, ge=1, description="ffn=topk: units kept (K, Eq. 7.6).")
    pkm_heads: int = Field(4, ge=1, description="ffn=pkm: heads.")
    pkm_subkeys: int | None = Field(None, ge=1, description="ffn=pkm: sub-keys per half "
                                                          "(n_sub^2 values).")
    pkm_top_k: int = Field(32, ge=1, description="ffn=pkm: values chosen per head.")
    pkm_activation: Literal["relu", "softmax"] = "relu"
    moe_experts: int | None = Field(None, ge=1, description="MoE kinds: number of experts N_E.")
    moe_expert_size: int | None = Field(None, ge=1, description="MoE kinds: expert size G.")
    moe_top_k: int | None = Field(None, ge=1, description="MoE kinds: experts per token K.")
    moe_impl: Literal["masked", "sorted"] = Field(
        "masked", description="masked: every expert computed, then weighted (vmap-able); "
                              "sorted: one matmul per non-empty expert.")
    moe_selection: Literal["sigmoid", "softmax_before", "softmax_after"] = Field(
        "sigmoid", description="ffn=sigma_moe: score function (Tab. 7.4 ablations).")
    moe_init: Literal["sigma", "standard"] = Field(
        "sigma", description="sigma: W2^e std from d_ff = N_E G (Sec. 7.4); standard: from G.")
    expert_dropout: float = Field(0.0, ge=0, lt=1, description="MoE kinds: expert dropout "
                                                               "delta (training).")
    expert_hidden_dropout: float = Field(0.0, ge=0, lt=1, description="MoE kinds: standard "
                                                                      "dropout on expert units.")
    moe_reg_weight: float = Field(0.001, ge=0, description="MoE kinds: gamma of the balancing "
                                                           "loss (Eq. 7.20; Switch: Eq. 7.16).")
    switch_loss_scale: Literal["equation", "code"] = Field(
        "equation", description="ffn=switch: N_E f.p (equation) or f.p / N_E (code).")
    embedding: Literal["learned", "one_hot"] = Field(
        "learned", description="one_hot: token embeddings fixed to the identity (d_model must "
                               "equal the vocabulary size); tied decoder = identity too.")
    uniform_attention: bool = Field(
        False, description="Fix W_Q = W_K = 0: every query attends uniformly to the allowed keys.")
    identity_value: bool = Field(False, description="Fix the value projection W_V to the identity.")
    attention_out_projection: bool = Field(
        True, description="false: no output projection W_O after attention (heads concatenated).")
    output_bias: bool = Field(False, description="A trainable bias b added to the output logits.")
    attention: Literal["softmax", "geometric", "abs_rel_gated"] = Field(
        "softmax", description="geometric: directional geometric attention (NDR, thesis Eqs. "
                               "5.6-5.10); abs_rel_gated: gated absolute/relative attention "
                               "(thesis appendix D.2). Both need attention_mask=bidirectional.")
    attention_dropout: float = Field(
        0.0, ge=0, lt=1, description="Dropout on geometric content keys / abs_rel_gated weights.")
    geometric_normalize: bool = Field(
        False, description="L1-normalize each row of the geometric attention (off in the thesis).")
    copy_gate: bool = Field(
        False, description="Copy-gated post-LN layer (thesis Eqs. 5.1-5.5): no residual around "
                           "the data FFN, h' = g*u + (1-g)*h with g = sigmoid(FFN_gate(a)).")
    copy_gate_bias_init: float = Field(-3.0, description="Initial bias of the gate's output layer.")
    copy_gate_ffn_dropout: float | None = Field(
        None, ge=0, lt=1, description="Dropout inside the copy-gated layer's data and gate FFNs "
                                      "(null: `dropout`). The modified NDR of thesis App. E "
                                      "has none there (\"We do not use any dropout in Eq. "
                                      "E.1\"): its dropout acts on the attention output only.")
    copy_gate_data_gain: float | None = Field(
        None, gt=0, description="With init=torch, the Xavier gain of the copy-gated layer's "
                                "data-FFN output weights (W_2). null: the ndr_init scheme's -- "
                                "5/3 on the NDR layer (the NDR code's geometric layer), "
                                "nn.Linear's init on the tanh-update layers under ndr_init=code. "
                                "The CTL++ code's App. E layer uses 1.")
    gate_dropout: float = Field(
        0.0, ge=0, lt=1, description="Training only: probability of zeroing a column's whole gate "
                                     "vector (forces a copy).")
    update_norm: Literal["layernorm", "tanh"] = Field(
        "layernorm", description="Squashing of the copy-gated update u (Eq. 5.2): layernorm (NDR) "
                                 "or tanh (the non-geometric gated baselines).")
    shared_layers: bool = Field(
        False, description="One layer applied n_layers times (universal transformer).")
    eval_steps: int | None = Field(
        None, ge=1, description="Shared layers: number of steps in evaluation (null = n_layers).")
    readout: Literal["none", "first", "last"] = Field(
        "none", description="Sequence classification from the first or the last real column; "
                            "the model returns logits of shape [batch, 1, vocab].")
    act: Literal["none", "graves", "ut"] = Field(
        "none", description="Adaptive computation time over the shared layer's steps (thesis "
                            "appendix D.1): graves (variant A) or ut (Dehghani et al., variant "
                            "U). Halting only picks each column's readout steps.")
    act_threshold: float = Field(0.99, gt=0, le=1, description="ACT halting threshold 1 - eps.")
    act_loss_weight: float = Field(
        0.03, ge=0, description="alpha of the ponder loss alpha * mean remainder R over the "
                                "real columns, added to the training loss.")
    act_bias_init: float = Field(1.0, description="Initial bias b_H of the halting unit.")
    copy_gate_ffn: Literal["relu", "gelu_residual"] = Field(
        "relu", description="FFNs of the copy-gated layer. relu: Eqs. 5.2 and 5.5; "
                            "gelu_residual: the modified NDR of thesis App. E -- GELU in both "
                            "FFNs (Eq. E.1) and a residual around the data FFN, "
                            "u = LN(FFN_data(a) + a) (Eq. E.2).")
    ndr_init: Literal["code", "xavier"] = Field(
        "code", description="With init=torch, the NDR layers' init. code: as the thesis code ends "
                            "up -- Xavier weights, the directional projection (W_LR, W_RL) and "
                            "all FFN biases keep PyTorch's default init, the query bias starts "
                            "at 0; relative-position attention (pos_encoding=relative, "
                            "attention=abs_rel_gated) gets Xavier W_q, [W_kE; W_v], W_kP and "
                            "zero projection biases; the tanh-update gated layers' data FFN "
                            "output keeps nn.Linear's init. xavier: Xavier for the directional "
                            "projection too, zero FFN biases, gain 5/3 on every data FFN "
                            "output, relative attention at nn.Linear's init.")

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
        if self.ffn not in ("dense", "topk") and self.d_ff is not None:
            raise ValueError(f"d_ff={self.d_ff} has no effect with ffn={self.ffn}; remove d_ff")
        self._check_ffn()
        if self.attention != "softmax":
            if self.attention_mask != "bidirectional":
                raise ValueError(f"attention={self.attention} is bidirectional only; set "
                                 "attention_mask=bidirectional")
            if self.pos_encoding in ("rotary", "relative"):
                raise ValueError(f"attention={self.attention} brings its own positional signal; "
                                 f"pos_encoding={self.pos_encoding} cannot be combined with it "
                                 "(set pos_encoding=none)")
        if self.copy_gate and (self.norm != "post" or self.ffn != "dense" or self.residual_ablation):
            raise ValueError("copy_gate is a post-LN layer with a dense FFN: set norm=post, "
                             "ffn=dense and no residual_ablation")
        if self.eval_steps is not None and not self.shared_layers:
            raise ValueError("eval_steps needs shared_layers=true (separate layers cannot run "
                             "more steps than they have)")
        if self.act != "none" and not self.shared_layers:
            raise ValueError(f"act={self.act} halts over the steps of one shared layer: set "
                             "shared_layers=true")
        return self

    def _check_ffn(self) -> None:
        moe = self.ffn in MOE_KINDS
        if self.ffn == "topk":
            if self.ffn_top_k is None:
                raise ValueError("ffn=topk needs ffn_top_k (units kept per token)")
            if self.ffn_top_k > (self.d_ff or 4 * self.d_model):
                raise ValueError(f"ffn_top_k={self.ffn_top_k} is larger than d_ff="
                                 f"{self.d_ff or 4 * self.d_model}")
        if self.ffn == "pkm":
            if self.pkm_subkeys is None:
                raise ValueError("ffn=pkm needs pkm_subkeys (n_sub^2 values)")
            if self.d_model % 2:
                raise ValueError(f"ffn=pkm splits x into halves: d_model={self.d_model} must be even")
        if moe:
            missing = [f for f in ("moe_experts", "moe_expert_size", "moe_top_k")
                       if getattr(self, f) is None]
            if missing:
                raise ValueError(f"ffn={self.ffn} needs {', '.join(missing)}")
            if self.moe_top_k > self.moe_experts:
                raise ValueError(f"moe_top_k={self.moe_top_k} is larger than moe_experts="
                                 f"{self.moe_experts}; choose K <= N_E")

    @model_validator(mode="after")
    def _check_switches(self):
        """Fields set away from their default must have an effect (see check_switches)."""
        if (self.uniform_attention or self.identity_value) and (
                self.attention != "softmax" or self.shared_layers or self.pos_encoding == "relative"):
            raise ValueError("uniform_attention / identity_value fix the weights of softmax "
                             "attention in separate layers: set attention=softmax, "
                             "shared_layers=false and a pos_encoding other than relative")
        check_switches(self, {
            "init_gamma": (self.init == "gamma", "init=gamma"),
            "max_len": (self.pos_encoding in ("learned", "sinusoidal", "rotary"),
                        "pos_encoding=learned, sinusoidal or rotary"),
            # copy-gated layers compute ReLU and biased FFNs whatever activation and bias
            # say; activation=relu and bias=true (what the NDR presets set) describe them
            "activation": (self.ffn != "none" and self.ffn != "pkm",
                           "ffn=dense, topk, sigma_moe, switch or s_base"),
            "ffn_top_k": (self.ffn == "topk", "ffn=topk"),
            **{f: (self.ffn == "pkm", "ffn=pkm")
               for f in ("pkm_heads", "pkm_subkeys", "pkm_top_k", "pkm_activation")},
            **{f: (self.ffn in MOE_KINDS, "ffn=sigma_moe, switch or s_base")
               for f in ("moe_experts", "moe_expert_size", "moe_top_k", "moe_impl",
                         "expert_dropout", "expert_hidden_dropout", "moe_reg_weight")},
            "moe_selection": (self.ffn == "sigma_moe", "ffn=sigma_moe"),
            "moe_init": (self.ffn in ("sigma_moe", "s_base"), "ffn=sigma_moe or s_base"),
            "switch_loss_scale": (self.ffn == "switch", "ffn=switch"),
            "attention_out_projection": (self.attention == "softmax", "attention=softmax"),
            "attention_dropout": (self.attention != "softmax",
                                  "attention=geometric or attention=abs_rel_gated"),
            "geometric_normalize": (self.attention == "geometric", "attention=geometric"),
            "copy_gate_bias_init": (self.copy_gate, "copy_gate=true"),
            "copy_gate_ffn_dropout": (self.copy_gate, "copy_gate=true"),
            "copy_gate_data_gain": (self.copy_gate and self.init == "torch",
                                    "copy_gate=true and init=torch"),
            "gate_dropout": (self.copy_gate, "copy_gate=true"),
            "update_norm": (self.copy_gate, "copy_gate=true"),
            "act_threshold": (self.act != "none", "act=graves or act=ut"),
            "act_loss_weight": (self.act != "none", "act=graves or act=ut"),
            "act_bias_init": (self.act != "none", "act=graves or act=ut"),
        })
        return self

    def evaluation_statistics(self) -> list[str]:
        return ["act_steps"] if self.act != "none" else []


def _norm(config: TransformerConfig) -> nn.Module:
    if config.norm == "none":
        return nn.Identity()
    return nn.LayerNorm(config.d_model, bias=config.bias)


def make_attention(config: TransformerConfig, rotary: nn.Module | None) -> nn.Module:
    if config.attention == "geometric":
        return GeometricAttention(config.d_model, config.n_heads, config.attention_dropout,
                                  config.geometric_normalize)
    if config.attention == "abs_rel_gated":
        return AbsRelGatedAttention(config.d_model, config.n_heads, config.attention_dropout)
    causal = config.attention_mask == "causal"
    if config.pos_encoding == "relative":
        return RelativeSelfAttention(config.d_model, config.n_heads, causal, config.bias,
                                     config.dropout, config.attention_out_projection)
    return SelfAttention(config.d_model, config.n_heads, causal, config.bias, config.dropout,
                         rotary, config.attention_out_projection)


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
        has_mlp = config.ffn != "none"
        self.ln_1, self.ln_2 = _norm(config), _norm(config) if has_mlp else nn.Identity()
        self.attn = make_attention(config, rotary)
        self.mlp = make_ffn(config, config.n_layers)
        self.resid_drop = Dropout(config.dropout)
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


class FeedForward(nn.Module):
    """FFN(x) = W2 max(W1 x + b1, 0) + b2 (thesis Eq. 5.5; GELU instead of ReLU: Eq. E.1),
    dropout after the activation."""

    def __init__(self, d_in: int, d_hidden: int, dropout: float, activation: str = "relu"):
        super().__init__()
        self.up = nn.Linear(d_in, d_hidden)
        self.out = nn.Linear(d_hidden, d_in)
        self.act = nn.GELU() if activation == "gelu" else nn.ReLU()
        self.hidden = HookPoint()
        self.drop = Dropout(dropout)

    def forward(self, x):
        return self.out(self.drop(self.hidden(self.act(self.up(x)))))

    def forward_flops_per_token(self) -> int:
        return 2 * 2 * self.up.in_features * self.up.out_features

    def xavier_(self, out_gain: float | None, zero_bias: bool = True) -> None:
        """Xavier-uniform weights (``out_gain=None``: the output layer keeps nn.Linear's)."""
        nn.init.xavier_uniform_(self.up.weight, gain=math.sqrt(2))  # ReLU
        if out_gain is not None:
            nn.init.xavier_uniform_(self.out.weight, gain=out_gain)
        if zero_bias:  # otherwise the biases keep nn.Linear's default
            nn.init.zeros_(self.up.bias)
            nn.init.zeros_(self.out.bias)


class CopyGateBlock(nn.Module):
    """Copy-gated layer (thesis Fig. 5.1, Eqs. 5.1-5.5).

    a = LN(MHA(h, H, H) + h)                (5.1)
    u = LN(FFN_data(a))   (or tanh)         (5.2)  -- no residual around the data FFN
                                                   (u = LN(FFN_data(a) + a) with
                                                   ``copy_gate_ffn=gelu_residual``, Eq. E.2)
    g = sigmoid(FFN_gate(a))                (5.3)  -- FFN_gate is d -> d -> d
    h' = g * u + (1 - g) * h                (5.4)

    Gate dropout (training only) zeroes a column's whole gate vector with probability
    ``gate_dropout``, which forces a copy of that column.
    """

    def __init__(self, config: TransformerConfig, rotary: nn.Module | None):
        super().__init__()
        d = config.d_model
        self.attn = make_attention(config, rotary)
        self.ln_1 = nn.LayerNorm(d)
        self.data_residual = config.copy_gate_ffn == "gelu_residual"
        activation = "gelu" if self.data_residual else "relu"
        ffn_dropout = config.dropout if config.copy_gate_ffn_dropout is None \
            else config.copy_gate_ffn_dropout
        self.mlp = FeedForward(d, config.d_ff or 4 * d, ffn_dropout, activation)
        self.ln_2 = nn.LayerNorm(d) if config.update_norm == "layernorm" else None
        self.gate_ffn = FeedForward(d, d, ffn_dropout, activation)
        self.gate_dropout = config.gate_dropout
        self.gate_bias_init = config.copy_gate_bias_init
        self.data_gain = config.copy_gate_data_gain
        self.resid_drop = Dropout(config.dropout)
        self.attn_out, self.resid_mid, self.mlp_out = HookPoint(), HookPoint(), HookPoint()
        self.gate, self.resid_post = HookPoint(), HookPoint()
        self.reset_gate_bias()

    def reset_gate_bias(self) -> None:
        nn.init.constant_(self.gate_ffn.out.bias, self.gate_bias_init)

    def xavier_(self, zero_bias: bool = True, data_out: bool = True) -> None:
        """The thesis code's init: Xavier-uniform, gains sqrt(2) / 5/3 (data) and sqrt(2) / 1
        (gate). ``data_out=False``: the data FFN's output layer keeps nn.Linear's init, as in
        the thesis code's tanh-update layer ("+ rel + gate", "+ abs/rel + gate").
        ``copy_gate_data_gain``, when set, is the data output's gain in either case."""
        out_gain = self.data_gain if self.data_gain is not None else (5 / 3 if data_out else None)
        self.mlp.xavier_(out_gain=out_gain, zero_bias=zero_bias)
        self.gate_ffn.xavier_(out_gain=1.0, zero_bias=zero_bias)
        self.reset_gate_bias()

    def forward(self, x: torch.Tensor, key_padding_mask: torch.Tensor | None) -> torch.Tensor:
        a = self.resid_mid(self.ln_1(x + self.attn_out(self.resid_drop(
            self.attn(x, key_padding_mask)))))                                    # Eq. 5.1
        u = self.mlp(a) + a if self.data_residual else self.mlp(a)
        u = self.mlp_out(self.ln_2(u) if self.ln_2 is not None else torch.tanh(u))  # Eq. 5.2
        g = torch.sigmoid(self.gate_ffn(a))                                      # Eq. 5.3
        if self.training and self.gate_dropout > 0:
            keep = keep_mask(g[..., :1], self.gate_dropout)  # one draw per position
            g = g * keep
        g = self.gate(g)
        return self.resid_post(g * u + (1 - g) * x)                              # Eq. 5.4


def share_weights(module: nn.Module) -> nn.Module:
    """A new module computing exactly what ``module`` computes, with the same parameter
    and buffer tensors but its own (fresh) hook points.

    Shared layers apply one block at every step; giving each step such a twin keeps one
    stable hook name per step (``blocks.3.attn.pattern``) while the weights stay shared.
    """
    twin = copy.copy(module)
    twin.__dict__ = {key: (type(value)() if "hooks" in key and isinstance(value, dict) else value)
                     for key, value in module.__dict__.items()}
    twin._parameters = OrderedDict(module._parameters)
    twin._buffers = OrderedDict(module._buffers)
    twin._modules = OrderedDict(
        (name, HookPoint() if isinstance(child, HookPoint) else share_weights(child))
        for name, child in module._modules.items())
    return twin


def init_ndr_weights(model: nn.Module, scheme: str = "code") -> None:
    """Xavier-uniform init of geometric attention and copy-gated FFNs (the thesis code's).

    ``code``: what the thesis code's initialization amounts to. Its attention reset
    re-initializes a positional projection that geometric attention never uses, so the
    directional projection (W_LR, W_RL; Eq. 5.9) keeps nn.Linear's default,
    U(+-1/sqrt(d)) -- 2.3x narrower than Xavier at d = 64 -- and so do all FFN biases;
    the query bias (a per-head content bias there) starts at 0. ``xavier``: the
    directional projection gets Xavier bounds as well and FFN biases start at 0.
    ``code`` also gives relative-position attention the thesis code's Xavier init
    (:func:`xavier_relative_attention_`) and leaves the data FFN's output layer of the
    tanh-update gated layers at nn.Linear's init, as that code does.
    """
    for module in model.modules():
        if isinstance(module, GeometricAttention):
            d, head = module.d_model, module.head_dim
            bound = math.sqrt(6 / (d + head))  # fan_in d, fan_out d_head
            for linear in (module.query, module.key, module.value):
                nn.init.uniform_(linear.weight, -bound, bound)
            nn.init.uniform_(module.out.weight, -bound, bound)  # fan_in d_head, fan_out d
            if scheme == "xavier":
                bound = math.sqrt(6 / (d + 2))  # directions: fan_in d, fan_out 2
                nn.init.uniform_(module.direction.weight, -bound, bound)
            else:
                nn.init.zeros_(module.query.bias)
        elif isinstance(module, (RelativeSelfAttention, AbsRelGatedAttention)) and scheme == "code":
            xavier_relative_attention_(module)
        elif isinstance(module, CopyGateBlock):
            # the tanh-update layer of the thesis code leaves its data FFN's output layer
            # at nn.Linear's init (only its geometric NDR layer sets gain 5/3 there)
            module.xavier_(zero_bias=scheme == "xavier",
                           data_out=scheme == "xavier" or module.ln_2 is not None)


def xavier_relative_attention_(module: nn.Module) -> None:
    """The thesis code's init of its relative-position attention (used by "+ rel",
    "+ rel + gate" and, with the absolute/relative switch, "+ abs/rel + gate"):
    Xavier-uniform W_q (d -> d), [W_kE; W_v] as one d -> 2d map, W_kP (d -> d); no
    biases on the projections (sglab's are zeroed); the output projection and the switch
    keep nn.Linear's init."""

    def xavier(weight: torch.Tensor, fan_in: int, fan_out: int) -> None:
        bound = math.sqrt(6 / (fan_in + fan_out))
        with torch.no_grad():
            weight.uniform_(-bound, bound)

    if isinstance(module, RelativeSelfAttention):
        d = module.qkv.in_features
        xavier(module.qkv.weight[:d], d, d)
        xavier(module.qkv.weight[d:], d, 2 * d)
        if module.qkv.bias is not None:
            nn.init.zeros_(module.qkv.bias)
    else:
        d = module.d_model
        xavier(module.query.weight, d, d)
        xavier(module.key.weight, d, 2 * d)
        xavier(module.value.weight, d, 2 * d)
    xavier(module.position_key.weight, d, d)


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
        self.drop = Dropout(config.dropout)
        make_block = (lambda i: CopyGateBlock(config, rotary)) if config.copy_gate else (
            lambda i: Block(config, i, rotary))
        if config.shared_layers:
            shared = make_block(0)
            steps = max(config.n_layers, config.eval_steps or 0)
            self.blocks = nn.ModuleList([shared, *(share_weights(shared) for _ in range(steps - 1))])
        else:
            self.blocks = nn.ModuleList(make_block(i) for i in range(config.n_layers))
        self.halting = None if config.act == "none" else AdaptiveHalting(
            config.d_model, config.act, config.act_threshold, config.act_loss_weight,
            config.act_bias_init)
        self.ln_f = _norm(config) if config.norm == "pre" else nn.Identity()
        self.final = HookPoint()
        self.head = None if config.tie_embeddings else nn.Linear(config.d_model, vocab_size, bias=False)
        apply_init(self, config.init, config.init_gamma, config.n_layers)
        if config.init == "torch":
            init_ndr_weights(self, config.ndr_init)
        for block in self.blocks:
            if isinstance(block, CopyGateBlock):
                block.reset_gate_bias()
        if self.halting is not None:
            self.halting.reset_bias()
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
        if config.uniform_attention or config.identity_value:
            if config.attention != "softmax" or config.shared_layers:
                raise SglabError("uniform_attention / identity_value work with attention=softmax "
                                 "and separate layers only")
            for block in self.blocks:
                block.attn.freeze(config.uniform_attention, config.identity_value)
        self.output_bias = nn.Parameter(torch.zeros(vocab_size)) if config.output_bias else None
        self.aux_loss: torch.Tensor | None = None
        self.statistics: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}

    @property
    def steps(self) -> int:
        """Number of layers (steps) applied in the current mode."""
        if self.training or not self.config.shared_layers:
            return self.config.n_layers
        return self.config.eval_steps or self.config.n_layers

    def forward(self, input_ids: torch.Tensor,
                key_padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        x = self.tok_emb(input_ids)
        if self.positions is not None:
            x = self.positions(x)
        x = self.drop(self.embed(x))
        states = []
        for block in self.blocks[: self.steps]:
            x = block(x, key_padding_mask)
            if self.halting is not None:
                states.append(x)
        if self.halting is not None:
            x = self.adaptive_output(torch.stack(states), input_ids, key_padding_mask)
        ffn_losses = []  # a loop, not a comprehension with :=, which torch.compile cannot trace
        for block in self.blocks[: self.steps]:
            loss = getattr(getattr(block, "mlp", None), "aux_loss", None)
            if loss is not None:
                ffn_losses.append(loss)
        if ffn_losses:  # MoE balancing losses, summed over layers
            self.aux_loss = sum(ffn_losses) + (0 if self.aux_loss is None else self.aux_loss)
        if self.config.readout != "none":
            x = self.readout_column(x, key_padding_mask)
        x = self.final(self.ln_f(x))
        logits = x @ self.tok_emb.weight.T if self.head is None else self.head(x)
        return logits if self.output_bias is None else logits + self.output_bias

    def adaptive_output(self, states: torch.Tensor, input_ids: torch.Tensor,
                        key_padding_mask: torch.Tensor | None) -> torch.Tensor:
        """ACT output of every column from its states [steps, batch, len, d].

        Sets ``aux_loss`` (the ponder loss) and, in evaluation, ``statistics``
        (``act_steps``: sum and count of the halting steps of the real columns). A column
        is real when its token is not padding (id 0 in every task vocabulary) and, when a
        mask is given, its key is not masked.
        """
        real = input_ids != PAD_ID
        if key_padding_mask is not None:
            real = real & key_padding_mask
        out, self.aux_loss, steps = self.halting(states, real)
        if not self.training:
            self.statistics = {"act_steps": ((steps * real).sum(), real.sum())}
        return out

    def readout_column(self, x: torch.Tensor, key_padding_mask: torch.Tensor | None) -> torch.Tensor:
        """The first or the last real column, shape [batch, 1, d_model]."""
        if self.config.readout == "first":
            return x[:, :1]
        if key_padding_mask is None:
            return x[:, -1:]
        last = key_padding_mask.long().sum(1) - 1
        return x[torch.arange(x.shape[0], device=x.device), last][:, None]

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def flops_per_token(self, length: int) -> float:
        """Training FLOPs per token (forward + backward = 3x forward), PaLM appendix B style."""
        c = self.config
        matmul_params = c.n_layers * 4 * c.d_model**2 + self.tok_emb.weight.numel()  # + unembedding
        # every feed-forward net of a block: its MLP (none with ffn=none) and, in copy-gated
        # blocks, the gate's FFN (Eq. 5.4)
        ffn = sum(m.forward_flops_per_token() for b in self.blocks[: c.n_layers]
                  for m in (getattr(b, "mlp", None), getattr(b, "gate_ffn", None))
                  if m is not None)
        attention = c.n_layers * 2 * length * c.d_model  # QK^T and PV per token
        return 6 * matmul_params + 3 * ffn + 6 * attention


@registry.register("model", "transformer", TransformerConfig, "one configurable transformer stack")
def make_transformer(config: TransformerConfig, vocab_size: int, max_len: int) -> Transformer:
    return Transformer(config, vocab_size, max_len)


def build_model(config: ModelConfig, vocab_size: int, max_len: int,
                runs_dir: str | Path | None = None, **task_kwargs) -> nn.Module:
    """The registered model of ``config``. ``task_kwargs``: what the task adds
    (``Task.model_kwargs()``, e.g. bit widths). ``runs_dir``: the run store, for models built
    on another run (``masked`` reads its base run there); other models ignore it."""
    factory = registry.entry("model", config.name).factory
    output_classes = task_kwargs.pop("output_classes", None)
    if "runs_dir" in inspect.signature(factory).parameters:
        model = factory(config, vocab_size, max_len, runs_dir=runs_dir, **task_kwargs)
    else:
        model = factory(config, vocab_size, max_len, **task_kwargs)
    if output_classes is not None:
        restrict_outputs(model, output_classes, vocab_size)
    return model


def restrict_outputs(model: nn.Module, classes: list[int], vocab_size: int) -> None:
    """Make ``model`` score only ``classes`` (a classification task's labels,
    ``task.scored_classes=labels``): every other output gets the logit -1e4, so its
    softmax probability and its gradient are 0, as with the thesis code's n-class head.
    The mask is a non-persistent buffer (checkpoints are unchanged; the run's summary
    records the classes, and :func:`load_model` rebuilds the mask from it) added by a
    forward hook, so every model and the vmapped ensembles get it unchanged."""
    mask = torch.full((vocab_size,), -1e4)
    mask[torch.as_tensor(classes, dtype=torch.long)] = 0.0
    model.register_buffer("output_class_mask", mask, persistent=False)
    model.register_forward_hook(lambda module, args, logits: logits + module.output_class_mask)


__all__ = ["Transformer", "TransformerConfig", "build_model"]
