"""The transformer's config: what every transformer has, and families dispatched on ``kind``.

    model:
      name: transformer
      n_layers: 4            # layers (with block.shared: steps in training)
      n_heads: 4
      d_model: 128
      attention_mask: causal # causal | bidirectional
      dropout: 0.0           # embeddings, residual branches, softmax attention weights
      bias: false            # biases of linear layers and LayerNorms
      readout: none          # none | first | last (sequence classification)
      embedding: {kind: learned, tied: true, output_bias: false, dropout: null}
      positions: {kind: learned, max_len: null}  # learned | sinusoidal | none | rotary | relative
      attention: {kind: softmax, out_projection: true}  # softmax | geometric | abs_rel_gated
      ffn: {kind: dense, d_ff: null, activation: gelu}
                             # dense | none | topk | pkm | sigma_moe | switch | s_base
      block: {kind: plain, norm: pre, residual_ablation: [], shared: false}  # plain | copy_gate
      halting: {kind: none}  # none | graves | ut
      init: {kind: default}  # default | gamma | torch | fan_in

A family's fields are those of its kind only: a setting that a kind does not use is an
unknown key there (``positions: {kind: none, max_len: 64}``). A family takes a bare kind
too (``ffn: none``). Checks across families (geometric attention is bidirectional, a
copy-gated block is post-LN with a dense FFN, ...) are the validators of
:class:`TransformerConfig`.

The old flat layout (``pos_encoding: none``, ``copy_gate: true``, ...) is still read:
``models/transformer_legacy.py`` migrates it, and the run id is computed from it.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import (
    Field,
    SerializeAsAny,
    field_validator,
    model_serializer,
    model_validator,
)

from sglab.config import _CHECK_EFFECTS, FamilyConfig, ModelConfig, set_path
from sglab.models import transformer_legacy as legacy

MOE_KINDS = ("sigma_moe", "switch", "s_base")


class TransformerFamily(FamilyConfig):
    """A family of the transformer config. ``no_effect``: flat settings of the old layout
    that had no effect with this kind; only the configs of runs made before the families
    hold them (and a preset whose run ids hash one), so that their run ids stay."""

    no_effect: dict[str, Any] = Field(
        default_factory=dict, json_schema_extra={"hidden": True},
        description="Old flat settings without effect here, kept for the run id "
                    "(e.g. {attention_dropout: 0.1} with softmax attention).")

    @model_validator(mode="after")
    def _check_no_effect(self):
        if self.no_effect:
            family = self.family().family_name
            checked = legacy.check_no_effect(family, self.kind, self.no_effect)
            if checked != self.no_effect:
                object.__setattr__(self, "no_effect", checked)
        return self

    @model_serializer(mode="wrap")
    def _dump(self, handler):
        data = handler(self)
        if not self.no_effect and isinstance(data, dict):
            data.pop("no_effect", None)
        return data


# ----------------------------------------------------------------------------- embedding


class EmbeddingConfig(TransformerFamily):
    """The token embedding W_E and the output side that shares it."""

    kinds: ClassVar[dict[str, type[FamilyConfig]]] = {}
    default_kind: ClassVar[str] = "learned"
    family_name: ClassVar[str] = "embedding"
    tied: bool = Field(True, description="Logits from W_E^T (false: an output layer of its own).")
    output_bias: bool = Field(False, description="A trainable bias b added to the output logits.")
    dropout: float | None = Field(
        None, ge=0, lt=1, description="Dropout on the embedded tokens (with their positions); "
        "null: the model's dropout. The thesis code's gated and geometric models have none.")


class LearnedEmbedding(EmbeddingConfig):
    kind: Literal["learned"] = "learned"


class OneHotEmbedding(EmbeddingConfig):
    """W_E fixed to the identity (d_model must equal the vocabulary size); tied, the
    decoder is the identity too."""

    kind: Literal["one_hot"] = "one_hot"


# ----------------------------------------------------------------------------- positions


class PositionsConfig(TransformerFamily):
    kinds: ClassVar[dict[str, type[FamilyConfig]]] = {}
    default_kind: ClassVar[str] = "learned"
    family_name: ClassVar[str] = "positions"


_MAX_LEN = Field(None, ge=1, description="Longest input (null = the task's).")


class LearnedPositions(PositionsConfig):
    kind: Literal["learned"] = "learned"
    max_len: int | None = _MAX_LEN


class SinusoidalPositions(PositionsConfig):
    kind: Literal["sinusoidal"] = "sinusoidal"
    max_len: int | None = _MAX_LEN


class NoPositions(PositionsConfig):
    kind: Literal["none"] = "none"


class RotaryPositions(PositionsConfig):
    kind: Literal["rotary"] = "rotary"
    max_len: int | None = _MAX_LEN


class RelativePositions(PositionsConfig):
    """Transformer-XL relative attention in every layer, no absolute positions."""

    kind: Literal["relative"] = "relative"


# ----------------------------------------------------------------------------- attention


class AttentionConfig(TransformerFamily):
    kinds: ClassVar[dict[str, type[FamilyConfig]]] = {}
    default_kind: ClassVar[str] = "softmax"
    family_name: ClassVar[str] = "attention"


class SoftmaxAttentionConfig(AttentionConfig):
    """Multi-head softmax attention (Transformer-XL relative attention with
    ``positions: relative``); its weights drop out with the model's ``dropout``."""

    kind: Literal["softmax"] = "softmax"
    out_projection: bool = Field(
        True, description="false: no output projection W_O after attention (heads concatenated).")
    uniform: bool = Field(
        False, description="Fix W_Q = W_K = 0: every query attends uniformly to the allowed keys.")
    identity_value: bool = Field(False, description="Fix the value projection W_V to the identity.")
    weight_dropout: float | None = Field(
        None, ge=0, lt=1, description="Dropout on the attention weights; null: the model's "
                                      "dropout. The thesis code's relative attention has none.")
    key_dropout: float = Field(
        0.0, ge=0, lt=1, description="Dropout on the content and position keys before the "
                                     "scores, as the thesis code's relative attention applies its "
                                     "attention_dropout (positions.kind=relative only).")
    bias: bool | None = Field(
        None, description="Biases on the q/k/v and output projections; null: the model's "
                          "`bias`. The thesis code's attention has none.")
    learned_scale: bool = Field(
        False, description="Train the logits' scale, initialised to 1/sqrt(d_head), as the "
                           "thesis code's relative attention (positions.kind=relative only).")


_KEY_DROPOUT = Field(0.0, ge=0, lt=1, description="Dropout on the content and position keys "
                                                  "before the scores (the thesis code's "
                                                  "attention_dropout).")
_ATTENTION_DROPOUT = Field(0.0, ge=0, lt=1, description="Dropout on the content keys "
                                                        "(geometric) / the attention weights.")


class GeometricAttentionConfig(AttentionConfig):
    """Directional geometric attention (NDR, thesis Eqs. 5.6-5.10); bidirectional only."""

    kind: Literal["geometric"] = "geometric"
    dropout: float = _ATTENTION_DROPOUT
    normalize: bool = Field(
        False, description="L1-normalize each row of the attention (off for the thesis code's "
                          "NDR; on for its + geom. layer).")
    kv_bias: bool = Field(
        False, description="Biases on the key and value projections (Eq. 5.10 and the NDR code "
                           "have none; the CTL++ code's NDR has both).")


class AbsRelGatedAttentionConfig(AttentionConfig):
    """Gated absolute/relative attention (thesis appendix D.2); bidirectional only."""

    kind: Literal["abs_rel_gated"] = "abs_rel_gated"
    dropout: float = _ATTENTION_DROPOUT
    key_dropout: float = _KEY_DROPOUT


# ----------------------------------------------------------------------------- ffn


class FFNConfig(TransformerFamily):
    """The MLP sub-block and its approximations (thesis Ch. 7, models/ffn.py, models/moe.py)."""

    kinds: ClassVar[dict[str, type[FamilyConfig]]] = {}
    default_kind: ClassVar[str] = "dense"
    family_name: ClassVar[str] = "ffn"


_D_FF = Field(None, ge=1, description="MLP width (null = 4 * d_model).")
_ACTIVATION = Field("gelu", description="The MLP's activation. A copy-gated block's FFNs take "
                                        "theirs from block.ffn.")


class DenseFFN(FFNConfig):
    kind: Literal["dense"] = "dense"
    d_ff: int | None = _D_FF
    activation: Literal["gelu", "relu"] = _ACTIVATION


class NoFFN(FFNConfig):
    """Blocks without an MLP sub-block."""

    kind: Literal["none"] = "none"


class TopKFFN(FFNConfig):
    """Keep the K largest units of act(W1 x) (Eqs. 7.6-7.7; computed densely)."""

    kind: Literal["topk"] = "topk"
    d_ff: int | None = _D_FF
    top_k: int = Field(ge=1, description="Units kept per token (K).")
    activation: Literal["gelu", "relu"] = _ACTIVATION


class PKMFFN(FFNConfig):
    """Product-key memory (Eq. 7.8, App. F.1.3)."""

    kind: Literal["pkm"] = "pkm"
    heads: int = Field(4, ge=1)
    subkeys: int = Field(ge=1, description="Sub-keys per half (n_sub^2 values).")
    top_k: int = Field(32, ge=1, description="Values chosen per head.")
    score_activation: Literal["relu", "softmax"] = Field(
        "relu", description="Weights of the chosen values: relu of their scores, or one "
                            "softmax over every head's choices.")


class MoEFFN(FFNConfig):
    """The fields of the mixture-of-experts kinds (models/moe.py)."""

    experts: int = Field(ge=1, description="Number of experts N_E.")
    expert_size: int = Field(ge=1, description="Expert size G.")
    top_k: int = Field(ge=1, description="Experts per token K.")
    impl: Literal["masked", "sorted"] = Field(
        "masked", description="masked: every expert computed, then weighted (vmap-able); "
                              "sorted: one matmul per non-empty expert.")
    expert_dropout: float = Field(0.0, ge=0, lt=1, description="Expert dropout delta (training).")
    hidden_dropout: float = Field(0.0, ge=0, lt=1, description="Standard dropout on expert units.")
    reg_weight: float = Field(0.001, ge=0, description="gamma of the balancing loss (Eq. 7.20; "
                                                       "Switch: Eq. 7.16).")
    activation: Literal["gelu", "relu"] = "gelu"


_MOE_INIT = Field("sigma", description="sigma: W2^e std from d_ff = N_E G (Sec. 7.4); "
                                       "standard: from G.")


class SigmaMoEFFN(MoEFFN):
    kind: Literal["sigma_moe"] = "sigma_moe"
    selection: Literal["sigmoid", "softmax_before", "softmax_after"] = Field(
        "sigmoid", description="Score function (Tab. 7.4 ablations).")
    init: Literal["sigma", "standard"] = _MOE_INIT
    reg_scope: Literal["experts", "selected"] = Field(
        "experts", description="What the entropy term (Eq. 7.20) balances: experts, the softmax "
                               "over all N_E logits; selected (softmax_after only), the softmax "
                               "over the K chosen logits, as the authors' code regularises its "
                               "softmax-after-top-K ablation: no pull toward unused experts.")

    @model_validator(mode="after")
    def _check_reg_scope(self):
        if self.reg_scope == "selected" and self.selection != "softmax_after":
            raise ValueError(f"reg_scope=selected regularises the softmax over the K chosen "
                             f"experts, which only selection=softmax_after computes (got "
                             f"selection={self.selection}); set reg_scope=experts")
        return self


class SwitchFFN(MoEFFN):
    kind: Literal["switch"] = "switch"
    loss_scale: Literal["equation", "code"] = Field(
        "equation", description="N_E f.p (equation) or f.p / N_E (code).")


class SBaseFFN(MoEFFN):
    kind: Literal["s_base"] = "s_base"
    init: Literal["sigma", "standard"] = _MOE_INIT


# ----------------------------------------------------------------------------- block


class BlockConfig(TransformerFamily):
    """One layer, and whether one layer is applied at every step."""

    kinds: ClassVar[dict[str, type[FamilyConfig]]] = {}
    default_kind: ClassVar[str] = "plain"
    family_name: ClassVar[str] = "block"
    norm: Literal["pre", "post", "none"] = Field("pre", description="LayerNorm placement.")
    shared: bool = Field(False, description="One layer applied n_layers times (universal "
                                            "transformer).")
    eval_steps: int | None = Field(
        None, ge=1, description="With shared: number of steps in evaluation (null = n_layers).")

    @model_validator(mode="after")
    def _check_steps(self):
        if self.eval_steps is not None and not self.shared:
            raise ValueError("eval_steps needs shared=true (separate layers cannot run more "
                             "steps than they have)")
        return self


class PlainBlockConfig(BlockConfig):
    """pre-LN: x = x + attn(ln_1(x)); x = x + mlp(ln_2(x)). post-LN: x = ln_1(x + attn(x));
    x = ln_2(x + mlp(x))."""

    kind: Literal["plain"] = "plain"
    residual_ablation: list[int] = Field(
        default_factory=list, description="Layers whose two residual connections are removed.")


class CopyGateBlockConfig(BlockConfig):
    """Copy-gated post-LN layer (thesis Eqs. 5.1-5.5): no residual around the data FFN,
    h' = g*u + (1-g)*h with g = sigmoid(FFN_gate(a)). Its data FFN is ffn.d_ff wide."""

    kind: Literal["copy_gate"] = "copy_gate"
    norm: Literal["pre", "post", "none"] = Field("post", description="post (the only placement "
                                                                     "of a copy-gated layer).")
    ffn: Literal["relu", "gelu_residual"] = Field(
        "relu", description="relu: Eqs. 5.2 and 5.5; gelu_residual: the modified NDR of thesis "
                            "App. E -- GELU in both FFNs (Eq. E.1) and a residual around the "
                            "data FFN, u = LN(FFN_data(a) + a) (Eq. E.2).")
    ffn_dropout: float | None = Field(
        None, ge=0, lt=1, description="Dropout inside the data and gate FFNs (null: the model's "
                                      "dropout). The modified NDR of thesis App. E has none "
                                      "there.")
    update_norm: Literal["layernorm", "tanh"] = Field(
        "layernorm", description="Squashing of the update u (Eq. 5.2): layernorm (NDR) or tanh "
                                 "(the non-geometric gated baselines).")
    gate_dropout: float = Field(
        0.0, ge=0, lt=1, description="Training only: probability of zeroing a column's whole "
                                     "gate vector (forces a copy).")
    bias_init: float = Field(-3.0, description="Initial bias of the gate's output layer.")
    data_gain: float | None = Field(
        None, gt=0, description="With init.kind=torch, the Xavier gain of the data FFN's output "
                                "weights (W_2). null: init.ndr_init's -- 5/3 on the NDR layer, "
                                "nn.Linear's init on the tanh-update layers under ndr_init=code. "
                                "The CTL++ code's App. E layer uses 1.")

    @model_validator(mode="after")
    def _check_norm(self):
        if self.norm != "post":
            raise ValueError(f"a copy-gated block is a post-LN layer: set norm=post (got "
                             f"norm={self.norm})")
        return self


# ----------------------------------------------------------------------------- halting


class HaltingConfig(TransformerFamily):
    """Adaptive computation time over the shared layer's steps (thesis appendix D.1)."""

    kinds: ClassVar[dict[str, type[FamilyConfig]]] = {}
    default_kind: ClassVar[str] = "none"
    family_name: ClassVar[str] = "halting"


class NoHalting(HaltingConfig):
    kind: Literal["none"] = "none"


class ACTHalting(HaltingConfig):
    """The fields of both ACT variants; halting only picks each column's readout steps."""

    threshold: float = Field(0.99, gt=0, le=1, description="Halting threshold 1 - eps.")
    loss_weight: float = Field(0.03, ge=0, description="alpha of the ponder loss alpha * mean "
                                                       "remainder R over the real columns.")
    bias_init: float = Field(1.0, description="Initial bias b_H of the halting unit.")


class GravesHalting(ACTHalting):
    """Variant A (Graves)."""

    kind: Literal["graves"] = "graves"


class UTHalting(ACTHalting):
    """Variant U (Dehghani et al.)."""

    kind: Literal["ut"] = "ut"


# ----------------------------------------------------------------------------- init


class InitConfig(TransformerFamily):
    """Weight initialization (models/init.py)."""

    kinds: ClassVar[dict[str, type[FamilyConfig]]] = {}
    default_kind: ClassVar[str] = "default"
    family_name: ClassVar[str] = "init"


class DefaultInit(InitConfig):
    """GPT-2 style N(0, 0.02), residual outputs scaled by depth."""

    kind: Literal["default"] = "default"


class GammaInit(InitConfig):
    """N(0, d_in^-2gamma) (init-scale study)."""

    kind: Literal["gamma"] = "gamma"
    gamma: float = Field(0.5, gt=0, description="sigma = d_in^-gamma.")


class TorchInit(InitConfig):
    """PyTorch's own module inits (embeddings N(0, 1)) with the NDR code's Xavier init of
    geometric attention, relative attention and copy-gated layers."""

    kind: Literal["torch"] = "torch"
    ndr_init: Literal["code", "ctlpp_code", "xavier"] = Field(
        "code", description="code: as the thesis's NDR code ends up -- Xavier weights, the "
                            "directional projection (W_LR, W_RL) and all FFN biases keep "
                            "PyTorch's default init, the query bias starts at 0; relative-"
                            "position attention gets Xavier W_q, [W_kE; W_v], W_kP and zero "
                            "projection biases; the tanh-update gated layers' data FFN output "
                            "keeps nn.Linear's init. ctlpp_code: as code, but geometric "
                            "attention as the CTL++ code's: W_v and W_o Xavier over d -> d, "
                            "projection biases at nn.Linear's init. xavier: Xavier for the "
                            "directional projection too, zero FFN biases, gain 5/3 on every "
                            "data FFN output, relative attention at nn.Linear's init.")


class FanInInit(InitConfig):
    """N(0, 2 / (n_layers fan_in)) (thesis Ch. 7 code)."""

    kind: Literal["fan_in"] = "fan_in"


# ----------------------------------------------------------------------------- the config


FAMILIES: dict[str, type[TransformerFamily]] = {
    "embedding": EmbeddingConfig, "positions": PositionsConfig, "attention": AttentionConfig,
    "ffn": FFNConfig, "block": BlockConfig, "halting": HaltingConfig, "init": InitConfig,
}


class TransformerConfig(ModelConfig):
    name: Literal["transformer"] = "transformer"
    n_layers: int = Field(4, ge=1, description="Layers (with block.shared: steps in training).")
    n_heads: int = Field(4, ge=1)
    d_model: int = Field(128, ge=1)
    attention_mask: Literal["causal", "bidirectional"] = "causal"
    dropout: float = Field(0.0, ge=0, lt=1, description="Dropout on the embeddings, the residual "
                                                        "branches and softmax attention weights.")
    bias: bool = Field(False, description="Biases in linear layers and LayerNorms.")
    readout: Literal["none", "first", "last"] = Field(
        "none", description="Sequence classification from the first or the last real column; "
                            "the model returns logits of shape [batch, 1, vocab].")
    embedding: SerializeAsAny[EmbeddingConfig] = Field(default_factory=LearnedEmbedding)
    positions: SerializeAsAny[PositionsConfig] = Field(default_factory=LearnedPositions)
    attention: SerializeAsAny[AttentionConfig] = Field(default_factory=SoftmaxAttentionConfig)
    ffn: SerializeAsAny[FFNConfig] = Field(default_factory=DenseFFN)
    block: SerializeAsAny[BlockConfig] = Field(default_factory=PlainBlockConfig)
    halting: SerializeAsAny[HaltingConfig] = Field(default_factory=NoHalting)
    init: SerializeAsAny[InitConfig] = Field(default_factory=DefaultInit)

    @model_validator(mode="before")
    @classmethod
    def _migrate(cls, data: Any) -> Any:
        """A section written the old flat way (or partly) is moved into the families."""
        if isinstance(data, dict):
            return legacy.migrate_model_config(data, check_effects=_CHECK_EFFECTS.get())
        return data

    @field_validator(*FAMILIES, mode="before")
    @classmethod
    def _dispatch(cls, value: Any, info) -> Any:
        return FAMILIES[info.field_name].dispatch(value)

    @model_validator(mode="after")
    def _check(self):
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} must be divisible by n_heads={self.n_heads}")
        positions, attention, ffn, block = self.positions, self.attention, self.ffn, self.block
        if positions.kind == "rotary" and (self.d_model // self.n_heads) % 2:
            raise ValueError("rotary positions need an even head dimension (d_model / n_heads)")
        if block.kind == "plain":
            bad = [i for i in block.residual_ablation if not 0 <= i < self.n_layers]
            if bad:
                raise ValueError(f"block.residual_ablation has layer indices {bad} outside "
                                 f"0..{self.n_layers - 1}")
        self._check_ffn()
        if attention.kind != "softmax":
            if self.attention_mask != "bidirectional":
                raise ValueError(f"attention.kind={attention.kind} is bidirectional only; set "
                                 "attention_mask=bidirectional")
            if positions.kind in ("rotary", "relative"):
                raise ValueError(f"attention.kind={attention.kind} brings its own positional "
                                 f"signal; positions.kind={positions.kind} cannot be combined "
                                 "with it (set positions.kind=none)")
        elif attention.key_dropout and positions.kind != "relative":
            raise ValueError(f"attention.key_dropout={attention.key_dropout} drops the keys of "
                             "relative attention: set positions.kind=relative, or "
                             "attention.weight_dropout for other positions")
        elif attention.learned_scale and positions.kind != "relative":
            raise ValueError("attention.learned_scale trains the scale of relative attention: "
                             "set positions.kind=relative, or learned_scale=false")
        elif (attention.uniform or attention.identity_value) and (
                block.shared or positions.kind == "relative"):
            raise ValueError("attention.uniform / attention.identity_value fix the weights of "
                             "softmax attention in separate layers: set block.shared=false and "
                             "a positions.kind other than relative")
        if block.kind == "copy_gate" and ffn.kind != "dense":
            raise ValueError("a copy-gated block builds its own data and gate FFNs (ffn.d_ff "
                             f"wide): set ffn.kind=dense (got ffn.kind={ffn.kind})")
        if self.halting.kind != "none" and not block.shared:
            raise ValueError(f"halting.kind={self.halting.kind} halts over the steps of one "
                             "shared layer: set block.shared=true")
        if (_CHECK_EFFECTS.get() and block.kind == "copy_gate" and block.data_gain is not None
                and self.init.kind != "torch"):
            raise ValueError(f"block.data_gain={block.data_gain} is a Xavier gain of "
                             "init.kind=torch: set init.kind=torch, or leave data_gain at null")
        return self

    def _check_ffn(self) -> None:
        ffn = self.ffn
        if ffn.kind == "topk" and ffn.top_k > (ffn.d_ff or 4 * self.d_model):
            raise ValueError(f"ffn.top_k={ffn.top_k} is larger than d_ff="
                             f"{ffn.d_ff or 4 * self.d_model}")
        if ffn.kind == "pkm" and self.d_model % 2:
            raise ValueError(f"ffn.kind=pkm splits x into halves: d_model={self.d_model} must "
                             "be even")
        if ffn.kind in MOE_KINDS and ffn.top_k > ffn.experts:
            raise ValueError(f"ffn.top_k={ffn.top_k} is larger than ffn.experts={ffn.experts}; "
                             "choose K <= N_E")

    def evaluation_statistics(self) -> list[str]:
        return ["act_steps"] if self.halting.kind != "none" else []

    # ------------------------------------------------------------------ the old layout

    def hash_fields(self) -> dict[str, Any]:
        """The old flat fields this config stands for, non-defaults only: the run id of a
        nested config is the one its flat form had."""
        return legacy.legacy_model_config(self)

    def legacy_fields(self) -> dict[str, Any]:
        return legacy.legacy_model_config(self, non_default=False)

    @classmethod
    def input_aliases(cls) -> list[str]:
        return sorted(legacy.LEGACY_NAMES)

    @classmethod
    def input_path(cls, path: list[str], value: Any = None) -> tuple[list[str], Any]:
        return legacy.legacy_path(path, value)

    @classmethod
    def set_input(cls, section: dict[str, Any], path: list[str], value: Any) -> None:
        """Old names are set as written (the validation migrates them, a flat field
        winning over its family); a family path first moves the flat fields already there
        into the families, so that the later setting wins; ``ffn=topk`` over a family
        mapping sets its kind and keeps its other fields, as the old switch did."""
        head = path[0]
        if head in FAMILIES and (len(path) > 1 or isinstance(value, dict)):
            migrated = legacy.migrate_model_config(section, partial=True)
            if migrated is not section:
                section.clear()
                section.update(migrated)
        elif len(path) == 1 and isinstance(value, str) and isinstance(section.get(head), dict) \
                and head in FAMILIES:
            section[head]["kind"] = value
            return
        set_path(section, path, value)


__all__ = ["FAMILIES", "MOE_KINDS", "TransformerConfig", "TransformerFamily"]
