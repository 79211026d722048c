"""Typed configuration: one tree of pydantic models, YAML files and dotted overrides.

A run is fully described by a :class:`RunConfig`. Task and model sections are
dispatched on their ``name`` field to the config class that the task or model
registered (see :mod:`sglab.registry`), so each task keeps its own options next
to its code while the tree stays strictly validated: unknown keys are errors that
name the nearest valid key.
"""

from __future__ import annotations

import copy
import difflib
import hashlib
import json
import re
import reprlib
import warnings
from contextvars import ContextVar
from pathlib import Path
from typing import Any, ClassVar, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializeAsAny,
    ValidationError,
    field_validator,
    model_validator,
)

from sglab.errors import SglabError


class StrictModel(BaseModel):
    """Base for every config section: unknown keys, silent coercions and non-finite floats
    (``.inf``, ``.nan``: no setting means them) are errors."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)


LEGACY_TEST_SPLIT = "test"


class TaskConfig(StrictModel):
    """Fields every task shares. Tasks subclass this and register the subclass."""

    name: str
    data_seed: int = Field(0, description="Seed of the data generator (same data across run seeds).")

    split_metrics: ClassVar[tuple[str, ...]] = ("exact_match", "loss")
    required_loss: ClassVar[str | None] = None  # the train.loss the task's targets need

    def evaluation_splits(self) -> list[str] | None:
        """Names of the splits the Trainer evaluates, computed from the config alone (no
        data is built). None: known only once the data exists, so metric names in the
        train section are not checked against them."""
        return None

    def test_split(self) -> str | None:
        """The held-out split a study's claims are measured on: ``ood_test`` where the task
        has one, else ``iid_test`` (None: unknown before the data is built)."""
        splits = self.evaluation_splits() or []
        return next((split for split in ("ood_test", "iid_test") if split in splits), None)

    def default_target_metric(self) -> str | None:
        """``train.target_metric`` when it is null: the test split's exact match (or
        accuracy, for tasks scored per position)."""
        test = self.test_split()
        score = next((m for m in ("exact_match", "accuracy") if m in self.split_metrics), None)
        return f"{test}/{score}" if test and score else None

    def current_split_name(self, name: str) -> str:
        """The name of split ``name`` today. Before split names said what they are, the
        test split was called ``test``; that name is still accepted in configs (for one
        release) and means :meth:`test_split`."""
        if name == LEGACY_TEST_SPLIT and name not in (self.evaluation_splits() or [name]):
            return self.test_split() or name
        return name

    def evaluation_metrics(self) -> list[str] | None:
        """Every ``<split>/<metric>`` name an evaluation reports (breakdowns such as
        ``test/exact_match/carries=2`` extend a name after a '/'), or None if unknown."""
        splits = self.evaluation_splits()
        if splits is None:
            return None
        return [f"{split}/{metric}" for split in splits for metric in self.split_metrics]


class ModelConfig(StrictModel):
    """Fields every model shares. Models subclass this and register the subclass."""

    name: str

    def evaluation_statistics(self) -> list[str]:
        """Names of the forward-pass statistics the model reports in evaluation (logged as
        ``<split>/<name>``, e.g. ``act_steps``)."""
        return []

    def check_train(self, train: TrainConfig) -> None:
        """Raise ValueError if this model cannot train with these train settings (e.g. a
        batch size it cannot split)."""

    def network_config(self, runs_dir: str | Path | None) -> ModelConfig:
        """The config of the network this model computes with, which a task checks it
        against: itself, or for a model built on another run (``masked``) that run's."""
        return self

    def hash_fields(self) -> dict[str, Any]:
        """The values that identify this model in the run id (:meth:`RunConfig.config_hash`):
        the fields that differ from their defaults, as JSON values. A model whose config
        changed its layout maps itself back to the layout its run ids were made with."""
        return self.model_dump(mode="json", exclude_defaults=True)

    def legacy_fields(self) -> dict[str, Any]:
        """Every setting under the names of an older layout of this config that the input
        still accepts (``{}``: none); read by :meth:`RunConfig.value_at` for those names."""
        return {}

    # How a section of this model is read from dicts and dotted keys. A model whose config
    # changed its layout accepts the old names here (a flat transformer config, say).

    @classmethod
    def input_aliases(cls) -> list[str]:
        """Keys the section accepts besides its fields (older names), for "did you mean"."""
        return []

    @classmethod
    def input_path(cls, path: list[str], value: Any = None) -> tuple[list[str], Any]:
        """The current path (inside the section) and value of a dotted key as written,
        e.g. an older name's new place (``pos_encoding`` -> ``positions.kind``)."""
        return path, value

    @classmethod
    def set_input(cls, section: dict[str, Any], path: list[str], value: Any) -> None:
        """Apply the dotted override ``path = value`` (inside the section) to the raw
        section dict, in place."""
        set_path(section, path, value)


class FamilyConfig(StrictModel):
    """A sub-config dispatched on ``kind``, as task and model sections are on ``name``.

    A family is a direct subclass that sets ``kinds = {}`` and ``default_kind``; each of
    its kinds subclasses it with ``kind: Literal["<kind>"] = "<kind>"`` and registers itself.
    A family's field takes a mapping (``{kind: topk, top_k: 64}``; without ``kind`` the
    default kind), a bare kind (``none``) or an instance; its fields are those of its kind
    only, so a field that a kind does not use is an unknown key there.
    """

    kind: str
    kinds: ClassVar[dict[str, type[FamilyConfig]]] = {}
    default_kind: ClassVar[str] = ""
    family_name: ClassVar[str] = "family"  # how messages name the family (e.g. ffn)

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        kind = cls.model_fields["kind"].default
        if isinstance(kind, str) and kind:
            cls.family().kinds[kind] = cls

    @classmethod
    def family(cls) -> type[FamilyConfig]:
        """The family base class (the class that holds ``kinds``)."""
        return next(c for c in cls.__mro__ if "kinds" in c.__dict__ and c is not FamilyConfig)

    @classmethod
    def kind_class(cls, value: Any) -> type[FamilyConfig] | None:
        """The class of the kind that ``value`` (a mapping, a kind or None) names."""
        family = cls.family()
        if isinstance(value, str):
            return family.kinds.get(value)
        kind = value.get("kind", family.default_kind) if isinstance(value, dict) else \
            family.default_kind
        return family.kinds.get(kind) if isinstance(kind, str) else None

    @classmethod
    def dispatch(cls, value: Any) -> Any:
        """Validate ``value`` into the class of its kind (a field validator's job)."""
        family = cls.family()
        if isinstance(value, family):
            return value
        if isinstance(value, str):
            value = {"kind": value}
        if not isinstance(value, dict):
            raise ValueError(f"{family.family_name} must be a mapping with a 'kind' (one of: "
                             f"{', '.join(family.kinds)}) or a kind name")
        kind = value.get("kind", family.default_kind)
        if not isinstance(kind, str) or kind not in family.kinds:
            near = difflib.get_close_matches(str(kind), list(family.kinds), n=1, cutoff=0.4)
            hint = f" Did you mean {near[0]!r}?" if near else ""
            raise ValueError(f"unknown {family.family_name} kind {kind!r}.{hint} Known: "
                             f"{', '.join(family.kinds)}")
        fields = family.kinds[kind].model_fields
        value = {key: item for key, item in value.items()
                 if key in fields or not family._left_at_default(key, item)}
        return family.kinds[kind].model_validate({**value, "kind": kind})

    @classmethod
    def _left_at_default(cls, key: str, value: Any) -> bool:
        """Whether ``key: value`` is a field of another kind of the family at its default
        there: what a written-out config still holds after an override changed its kind
        (``{kind: none, max_len: null}``). Such a key is dropped, as a field left at its
        default is no setting; set to anything else, it is an unknown key of this kind."""
        for other in cls.kinds.values():
            field = other.model_fields.get(key)
            if field is not None and not field.is_required() and \
                    field.get_default(call_default_factory=True) == value:
                return True
        return False

    @classmethod
    def visible_fields(cls) -> list[str]:
        """The keys an error lists as valid here (fields marked ``hidden`` are left out)."""
        return [name for name, field in cls.model_fields.items()
                if not (isinstance(field.json_schema_extra, dict)
                        and field.json_schema_extra.get("hidden"))]


def _shown(value: Any) -> str:
    """A config value as a user writes it in YAML (true, null, tanh, 0.1)."""
    if isinstance(value, str):
        return value
    if value is None or isinstance(value, bool | list | tuple):
        return json.dumps(list(value) if isinstance(value, tuple) else value)
    return repr(value)


# False while validating the config of an existing run (see validate)
_CHECK_EFFECTS: ContextVar[bool] = ContextVar("check_effects", default=True)


def check_switches(config: BaseModel, effective: dict[str, tuple[bool, str]]) -> None:
    """Reject fields that were set away from their default where they have no effect.

    ``effective`` maps a field name to (whether the field has an effect in this
    configuration, the switch it needs, e.g. ``"copy_gate=true"``). A field left at its
    default is always fine, so configs (and run ids) that never set it are unaffected.
    Raises ValueError naming every such field and the switch it needs.
    """
    if not _CHECK_EFFECTS.get():
        return
    problems = []
    for field_name, (has_effect, switch) in effective.items():
        value = getattr(config, field_name)
        default = type(config).model_fields[field_name].get_default(call_default_factory=True)
        if has_effect or value == default:
            continue
        problems.append(f"{field_name}={_shown(value)} has no effect without {switch}: set "
                            f"{switch}, or leave {field_name} at its default ({_shown(default)})")
    if problems:
        raise ValueError("; ".join(problems))


class TrainConfig(StrictModel):
    steps: int = Field(3000, ge=1, description="Number of optimizer steps.")
    batch_size: int = Field(256, ge=1)
    lr: float = Field(1e-3, gt=0)
    min_lr: float = Field(1e-4, ge=0, description="End of the cosine schedule.")
    lr_schedule: Literal["cosine", "constant"] = "cosine"
    warmup_steps: int = Field(100, ge=0)
    betas: tuple[float, float] = (0.9, 0.99)
    weight_decay: float = Field(0.1, ge=0, description="AdamW decay (L2 for SGD / RMSprop), "
                                                       "on the tensors weight_decay_on names.")
    weight_decay_on: Literal["matrices", "all"] = Field(
        "matrices", description="matrices: decay 2-D weights only, not biases, norm gains or "
                                "scalars; all: every parameter, as torch.optim.AdamW(model."
                                "parameters()) in the thesis's code.")
    grad_clip: float | None = Field(1.0, gt=0, description="Max global grad norm; null = off.")
    eval_interval: int = Field(250, ge=1)
    eval_batch_size: int = Field(1024, ge=1)
    eval_max_examples: int | None = Field(
        None, ge=1, description="Evaluate on at most this many examples per split (null = all); "
                                "the last evaluation scores all. Sequence-classification, "
                                "prompt-answer and seq2seq tasks spread them evenly over the "
                                "split; the other tasks take the first ones."
    )
    checkpoint_interval: int = Field(500, ge=1)
    log_interval: int = Field(100, ge=1)
    early_stop_metric: str | None = Field(
        None, description="Stop once this eval metric (e.g. 'iid_valid/exact_match') reaches the "
                          "threshold."
    )
    early_stop_threshold: float | None = None
    target_metric: str | None = Field(
        None, description="Metric whose first crossing of target_threshold is timed; null: the "
                          "task's test split score (e.g. ood_test/exact_match)."
    )
    target_threshold: float = 0.99
    select_on: str | None = Field(
        None, description="Split whose exact match (or accuracy) picks the best checkpoint "
                          "(checkpoints/best.pt, summary 'best'). null: the validation split of "
                          "target_metric if it is one (e.g. ood_valid), else the task's IID "
                          "validation split (iid_valid), else none; never a test split by default."
    )
    device: Literal["auto", "cpu", "cuda"] = "auto"
    threads: int | None = Field(
        None, ge=1, description="torch intra-op threads on CPU (null = leave torch's default)."
    )
    flush_denormal: bool = Field(
        False, description="On CPU, flush subnormal floats (magnitude below 1.2e-38) to zero "
                           "while training and evaluating. Steps of runs whose activations or "
                           "gradients underflow get several times faster "
                           "(benchmarks/denormal_throughput.py); it changes the arithmetic, so "
                           "it is part of the run's config.",
    )
    precision: Literal["float32", "bf16"] = Field(
        "float32", description="bf16 autocast is used on CUDA only; CPU always trains in float32."
    )
    compile: bool = Field(False, description="torch.compile the model, or in an ensemble the members' "
                          "vmapped forward with its dropout masks (slower on small CPU models).")
    optimizer: Literal["adamw", "sgd", "rmsprop"] = Field(
        "adamw", description="adamw (betas, decoupled weight decay), plain sgd (momentum, L2 decay) "
                            "or rmsprop (torch's RMSprop: alpha 0.99, eps 1e-10, momentum, L2 decay).",
    )
    momentum: float = Field(0.0, ge=0, lt=1,
                            description="SGD / RMSProp momentum (optimizer=sgd or rmsprop only).")
    loss: Literal["cross_entropy", "squared", "bits"] = Field(
        "cross_entropy",
        description="squared: sum over the vocabulary of (logit - one-hot target)^2, averaged over "
                    "the target positions. bits: targets are packed bit rows; BCE-with-logits "
                    "summed over bits and steps, divided by the batch rows (bit tasks).",
    )
    loss_reduction: Literal["token_mean", "row_sum"] = Field(
        "token_mean",
        description="token_mean: the loss averaged over the scored target positions. row_sum: "
                    "summed over each example's positions, averaged over the examples (the "
                    "weight-mask code's encoder-decoder loss; a mask penalty beta / batch * "
                    "sum(l) then weighs what it weighs there). bits is per row either way.",
    )
    snapshot_steps: list[int] = Field(
        default_factory=list,
        description="Steps whose model weights are kept as checkpoints/step_<N>.pt for analyses "
                    "of training dynamics (0 = the initialization).",
    )
    weight_norms: list[str] = Field(
        default_factory=list,
        description="Weights whose Frobenius norm is logged at every evaluation as "
                    "'weight_norm/<name>': parameter names or weight views such as "
                    "blocks.0.attn.W_Q (shell wildcards allowed).",
    )

    @field_validator("snapshot_steps")
    @classmethod
    def _check_snapshots(cls, steps: list[int]) -> list[int]:
        if any(step < 0 for step in steps):
            raise ValueError("snapshot steps must be >= 0")
        return sorted(set(steps))

    @model_validator(mode="after")
    def _check_optimizer(self):
        if self.optimizer == "adamw" and self.momentum:
            raise ValueError(f"momentum={self.momentum} is an SGD / RMSProp setting; with "
                             f"optimizer={self.optimizer} leave it at 0 (betas set Adam's momentum)")
        return self

    @model_validator(mode="after")
    def _check_switches(self):
        check_switches(self, {
            "min_lr": (self.lr_schedule == "cosine", "lr_schedule=cosine"),
            "betas": (self.optimizer == "adamw", "optimizer=adamw"),
            "early_stop_threshold": (self.early_stop_metric is not None, "early_stop_metric"),
            "early_stop_metric": (self.early_stop_threshold is not None, "early_stop_threshold"),
            "precision": (self.device != "cpu", "device=cuda or device=auto"),
            "threads": (self.device != "cuda", "device=cpu or device=auto"),
            "flush_denormal": (self.device != "cuda", "device=cpu or device=auto"),
        })
        return self


METRIC_FIELDS = ("early_stop_metric", "target_metric")
"""Train fields that name an evaluation metric; checked against the task's metric names
(``select_on`` names a split and is checked against the task's splits)."""


class RunConfig(StrictModel):
    """Everything that defines one training run. Same config -> same result."""

    seed: int = Field(0, description="Seed of model init, batch order and dropout.")
    task: SerializeAsAny[TaskConfig]
    model: SerializeAsAny[ModelConfig]
    train: TrainConfig = TrainConfig()

    @field_validator("task", mode="before")
    @classmethod
    def _dispatch_task(cls, value: Any) -> Any:
        from sglab import registry

        return registry.validate_section("task", value)

    @field_validator("model", mode="before")
    @classmethod
    def _dispatch_model(cls, value: Any) -> Any:
        from sglab import registry

        return registry.validate_section("model", value)

    @model_validator(mode="after")
    def _check_model_train(self):
        self.model.check_train(self.train)
        return self

    def metric_names(self) -> list[str] | None:
        """Every metric an evaluation of this run logs (a breakdown extends a name after a
        '/'), or None when the task's splits are only known once its data is built."""
        metrics = self.task.evaluation_metrics()
        splits = self.task.evaluation_splits()
        if metrics is None or splits is None:
            return None
        return metrics + [f"{split}/{name}" for split in splits
                          for name in self.model.evaluation_statistics()]

    def logs_metric(self, name: str) -> bool | None:
        """Whether evaluations of this run log the metric ``name`` (None: not known before
        the task's data is built). Breakdowns (``test/exact_match/carries=2``) and the
        logged weight norms (``weight_norm/...``) are accepted without listing them."""
        known = self.metric_names()
        if known is None:
            return None
        if name in known or any(name.startswith(f"{metric}/") for metric in known):
            return True
        return name.startswith("weight_norm/") and bool(self.train.weight_norms)

    @model_validator(mode="after")
    def _rename_legacy_splits(self):
        """Metric and split names written with the old ``test`` split name mean the task's
        test split (:meth:`TaskConfig.current_split_name`); rewritten here, before hashing,
        with a warning. A target metric equal to the task's default is stored as null so it
        cannot change the run id."""
        for field_name in (*METRIC_FIELDS, "select_on"):
            value = getattr(self.train, field_name)
            if value is None:
                continue
            split, _, rest = value.partition("/")
            current = self.task.current_split_name(split)
            if current != split:
                new = "/".join([current, rest]) if rest else current
                warnings.warn(f"train.{field_name}={value}: split {split!r} of task "
                              f"{self.task.name} is now called {current!r}; using {new} (the old "
                              "name is accepted until the next release)", FutureWarning,
                              stacklevel=2)
                setattr(self.train, field_name, new)
        if self.train.target_metric is not None and \
                self.train.target_metric == self.task.default_target_metric():
            self.train.target_metric = None
        return self

    def target_metric(self) -> str | None:
        """``train.target_metric``, or the task's default when it is null."""
        return self.train.target_metric or self.task.default_target_metric()

    @model_validator(mode="after")
    def _check_metric_names(self):
        if not _CHECK_EFFECTS.get():
            return self
        needed = self.task.required_loss
        if needed is not None and self.train.loss != needed:
            raise ValueError(f"task {self.task.name} needs train.loss={needed} (got "
                             f"{self.train.loss})")
        for field_name in METRIC_FIELDS:
            if field_name not in TrainConfig.model_fields:
                continue
            value = getattr(self.train, field_name)
            if value is None or value == TrainConfig.model_fields[field_name].get_default():
                continue
            if self.logs_metric(value) is not False:
                continue
            known = self.metric_names()
            near = difflib.get_close_matches(value, known, n=1, cutoff=0.5)
            hint = f" Did you mean {near[0]!r}?" if near else ""
            raise ValueError(
                f"train.{field_name}={value} is not a metric that task {self.task.name} logs "
                f"with model {self.model.name}.{hint} Metrics: {', '.join(known)} (a breakdown "
                "such as test/exact_match/<group>=<value> extends one of these)")
        splits = self.task.evaluation_splits()
        if self.train.select_on is not None and splits is not None and self.train.select_on not in splits:
            near = difflib.get_close_matches(self.train.select_on, splits, n=1, cutoff=0.5)
            hint = f" Did you mean {near[0]!r}?" if near else ""
            raise ValueError(f"train.select_on={self.train.select_on} is not a split that task "
                             f"{self.task.name} evaluates.{hint} Splits: {', '.join(splits)}")
        return self

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def config_hash(self) -> str:
        """Stable hash of the config (seed included).

        Only values that differ from their field's default enter the hash, so adding a
        new option with a default keeps the ids (and stored results) of existing runs. The
        model section enters as :meth:`ModelConfig.hash_fields` gives it: a transformer's
        nested families as the flat fields they replaced, so a run id does not depend on
        which layout a config was written in.
        """
        data = self.model_dump(mode="json", exclude_defaults=True)
        data["task"] = {**data.get("task", {}), "name": self.task.name}
        data["model"] = {**self.model.hash_fields(), "name": self.model.name}
        blob = json.dumps(data, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()

    def run_id(self) -> str:
        """Deterministic run id: same config -> same run directory (so sweeps resume)."""
        return f"{self.task.name}-{self.model.name}-s{self.seed}-{self.config_hash()[:10]}"

    def value_at(self, key: str) -> Any:
        """The value at a dotted key (``model.block.norm``); a model key may use a name the
        model's input still accepts (``model.norm``). KeyError if there is none."""
        data = self.to_dict()
        path = key.split(".")
        if path[0] == "model" and len(path) == 2:
            legacy = self.model.legacy_fields()  # an older name; a family's old switch: its kind
            if path[1] in legacy and (path[1] not in data["model"]
                                      or isinstance(data["model"][path[1]], dict)):
                return legacy[path[1]]
        node: Any = data
        for part in path:
            if not isinstance(node, dict) or part not in node:
                raise KeyError(key)
            node = node[part]
        return node


# ----------------------------------------------------------------------------- overrides


_FLOAT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")


def parse_override(text: str) -> tuple[list[str], Any]:
    """Parse ``a.b.c=value``; the value is read as YAML (numbers, lists, null, ...)."""
    if "=" not in text:
        raise SglabError(
            f"override {text!r} has no '='. Write overrides as KEY=VALUE, "
            "e.g. --set model.pos_encoding=none"
        )
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key or any(not part for part in key.split(".")):
        raise SglabError(f"override {text!r} has an empty key part. Example: train.steps=1000")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as exc:
        raise SglabError(f"override {text!r}: value {raw!r} is not valid YAML ({exc})") from None
    if isinstance(value, str) and _FLOAT.fullmatch(value.strip()):
        value = float(value)  # YAML 1.1 reads 3e-3 as a string
    return key.split("."), value


def deep_merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``base`` with ``update`` merged in, section by section."""
    merged = copy.deepcopy(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def set_path(data: dict[str, Any], path: list[str], value: Any) -> None:
    """Set ``data[path[0]][path[1]]... = value`` in place, creating sections as needed."""
    node = data
    for part in path[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = {} if child is None else child
            if not isinstance(child, dict):
                raise SglabError(
                    f"override {'.'.join(path)}: {part!r} is a value, not a section"
                )
            node[part] = child
        node = child
    node[path[-1]] = value


def _model_class(data: dict[str, Any]) -> type[ModelConfig] | None:
    """The registered config class of the model section in ``data`` (None: unknown)."""
    from sglab import registry

    section = data.get("model")
    name = section.get("name", DEFAULT_NAMES["model"]) if isinstance(section, dict) else \
        DEFAULT_NAMES["model"]
    found = registry.config_class("model", name) if isinstance(name, str) else None
    return found if isinstance(found, type) and issubclass(found, ModelConfig) else None


def apply_overrides(data: dict[str, Any], overrides: list[str] | dict[str, Any]) -> dict[str, Any]:
    """Return a copy of ``data`` with dotted overrides applied (creating sections as needed).

    A model key goes through the model's :meth:`ModelConfig.set_input`, which also takes
    the names of an older layout of its config (``model.pos_encoding`` of a transformer)."""
    data = copy.deepcopy(data)
    items = (
        [parse_override(o) for o in overrides]
        if isinstance(overrides, list)
        else [(k.split("."), v) for k, v in overrides.items()]
    )
    for path, value in items:
        model_class = _model_class(data) if path[0] == "model" and len(path) > 1 else None
        if model_class is None:
            set_path(data, path, value)
            continue
        section = data.get("model")
        if not isinstance(section, dict):
            set_path(data, path, value)
            continue
        model_class.set_input(section, path[1:], value)
    return data


def canonical_setting(key: str, value: Any = None, model_name: str | None = None
                      ) -> tuple[str, Any]:
    """A dotted key and its value as the current layout spells them
    (``model.pos_encoding`` -> ``model.positions.kind``, ``model.copy_gate=true`` ->
    ``model.block.kind=copy_gate`` for a transformer): two spellings of one setting compare
    equal. ``model_name``: the model the key is about (default: the default model)."""
    from sglab import registry

    path = key.split(".")
    if path[0] != "model" or len(path) < 2:
        return key, value
    model_class = registry.config_class("model", model_name or DEFAULT_NAMES["model"])
    if not (isinstance(model_class, type) and issubclass(model_class, ModelConfig)):
        return key, value
    new_path, new_value = model_class.input_path(path[1:], value)
    return ".".join(["model", *new_path]), new_value


def canonical_key(key: str, model_name: str | None = None) -> str:
    """:func:`canonical_setting`'s key alone."""
    return canonical_setting(key, None, model_name)[0]


def load_yaml(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if path.is_dir():
        raise SglabError(f"config file {str(path)!r} is a directory. Pass a path to a YAML file.")
    if not path.is_file():
        raise SglabError(f"config file {str(path)!r} does not exist. Pass a path to a YAML file.")
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise SglabError(f"cannot read config file {str(path)!r}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise SglabError(f"config file {str(path)!r} is not UTF-8 text (byte {exc.start}: "
                         f"{exc.reason}); save it as UTF-8") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SglabError(f"config file {str(path)!r} is not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SglabError(f"config file {str(path)!r} must hold a mapping at the top level.")
    return data


# ----------------------------------------------------------------------------- validation


def _section_at(cls: type[BaseModel], loc: tuple[Any, ...], data: Any) -> type[BaseModel] | None:
    """The config class of the section where an error at ``loc`` happened."""
    from sglab import registry

    node_cls: type[BaseModel] | None = cls
    node_data = data
    for part in loc[:-1]:
        if node_cls is None or not isinstance(part, str):
            return None
        if node_cls is RunConfig and part in ("task", "model") and isinstance(node_data, dict):
            name = (node_data.get(part) or {}).get("name") if isinstance(node_data.get(part), dict) else None
            node_cls = registry.config_class(part, name) if name else None
        else:
            field = node_cls.model_fields.get(part)
            ann = field.annotation if field else None
            node_cls = ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None
            if node_cls is not None and issubclass(node_cls, FamilyConfig):
                node_cls = node_cls.kind_class(node_data.get(part) if isinstance(node_data, dict)
                                               else None)
        node_data = node_data.get(part) if isinstance(node_data, dict) else None
    return node_cls


def _fields_at(cls: type[BaseModel], loc: tuple[Any, ...], data: Any) -> list[str]:
    """Valid keys of the section where an error at ``loc`` happened."""
    node_cls = _section_at(cls, loc, data)
    if node_cls is None:
        return []
    if issubclass(node_cls, FamilyConfig):
        return node_cls.visible_fields()
    return list(node_cls.model_fields)


def _aliases_at(cls: type[BaseModel], loc: tuple[Any, ...], data: Any) -> list[str]:
    """Keys the section at ``loc`` accepts besides its fields (a model's older names)."""
    node_cls = _section_at(cls, loc, data)
    return node_cls.input_aliases() if node_cls is not None and issubclass(
        node_cls, ModelConfig) else []


SHOWN_CHARS = 200  # the most of one value an error message shows
SHOWN_ERRORS = 20  # the most problems one message lists
_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxlist, _REPR.maxtuple, _REPR.maxdict = 3, 8, 8, 8
_REPR.maxstring, _REPR.maxother, _REPR.maxlong = SHOWN_CHARS, 80, 60


def shown_value(value: Any, limit: int = SHOWN_CHARS) -> str:
    """``repr(value)`` bounded: nested and long values are elided (``...``) without being
    walked, so even a YAML alias bomb is shown in a line."""
    text = _REPR.repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def format_validation_error(exc: ValidationError, cls: type[BaseModel], data: Any) -> str:
    lines = []
    errors = exc.errors(include_url=False)
    for err in errors[:SHOWN_ERRORS]:
        loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
        where = ".".join(str(p) for p in loc) or "(top level)"
        if err["type"] == "extra_forbidden":
            valid = _fields_at(cls, loc, data)
            near = difflib.get_close_matches(str(loc[-1]), valid + _aliases_at(cls, loc, data),
                                             n=1, cutoff=0.4)
            hint = f" Did you mean {'.'.join([*map(str, loc[:-1]), near[0]])!r}?" if near else ""
            lines.append(f"unknown key {where!r}.{hint} Valid keys here: {', '.join(valid)}")
        elif err["type"] == "missing":
            lines.append(f"missing required key {where!r}")
        else:
            msg = err["msg"]
            msg = msg.removeprefix("Value error, ")
            value = err.get("input")
            if not loc:  # a check across sections names its fields itself
                lines.append(msg)
                continue
            shown = f"{where}: " if isinstance(value, dict) else f"{where} = {shown_value(value)}: "
            lines.append(shown + msg[:SHOWN_CHARS * 2])
    if len(errors) > SHOWN_ERRORS:
        lines.append(f"... and {len(errors) - SHOWN_ERRORS} more problems")
    return "invalid config:\n  " + "\n  ".join(lines)


def validate(cls: type[BaseModel], data: Any, check_effects: bool = False):
    """Validate ``data`` into ``cls``; raise :class:`SglabError` with readable messages.

    ``check_effects``: also reject fields set where they have no effect and metric names
    the task does not log (:func:`check_switches`), as :func:`build_run_config` does for
    new configs. Off by default, so that the config of an existing run still loads.
    """
    token = _CHECK_EFFECTS.set(check_effects)
    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        raise SglabError(format_validation_error(exc, cls, data)) from None
    finally:
        _CHECK_EFFECTS.reset(token)


DEFAULT_NAMES = {"task": "addition", "model": "transformer"}


def build_run_config(
    base: dict[str, Any] | None = None,
    overrides: list[str] | dict[str, Any] | None = None,
) -> RunConfig:
    """Base dict (e.g. from YAML or a preset) + dotted overrides -> validated RunConfig."""
    data = apply_overrides(base or {}, overrides or [])
    for section, default in DEFAULT_NAMES.items():
        node = data.setdefault(section, {})
        if isinstance(node, dict):
            node.setdefault("name", default)
    return validate(RunConfig, data, check_effects=True)


def dump_yaml(config: RunConfig) -> str:
    return yaml.safe_dump(config.to_dict(), sort_keys=False)
