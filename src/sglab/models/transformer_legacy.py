"""The transformer config's old flat layout, and the one migration between it and the families.

Until the config families (``models/transformer_config.py``), a transformer's model
section was one flat mapping of 55 fields (``pos_encoding``, ``d_ff``, ``copy_gate``,
``act_threshold``, ...). That layout is still read everywhere a config comes from
(stored runs' config.yaml, user YAML, ``--set model.pos_encoding=none``, experiment
specs), and it still defines the run id: :func:`legacy_model_config` maps a nested
config back to the flat fields it replaces, and ``RunConfig.config_hash`` hashes those,
so one config has one run id whichever layout it was written in.

* :func:`migrate_model_config` -- flat (or partly flat) dict -> nested dict;
* :func:`legacy_model_config` -- nested config -> flat dict (non-defaults: what the hash
  reads);
* :func:`legacy_path` -- a flat name's place in the families (``pos_encoding`` ->
  ``positions.kind``), for dotted keys (``--where``, grid axes).

A flat field whose family kind does not use it (``attention_dropout`` with softmax
attention) had no effect. Left at its default it is dropped; set away from it, it is the
error it always was in a new config (``check_effects``), and in the config of an existing
run it is kept under its family's ``no_effect`` (so that the run keeps its id).
"""

from __future__ import annotations

import copy
from typing import Any, Literal

from pydantic import Field, ValidationError

from sglab.config import StrictModel, _shown


class LegacyTransformerFields(StrictModel):
    """The flat transformer config as it was (types, bounds, defaults; the switches'
    checks live in the families now). Only read to coerce flat values and to know their
    defaults."""

    name: Literal["transformer"] = "transformer"
    n_layers: int = Field(4, ge=1)
    n_heads: int = Field(4, ge=1)
    d_model: int = Field(128, ge=1)
    d_ff: int | None = Field(None, ge=1)
    pos_encoding: Literal["learned", "sinusoidal", "none", "rotary", "relative"] = "learned"
    attention_mask: Literal["causal", "bidirectional"] = "causal"
    norm: Literal["pre", "post", "none"] = "pre"
    residual_ablation: list[int] = Field(default_factory=list)
    activation: Literal["gelu", "relu"] = "gelu"
    init: Literal["default", "gamma", "torch", "fan_in"] = "default"
    init_gamma: float = Field(0.5, gt=0)
    tie_embeddings: bool = True
    dropout: float = Field(0.0, ge=0, lt=1)
    bias: bool = False
    max_len: int | None = Field(None, ge=1)
    ffn: Literal["dense", "none", "topk", "pkm", "sigma_moe", "switch", "s_base"] = "dense"
    ffn_top_k: int | None = Field(None, ge=1)
    pkm_heads: int = Field(4, ge=1)
    pkm_subkeys: int | None = Field(None, ge=1)
    pkm_top_k: int = Field(32, ge=1)
    pkm_activation: Literal["relu", "softmax"] = "relu"
    moe_experts: int | None = Field(None, ge=1)
    moe_expert_size: int | None = Field(None, ge=1)
    moe_top_k: int | None = Field(None, ge=1)
    moe_impl: Literal["masked", "sorted"] = "masked"
    moe_selection: Literal["sigmoid", "softmax_before", "softmax_after"] = "sigmoid"
    moe_init: Literal["sigma", "standard"] = "sigma"
    moe_reg_scope: Literal["experts", "selected"] = "experts"
    expert_dropout: float = Field(0.0, ge=0, lt=1)
    expert_hidden_dropout: float = Field(0.0, ge=0, lt=1)
    moe_reg_weight: float = Field(0.001, ge=0)
    switch_loss_scale: Literal["equation", "code"] = "equation"
    embedding: Literal["learned", "one_hot"] = "learned"
    embedding_dropout: float | None = Field(None, ge=0, lt=1)
    uniform_attention: bool = False
    identity_value: bool = False
    attention_out_projection: bool = True
    output_bias: bool = False
    attention: Literal["softmax", "geometric", "abs_rel_gated"] = "softmax"
    attention_dropout: float = Field(0.0, ge=0, lt=1)
    attention_weight_dropout: float | None = Field(None, ge=0, lt=1)
    attention_key_dropout: float = Field(0.0, ge=0, lt=1)
    attention_bias: bool | None = None
    attention_learned_scale: bool = False
    geometric_normalize: bool = False
    geometric_kv_bias: bool = False
    copy_gate: bool = False
    copy_gate_bias_init: float = -3.0
    copy_gate_ffn_dropout: float | None = Field(None, ge=0, lt=1)
    copy_gate_data_gain: float | None = Field(None, gt=0)
    gate_dropout: float = Field(0.0, ge=0, lt=1)
    update_norm: Literal["layernorm", "tanh"] = "layernorm"
    shared_layers: bool = False
    eval_steps: int | None = Field(None, ge=1)
    readout: Literal["none", "first", "last"] = "none"
    act: Literal["none", "graves", "ut"] = "none"
    act_threshold: float = Field(0.99, gt=0, le=1)
    act_loss_weight: float = Field(0.03, ge=0)
    act_bias_init: float = 1.0
    copy_gate_ffn: Literal["relu", "gelu_residual"] = "relu"
    ndr_init: Literal["code", "ctlpp_code", "xavier"] = "code"


LEGACY_DEFAULTS: dict[str, Any] = LegacyTransformerFields().model_dump(mode="json")

#: Flat fields kept as they were: the top-level fields every transformer has.
COMMON = ("name", "n_layers", "n_heads", "d_model", "attention_mask", "dropout", "bias",
          "readout")

#: family -> the flat field that chose its kind
KIND_KEYS = {"embedding": "embedding", "positions": "pos_encoding", "attention": "attention",
             "ffn": "ffn", "block": "copy_gate", "halting": "act", "init": "init"}

_MOE = {"experts": "moe_experts", "expert_size": "moe_expert_size", "top_k": "moe_top_k",
        "impl": "moe_impl", "expert_dropout": "expert_dropout",
        "hidden_dropout": "expert_hidden_dropout", "reg_weight": "moe_reg_weight",
        "activation": "activation"}
_HALTING = {"threshold": "act_threshold", "loss_weight": "act_loss_weight",
            "bias_init": "act_bias_init"}
_BLOCK = {"norm": "norm", "shared": "shared_layers", "eval_steps": "eval_steps"}
_EMBEDDING = {"tied": "tie_embeddings", "output_bias": "output_bias",
              "dropout": "embedding_dropout"}

#: family -> kind -> {its field: the flat field it was}. Kinds in the order of the old
#: switch's values (messages list them so).
FIELDS: dict[str, dict[str, dict[str, str]]] = {
    "embedding": {"learned": _EMBEDDING, "one_hot": _EMBEDDING},
    "positions": {"learned": {"max_len": "max_len"}, "sinusoidal": {"max_len": "max_len"},
                  "none": {}, "rotary": {"max_len": "max_len"}, "relative": {}},
    "attention": {
        "softmax": {"out_projection": "attention_out_projection",
                    "uniform": "uniform_attention", "identity_value": "identity_value",
                    "weight_dropout": "attention_weight_dropout",
                    "key_dropout": "attention_key_dropout", "bias": "attention_bias",
                    "learned_scale": "attention_learned_scale"},
        "geometric": {"dropout": "attention_dropout", "normalize": "geometric_normalize",
                      "kv_bias": "geometric_kv_bias"},
        "abs_rel_gated": {"dropout": "attention_dropout", "key_dropout": "attention_key_dropout"},
    },
    "ffn": {
        "dense": {"d_ff": "d_ff", "activation": "activation"},
        "none": {},
        "topk": {"d_ff": "d_ff", "top_k": "ffn_top_k", "activation": "activation"},
        "pkm": {"heads": "pkm_heads", "subkeys": "pkm_subkeys", "top_k": "pkm_top_k",
                "score_activation": "pkm_activation"},
        "sigma_moe": {**_MOE, "selection": "moe_selection", "init": "moe_init",
                      "reg_scope": "moe_reg_scope"},
        "switch": {**_MOE, "loss_scale": "switch_loss_scale"},
        "s_base": {**_MOE, "init": "moe_init"},
    },
    "block": {
        "plain": {**_BLOCK, "residual_ablation": "residual_ablation"},
        "copy_gate": {**_BLOCK, "ffn": "copy_gate_ffn", "ffn_dropout": "copy_gate_ffn_dropout",
                      "update_norm": "update_norm", "gate_dropout": "gate_dropout",
                      "bias_init": "copy_gate_bias_init", "data_gain": "copy_gate_data_gain"},
    },
    "halting": {"none": {}, "graves": _HALTING, "ut": _HALTING},
    "init": {"default": {}, "gamma": {"gamma": "init_gamma"}, "torch": {"ndr_init": "ndr_init"},
             "fan_in": {}},
}

#: (family, kind) -> fields whose default in that kind differs from the flat field's: a flat
#: config that chose the kind without them meant the flat default (copy_gate: true alone
#: meant norm: pre, which a copy-gated block rejects, as before)
BEFORE_DEFAULTS: dict[tuple[str, str], tuple[str, ...]] = {("block", "copy_gate"): ("norm",)}

#: every flat field that moved into a family -> that family
FAMILY_OF: dict[str, str] = {
    **{old: family for family, kinds in FIELDS.items() for names in kinds.values()
       for old in names.values()},
    **{old: family for family, old in KIND_KEYS.items()},
}
#: flat names that are also family names (a string there is the old switch: the kind)
SHARED_NAMES = frozenset(FAMILY_OF) & frozenset(FIELDS)
LEGACY_NAMES = frozenset(FAMILY_OF) - SHARED_NAMES


def _kind(family: str, value: Any) -> Any:
    """The kind that the old switch's ``value`` chose (``copy_gate: true`` -> copy_gate)."""
    if family == "block" and isinstance(value, bool):
        return "copy_gate" if value else "plain"
    return value


def _switch(family: str, kind: str) -> Any:
    """The old switch's value for ``kind`` (the inverse of :func:`_kind`)."""
    return kind == "copy_gate" if family == "block" else kind


def is_flat_key(key: str, value: Any) -> bool:
    """Whether ``key: value`` in a transformer's model section is written the old flat way."""
    return key in LEGACY_NAMES or (key in SHARED_NAMES and isinstance(value, str))


def _coerce(flat: dict[str, Any], lenient: bool) -> dict[str, Any]:
    """The flat values validated as the old fields were (``-1`` -> ``-1.0``). ``lenient``:
    a value that does not validate is left as written (a later validation reports it)."""
    if not lenient:
        valid = LegacyTransformerFields.model_validate(flat)
        return {key: getattr(valid, key) for key in flat}
    out = {}
    for key, value in flat.items():
        try:
            out[key] = getattr(LegacyTransformerFields.model_validate({key: value}), key)
        except ValidationError:
            out[key] = value
    return out


def acting_kinds(old: str) -> list[str]:
    """The kinds of its family in which the flat field ``old`` has an effect."""
    return [kind for kind, names in FIELDS[FAMILY_OF[old]].items() if old in names.values()]


#: flat fields that need a setting of another family too (checked by TransformerConfig)
NEEDS_TOO = {"copy_gate_data_gain": "init=torch"}


def needs(old: str) -> str:
    """The old switch setting that ``old`` needs, as the old messages said it
    (``attention=geometric or attention=abs_rel_gated``, ``ffn=dense, topk or pkm``)."""
    family = FAMILY_OF[old]
    key = KIND_KEYS[family]
    values = [_shown(_switch(family, kind)) for kind in acting_kinds(old)]
    if len(values) == 2:
        text = f"{key}={values[0]} or {key}={values[1]}"
    elif len(values) > 2:
        text = f"{key}={', '.join(values[:-1])} or {values[-1]}"
    else:
        text = f"{key}={values[0]}"
    return f"{text} and {NEEDS_TOO[old]}" if old in NEEDS_TOO else text


def no_effect_message(old: str, value: Any) -> str:
    return (f"{old}={_shown(value)} has no effect without {needs(old)}: set {needs(old)}, or "
            f"leave {old} at its default ({_shown(LEGACY_DEFAULTS[old])})")


def migrate_model_config(data: dict[str, Any], check_effects: bool = True,
                         partial: bool = False) -> dict[str, Any]:
    """A transformer's model section with its flat fields moved into their families.

    ``data`` may be flat, nested or both (a nested config with old-style overrides on
    top); a flat field wins over what its family says. A flat field that the family's kind
    does not use is dropped when it holds its old default; otherwise it is an error
    (``check_effects``, as the old effect checks said it) or, for the config of an existing
    run, kept under the family's ``no_effect``. ``partial``: leave such fields (and values
    that do not validate) flat, for a later override or the validation to settle -- what
    applying dotted overrides one by one needs. Keys of neither layout are kept as they
    are (the validation names them).
    """
    flat = {key: value for key, value in data.items() if is_flat_key(key, value)}
    if not flat:
        return data
    values = _coerce(flat, lenient=partial)
    out = {key: copy.deepcopy(value) for key, value in data.items() if key not in flat}
    problems, left = [], {}
    for family, kind_key in KIND_KEYS.items():
        moved = [old for old in values if FAMILY_OF[old] == family and old != kind_key]
        if kind_key not in values and not moved:
            continue
        section = out.get(family)
        if hasattr(section, "model_dump"):  # an instance of the family
            section = section.model_dump(mode="json")
        if isinstance(section, str):
            section = {"kind": section}
        elif section is None:
            section = {}
        elif not isinstance(section, dict):  # the validation names the bad value
            left.update({old: flat[old] for old in [kind_key, *moved] if old in flat})
            continue
        if kind_key in values:
            section["kind"] = _kind(family, values[kind_key])
            for old in BEFORE_DEFAULTS.get((family, section["kind"]), ()):
                new = next(n for n, o in FIELDS[family][section["kind"]].items() if o == old)
                if old not in values and new not in section:
                    section[new] = LEGACY_DEFAULTS[old]  # the flat layout's default
        fields = FIELDS[family].get(section.get("kind", DEFAULT_KINDS[family]))
        if fields is None:  # an unknown kind: the validation names it
            out[family] = section
            left.update({old: flat[old] for old in moved})
            continue
        places = {old: new for new, old in fields.items()}
        for old in moved:
            value = values[old]
            if old in places:
                section[places[old]] = value
            elif value == LEGACY_DEFAULTS[old]:
                continue
            elif partial:
                left[old] = flat[old]
            elif check_effects:
                problems.append(no_effect_message(old, value))
            else:
                section.setdefault("no_effect", {})[old] = value
        out[family] = section
    if problems:
        raise ValueError("; ".join(problems))
    out.update(left)
    return out


#: the kind a family takes when nothing names one (the old switches' defaults)
DEFAULT_KINDS = {family: _kind(family, LEGACY_DEFAULTS[key]) for family, key in KIND_KEYS.items()}


def legacy_model_config(config: Any, non_default: bool = True) -> dict[str, Any]:
    """The flat fields a transformer config (a TransformerConfig or its dict) stands for.

    ``non_default``: only those that differ from the old defaults -- exactly what the old
    flat config's ``model_dump(exclude_defaults=True)`` held, which the run id hashes."""
    data = config if isinstance(config, dict) else config.model_dump(mode="json")
    flat = {key: data[key] for key in COMMON if key in data}
    for family, kind_key in KIND_KEYS.items():
        section = data[family]
        flat[kind_key] = _switch(family, section["kind"])
        for new, old in FIELDS[family][section["kind"]].items():
            flat[old] = section[new]
        flat.update(section.get("no_effect") or {})
    if non_default:
        return {key: value for key, value in flat.items() if value != LEGACY_DEFAULTS[key]}
    return {**LEGACY_DEFAULTS, **flat}


def legacy_path(path: list[str], value: Any = None) -> tuple[list[str], Any]:
    """Where a flat field's dotted key points in the families, and its value there:
    ``pos_encoding`` -> ``positions.kind``, ``copy_gate=true`` -> ``block.kind=copy_gate``,
    ``pkm_top_k`` -> ``ffn.top_k``. Other paths come back unchanged."""
    if len(path) != 1 or not is_flat_key(path[0], value if value is not None else ""):
        return path, value
    old = path[0]
    family = FAMILY_OF[old]
    if KIND_KEYS[family] == old:
        return [family, "kind"], _kind(family, value)
    new = next(new for kind in acting_kinds(old) for new, name in FIELDS[family][kind].items()
               if name == old)
    return [family, new], value


def check_no_effect(family: str, kind: str, no_effect: dict[str, Any]) -> dict[str, Any]:
    """A family's ``no_effect`` settings validated: flat fields of this family that its
    kind does not use, each away from its old default. Returns them coerced."""
    problems = []
    for old in no_effect:
        if FAMILY_OF.get(old) != family or old == KIND_KEYS[family]:
            problems.append(f"{old!r} is not a flat field of the {family} family")
        elif old in FIELDS[family][kind].values():
            new = next(n for n, o in FIELDS[family][kind].items() if o == old)
            problems.append(f"{old} has an effect with kind {kind}: set {family}.{new} instead")
    if problems:
        raise ValueError("no_effect: " + "; ".join(problems))
    values = _coerce(dict(no_effect), lenient=False)
    defaults = [old for old, value in values.items() if value == LEGACY_DEFAULTS[old]]
    if defaults:
        raise ValueError(f"no_effect: {', '.join(defaults)} at the old default changes nothing; "
                         "leave it out")
    return values


__all__ = ["COMMON", "FIELDS", "KIND_KEYS", "LEGACY_DEFAULTS", "LegacyTransformerFields",
           "check_no_effect", "is_flat_key", "legacy_model_config", "legacy_path",
           "migrate_model_config"]
