"""One Transformer stack, built family by family from its config (models/transformer_config.py).

Each family of the config has its factory here: ``make_embedding`` (embedding),
``make_positions`` (positions), ``make_attention`` (attention), ``make_ffn``
(ffn, models/ffn.py), ``make_blocks`` (block: :class:`Block` or :class:`CopyGateBlock`,
separate or one shared layer), ``make_halting`` (halting) and ``init_weights`` (init).

Block with pre-LN (nanoGPT):   x = x + attn(ln_1(x));  x = x + mlp(ln_2(x))
Block with post-LN:            x = ln_1(x + attn(x));  x = ln_2(x + mlp(x))
Residual ablation of a layer (Zuo & Guerzhoy, Sec. 5) removes both of its
residual connections: x = attn(ln_1(x)); x = mlp(ln_2(x)).

The one-layer topic model of Li et al. (2023), f(X) = W_E^T (W_V W_E X) Attn(W_E X) + b:
``ffn: none`` (no MLP sub-block), ``embedding: {kind: one_hot, output_bias: true}``
(W_E = I, frozen; needs d_model = vocabulary size; b), ``attention: {kind: softmax,
uniform: true, identity_value: true, out_projection: false}`` (W_Q = W_K = 0 and W_V = I,
frozen; no W_O).

The Neural Data Router (thesis Ch. 5): ``attention: geometric`` (directional geometric
attention, models/geometric.py) or ``abs_rel_gated`` (appendix D.2, models/abs_rel.py);
``block: {kind: copy_gate}`` (copy-gated post-LN layer, Eqs. 5.1-5.5, see
:class:`CopyGateBlock`); ``block.shared`` (one layer applied ``n_layers`` times in training
and ``block.eval_steps`` times in evaluation); ``readout`` (``first`` / ``last``: the model
classifies the sequence from that column and returns logits of shape [batch, 1, vocab]);
``halting: graves | ut`` (adaptive computation time over the shared layer's steps, thesis
appendix D.1, see models/act.py: each column's output is a halting-weighted mixture of its
states, and the ponder loss is left in ``model.aux_loss`` for the Trainer).

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

import torch
from torch import nn

from sglab import registry
from sglab.config import ModelConfig
from sglab.errors import SglabError
from sglab.models.abs_rel import AbsRelGatedAttention
from sglab.models.act import AdaptiveHalting
from sglab.models.attention import CrossAttention, SelfAttention
from sglab.models.dropout import Dropout, keep_mask
from sglab.models.ffn import make_ffn
from sglab.models.geometric import GeometricAttention
from sglab.models.hookpoint import HookPoint
from sglab.models.init import apply_init
from sglab.models.positional import AbsolutePositions, Rotary
from sglab.models.relative import RelativeSelfAttention
from sglab.models.transformer_config import TransformerConfig

PAD_ID = 0  # sglab.tasks.base.Vocabulary: id 0 is always padding


def _norm(config: TransformerConfig) -> nn.Module:
    if config.block.norm == "none":
        return nn.Identity()
    return nn.LayerNorm(config.d_model, bias=config.bias)


# ----------------------------------------------------------------------------- factories


class OneHotEmbedding(nn.Embedding):
    """Token embeddings fixed to the identity (``embedding: one_hot``): W_E = I, frozen."""

    def fix_weights(self) -> None:
        with torch.no_grad():
            self.weight.copy_(torch.eye(self.num_embeddings))
        self.weight.requires_grad_(False)


def make_embedding(config: TransformerConfig, vocab_size: int) -> nn.Embedding:
    """The token embedding of the ``embedding`` family."""
    if config.embedding.kind == "one_hot":
        if config.d_model != vocab_size:
            raise SglabError(
                f"model.embedding.kind=one_hot needs model.d_model equal to the vocabulary size "
                f"({vocab_size}), got d_model={config.d_model}; set model.d_model={vocab_size}"
                + (" and model.n_heads to a divisor of it" if vocab_size % config.n_heads else "")
            )
        return OneHotEmbedding(vocab_size, config.d_model)
    return nn.Embedding(vocab_size, config.d_model)


def make_positions(config: TransformerConfig, max_len: int
                   ) -> tuple[nn.Module | None, nn.Module | None]:
    """(positions added to the embeddings, rotary map of the attention) of the
    ``positions`` family; relative positions live in the attention (make_attention)."""
    positions = config.positions
    max_len = getattr(positions, "max_len", None) or max_len
    if positions.kind in ("learned", "sinusoidal"):
        return AbsolutePositions(positions.kind, max_len, config.d_model), None
    if positions.kind == "rotary":
        return None, Rotary(config.d_model // config.n_heads, max_len)
    return None, None


def make_attention(config: TransformerConfig, rotary: nn.Module | None) -> nn.Module:
    """The self-attention of a block, from the ``attention`` family (softmax attention is
    Transformer-XL relative attention with ``positions: relative``)."""
    attention = config.attention
    if attention.kind == "geometric":
        return GeometricAttention(config.d_model, config.n_heads, attention.dropout,
                                  attention.normalize, attention.kv_bias)
    if attention.kind == "abs_rel_gated":
        return AbsRelGatedAttention(config.d_model, config.n_heads, attention.dropout,
                                    attention.key_dropout)
    causal = config.attention_mask == "causal"
    weight_dropout = config.dropout if attention.weight_dropout is None else attention.weight_dropout
    bias = config.bias if attention.bias is None else attention.bias
    if config.positions.kind == "relative":
        return RelativeSelfAttention(config.d_model, config.n_heads, causal, bias,
                                     weight_dropout, attention.out_projection,
                                     attention.key_dropout, attention.learned_scale)
    return SelfAttention(config.d_model, config.n_heads, causal, bias, weight_dropout,
                         rotary, attention.out_projection,
                         frozen=(attention.uniform, attention.identity_value))


def make_blocks(config: TransformerConfig, rotary: nn.Module | None) -> nn.ModuleList:
    """The layers of the ``block`` family: one per layer, or one shared layer with a
    weight-sharing twin per further step (training or evaluation, whichever is longer)."""
    block = config.block

    def make(index: int) -> nn.Module:
        return CopyGateBlock(config, rotary) if block.kind == "copy_gate" else \
            Block(config, index, rotary)

    if block.shared:
        shared = make(0)
        steps = max(config.n_layers, block.eval_steps or 0)
        return nn.ModuleList([shared, *(share_weights(shared) for _ in range(steps - 1))])
    return nn.ModuleList(make(i) for i in range(config.n_layers))


def make_halting(config: TransformerConfig) -> AdaptiveHalting | None:
    """The halting unit of the ``halting`` family (None: no ACT)."""
    halting = config.halting
    if halting.kind == "none":
        return None
    return AdaptiveHalting(config.d_model, halting.kind, halting.threshold, halting.loss_weight,
                           halting.bias_init)


def init_weights(model: nn.Module, config: TransformerConfig) -> None:
    """The ``init`` family over every weight, then the weights other families fix (a copy
    gate's and the halting unit's bias, a one-hot embedding, frozen attention weights:
    every module with a ``fix_weights``), which no init scheme may move."""
    init = config.init
    apply_init(model, init.kind, getattr(init, "gamma", 0.5), config.n_layers)
    if init.kind == "torch":
        init_ndr_weights(model, init.ndr_init)
    for module in list(model.modules()):
        fix = getattr(module, "fix_weights", None)
        if callable(fix):
            fix()


class Block(nn.Module):
    """One layer. ``cross_attention=True`` adds an encoder-decoder attention sub-block
    between self-attention and the MLP (the decoder layer of a seq2seq model):
    post-LN  x = ln_cross(x + cross(x, memory)),  pre-LN  x = x + cross(ln_cross(x), memory).
    """

    def __init__(self, config: TransformerConfig, index: int, rotary: nn.Module | None,
                 cross_attention: bool = False):
        super().__init__()
        self.norm_placement = config.block.norm
        self.residual = index not in config.block.residual_ablation
        has_mlp = config.ffn.kind != "none"
        self.ln_1, self.ln_2 = _norm(config), _norm(config) if has_mlp else nn.Identity()
        self.attn = make_attention(config, rotary)
        self.mlp = make_ffn(config.ffn, config.d_model, config.n_layers, config.bias,
                            config.dropout)
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
                                                   ``block.ffn=gelu_residual``, Eq. E.2)
    g = sigmoid(FFN_gate(a))                (5.3)  -- FFN_gate is d -> d -> d
    h' = g * u + (1 - g) * h                (5.4)

    Gate dropout (training only) zeroes a column's whole gate vector with probability
    ``gate_dropout``, which forces a copy of that column. Its fields: ``block`` (kind
    copy_gate); its data FFN is ``ffn.d_ff`` wide.
    """

    def __init__(self, config: TransformerConfig, rotary: nn.Module | None):
        super().__init__()
        d, block = config.d_model, config.block
        self.attn = make_attention(config, rotary)
        self.ln_1 = nn.LayerNorm(d)
        self.data_residual = block.ffn == "gelu_residual"
        activation = "gelu" if self.data_residual else "relu"
        ffn_dropout = config.dropout if block.ffn_dropout is None else block.ffn_dropout
        self.mlp = FeedForward(d, config.ffn.d_ff or 4 * d, ffn_dropout, activation)
        self.ln_2 = nn.LayerNorm(d) if block.update_norm == "layernorm" else None
        self.gate_ffn = FeedForward(d, d, ffn_dropout, activation)
        self.gate_dropout = block.gate_dropout
        self.gate_bias_init = block.bias_init
        self.data_gain = block.data_gain
        self.resid_drop = Dropout(config.dropout)
        self.attn_out, self.resid_mid, self.mlp_out = HookPoint(), HookPoint(), HookPoint()
        self.gate, self.resid_post = HookPoint(), HookPoint()
        self.reset_gate_bias()

    def reset_gate_bias(self) -> None:
        nn.init.constant_(self.gate_ffn.out.bias, self.gate_bias_init)

    fix_weights = reset_gate_bias  # the gate's bias survives any init scheme

    def xavier_(self, zero_bias: bool = True, data_out: bool = True) -> None:
        """The thesis code's init: Xavier-uniform, gains sqrt(2) / 5/3 (data) and sqrt(2) / 1
        (gate). ``data_out=False``: the data FFN's output layer keeps nn.Linear's init, as in
        the thesis code's tanh-update layer ("+ rel + gate", "+ abs/rel + gate").
        ``block.data_gain``, when set, is the data output's gain in either case."""
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
    The module's own hooks (part of what it computes, such as :func:`restrict_outputs`'s
    class mask) are kept in dicts of the twin's own, so hooks added later to either stay
    with it.
    """
    twin = copy.copy(module)
    twin.__dict__ = {key: (type(value)(value) if "hooks" in key and isinstance(value, dict)
                           else value)
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
    the query bias (a per-head content bias there) starts at 0. ``ctlpp_code``: the
    CTL++ code's NDR, whose attention initializes W_v and W_o over d -> d and keeps
    nn.Linear's biases (with ``attention.kv_bias``). ``xavier``: the
    directional projection gets Xavier bounds as well and FFN biases start at 0.
    ``code`` also gives relative-position attention the thesis code's Xavier init
    (:func:`xavier_relative_attention_`) and leaves the data FFN's output layer of the
    tanh-update gated layers at nn.Linear's init, as that code does.
    """
    for module in model.modules():
        if isinstance(module, GeometricAttention):
            d, head = module.d_model, module.head_dim
            per_head = math.sqrt(6 / (d + head))  # fan_in d, fan_out d_head
            # the CTL++ code's reset takes values and the head merge over all heads at once
            # (layers/transformer/direction_sensitive_geometric.py there), biases kept
            whole = math.sqrt(6 / (2 * d)) if scheme == "ctlpp_code" else per_head
            for linear, bound in ((module.query, per_head), (module.key, per_head),
                                  (module.value, whole), (module.out, whole)):
                nn.init.uniform_(linear.weight, -bound, bound)
            if scheme == "xavier":
                bound = math.sqrt(6 / (d + 2))  # directions: fan_in d, fan_out 2
                nn.init.uniform_(module.direction.weight, -bound, bound)
            elif scheme == "code":  # the NDR code's per-head content bias starts at 0
                nn.init.zeros_(module.query.bias)
        elif isinstance(module, (RelativeSelfAttention, AbsRelGatedAttention)) and scheme != "xavier":
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
        self.tok_emb = make_embedding(config, vocab_size)
        self.positions, rotary = make_positions(config, max_len)
        self.embed = HookPoint()
        embedding_dropout = config.embedding.dropout
        self.drop = Dropout(config.dropout if embedding_dropout is None else embedding_dropout)
        self.blocks = make_blocks(config, rotary)
        self.halting = make_halting(config)
        self.ln_f = _norm(config) if config.block.norm == "pre" else nn.Identity()
        self.final = HookPoint()
        self.head = None if config.embedding.tied else nn.Linear(config.d_model, vocab_size,
                                                                 bias=False)
        init_weights(self, config)
        self.output_bias = (nn.Parameter(torch.zeros(vocab_size)) if config.embedding.output_bias
                            else None)
        self.aux_loss: torch.Tensor | None = None
        self.statistics: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}

    @property
    def steps(self) -> int:
        """Number of layers (steps) applied in the current mode."""
        if self.training or not self.config.block.shared:
            return self.config.n_layers
        return self.config.block.eval_steps or self.config.n_layers

    def with_eval_steps(self, steps: int) -> Transformer:
        """This shared-layer model applying its one layer ``steps`` times in evaluation: a
        twin holding the same weight tensors (nothing copied or trained) and hook points of
        its own; this model is unchanged. Whether a layer learned on short inputs is a
        general step shows in its accuracy on longer ones with more steps than it trained."""
        if not self.config.block.shared:
            raise SglabError(f"with_eval_steps needs a shared-layer model (block.shared=true); "
                             f"this one has {self.config.n_layers} separate layers")
        twin = share_weights(self)
        while len(twin.blocks) < steps:
            twin.blocks.append(share_weights(self.blocks[0]))
        block = self.config.block.model_copy(update={"eval_steps": steps})
        twin.config = self.config.model_copy(update={"block": block})
        return twin

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

    def readout_positions(self, x: torch.Tensor,
                          key_padding_mask: torch.Tensor | None) -> torch.Tensor:
        """The index of the column each row of ``x`` [batch, len, ...] is read out from:
        the first, or the last real one (shape [batch])."""
        batch, length = x.shape[:2]
        if self.config.readout == "first":
            return torch.zeros(batch, dtype=torch.long, device=x.device)
        if key_padding_mask is None:
            return torch.full((batch,), length - 1, dtype=torch.long, device=x.device)
        return key_padding_mask.long().sum(1) - 1

    def readout_column(self, x: torch.Tensor, key_padding_mask: torch.Tensor | None) -> torch.Tensor:
        """The first or the last real column, shape [batch, 1, d_model]."""
        rows = torch.arange(x.shape[0], device=x.device)
        return x[rows, self.readout_positions(x, key_padding_mask)][:, None]

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def flops_per_token(self, length: int) -> float:
        """Training FLOPs per token (forward + backward = 3x forward), PaLM appendix B style."""
        c = self.config
        matmul_params = c.n_layers * 4 * c.d_model**2 + self.tok_emb.weight.numel()  # + unembedding
        # every feed-forward net of a block: its MLP (none with ffn kind none) and, in copy-gated
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
