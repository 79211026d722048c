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
from pathlib import Path
from typing import Any, Literal

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
    """Base for every config section: unknown keys and silent coercions are errors."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class TaskConfig(StrictModel):
    """Fields every task shares. Tasks subclass this and register the subclass."""

    name: str
    data_seed: int = Field(0, description="Seed of the data generator (same data across run seeds).")


class ModelConfig(StrictModel):
    """Fields every model shares. Models subclass this and register the subclass."""

    name: str


class TrainConfig(StrictModel):
    steps: int = Field(3000, ge=1, description="Number of optimizer steps.")
    batch_size: int = Field(256, ge=1)
    lr: float = Field(1e-3, gt=0)
    min_lr: float = Field(1e-4, ge=0, description="End of the cosine schedule.")
    lr_schedule: Literal["cosine", "constant"] = "cosine"
    warmup_steps: int = Field(100, ge=0)
    betas: tuple[float, float] = (0.9, 0.99)
    weight_decay: float = Field(0.1, ge=0, description="AdamW decay, on 2-D weights only.")
    grad_clip: float | None = Field(1.0, gt=0, description="Max global grad norm; null = off.")
    eval_interval: int = Field(250, ge=1)
    eval_batch_size: int = Field(1024, ge=1)
    eval_max_examples: int | None = Field(
        None, ge=1, description="Evaluate on at most this many examples per split (null = all)."
    )
    checkpoint_interval: int = Field(500, ge=1)
    log_interval: int = Field(100, ge=1)
    early_stop_metric: str | None = Field(
        None, description="Stop once this eval metric (e.g. 'test/exact_match') reaches the threshold."
    )
    early_stop_threshold: float | None = None
    target_metric: str = Field(
        "test/exact_match", description="Metric whose first crossing of target_threshold is timed."
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
    precision: Literal["float32", "bf16"] = Field(
        "float32", description="bf16 autocast is used on CUDA only; CPU always trains in float32."
    )
    compile: bool = Field(False, description="torch.compile the model (slower on small CPU models).")
    optimizer: Literal["adamw", "sgd"] = Field(
        "adamw", description="adamw (betas, decoupled weight decay) or plain sgd (momentum, L2 decay)."
    )
    momentum: float = Field(0.0, ge=0, lt=1, description="SGD momentum (optimizer=sgd only).")
    loss: Literal["cross_entropy", "squared"] = Field(
        "cross_entropy",
        description="squared: sum over the vocabulary of (logit - one-hot target)^2, averaged over "
                    "the target positions.",
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
        if self.optimizer != "sgd" and self.momentum:
            raise ValueError(f"momentum={self.momentum} is an SGD setting; with "
                             f"optimizer={self.optimizer} leave it at 0 (betas set Adam's momentum)")
        return self


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

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def config_hash(self) -> str:
        """Stable hash of the config (seed included).

        Only values that differ from their field's default enter the hash, so adding a
        new option with a default keeps the ids (and stored results) of existing runs.
        """
        data = self.model_dump(mode="json", exclude_defaults=True)
        data["task"] = {**data.get("task", {}), "name": self.task.name}
        data["model"] = {**data.get("model", {}), "name": self.model.name}
        blob = json.dumps(data, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()

    def run_id(self) -> str:
        """Deterministic run id: same config -> same run directory (so sweeps resume)."""
        return f"{self.task.name}-{self.model.name}-s{self.seed}-{self.config_hash()[:10]}"


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


def apply_overrides(data: dict[str, Any], overrides: list[str] | dict[str, Any]) -> dict[str, Any]:
    """Return a copy of ``data`` with dotted overrides applied (creating sections as needed)."""
    data = copy.deepcopy(data)
    items = (
        [parse_override(o) for o in overrides]
        if isinstance(overrides, list)
        else [(k.split("."), v) for k, v in overrides.items()]
    )
    for path, value in items:
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
    return data


def load_yaml(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise SglabError(f"config file {str(path)!r} does not exist. Pass a path to a YAML file.")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise SglabError(f"config file {str(path)!r} is not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SglabError(f"config file {str(path)!r} must hold a mapping at the top level.")
    return data


# ----------------------------------------------------------------------------- validation


def _fields_at(cls: type[BaseModel], loc: tuple[Any, ...], data: Any) -> list[str]:
    """Valid keys of the section where an error at ``loc`` happened."""
    from sglab import registry

    node_cls: type[BaseModel] | None = cls
    node_data = data
    for part in loc[:-1]:
        if node_cls is None or not isinstance(part, str):
            return []
        if node_cls is RunConfig and part in ("task", "model") and isinstance(node_data, dict):
            name = (node_data.get(part) or {}).get("name") if isinstance(node_data.get(part), dict) else None
            node_cls = registry.config_class(part, name) if name else None
        else:
            field = node_cls.model_fields.get(part)
            ann = field.annotation if field else None
            node_cls = ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None
        node_data = node_data.get(part) if isinstance(node_data, dict) else None
    return list(node_cls.model_fields) if node_cls is not None else []


def format_validation_error(exc: ValidationError, cls: type[BaseModel], data: Any) -> str:
    lines = []
    for err in exc.errors():
        loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
        where = ".".join(str(p) for p in loc) or "(top level)"
        if err["type"] == "extra_forbidden":
            valid = _fields_at(cls, loc, data)
            near = difflib.get_close_matches(str(loc[-1]), valid, n=1, cutoff=0.4)
            hint = f" Did you mean {'.'.join([*map(str, loc[:-1]), near[0]])!r}?" if near else ""
            lines.append(f"unknown key {where!r}.{hint} Valid keys here: {', '.join(valid)}")
        elif err["type"] == "missing":
            lines.append(f"missing required key {where!r}")
        else:
            msg = err["msg"]
            msg = msg.removeprefix("Value error, ")
            value = err.get("input")
            shown = f"{where}: " if isinstance(value, dict) else f"{where} = {value!r}: "
            lines.append(shown + msg)
    return "invalid config:\n  " + "\n  ".join(lines)


def validate(cls: type[BaseModel], data: Any):
    """Validate ``data`` into ``cls``; raise :class:`SglabError` with readable messages."""
    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        raise SglabError(format_validation_error(exc, cls, data)) from None


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
    return validate(RunConfig, data)


def dump_yaml(config: RunConfig) -> str:
    return yaml.safe_dump(config.to_dict(), sort_keys=False)
