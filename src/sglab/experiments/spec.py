"""An experiment's spec as data: its presets and its claims, in one YAML file beside its module.

    # experiments/symmetry/symmetry.yaml
    title: Breaking symmetry: ...
    description: ...
    anchors: {...}          # optional: YAML anchors the presets share (&name / <<: *name)
    presets:
      quick: {...}          # parameters, validated by the experiment's params model
      default: {...}
      paper: {...}
    claims:
      claim-id: {statement: ..., source: {...}, references: {...}, effect: [...]}
    scale:                  # what default scales down, and what the seed's setup costs
      default: ...
      faithful_cpu: ...
      paper_gpu: ...

The parameters of a preset are checked against the experiment's typed model
(:class:`ExperimentParams` and its subclasses: unknown keys and wrong types are errors)
when the spec loads and again after ``--param`` changes, before anything trains.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from sglab.config import build_run_config, format_validation_error
from sglab.errors import SglabError
from sglab.experiments.claims import ClaimSpec

PRESET_NAMES = ("quick", "default", "paper")
SPEC_KEYS = ("title", "description", "anchors", "presets", "claims", "scale")


class ExperimentParams(BaseModel):
    """The parameters every preset has; an experiment's model adds its own."""

    model_config = ConfigDict(extra="forbid")
    seeds: list[int] = Field(min_length=1)
    quiet: bool = False  # quiet runs: no line per evaluation, a progress line every two minutes


class ScaleSpec(BaseModel):
    """How far ``default`` is from the seed's setup and what the seed's setup costs; the
    scorecard prints it beside the verdicts, so a QUALITATIVE or FAILS at ``default`` says
    whether a faithful run could settle it. Figures are measured (say where) or projected
    (say from what)."""

    model_config = ConfigDict(extra="forbid")
    default: str = Field(min_length=1, description="What `default` scales down against the "
                                                   "seed's setup, or that it is the seed's.")
    faithful_cpu: str = Field(min_length=1, description="The smallest run with the seed's "
                                                        "mechanism on 2 CPU cores: its measured "
                                                        "cost, or why it was not measured.")
    paper_gpu: str = Field(min_length=1, description="`paper` on one GPU: measured or "
                                                     "projected time, or not measured.")
    user_files: str | None = Field(None, min_length=1, description="The files a user must "
                                   "bring for `default` (data that cannot be generated): the "
                                   "scorecard names them while no result is committed.")


def _valid_run_config(base: dict[str, Any]) -> dict[str, Any]:
    """A run config as a preset writes it (a dict): rejected here if it would not build."""
    try:
        build_run_config(base)
    except SglabError as exc:
        raise ValueError(str(exc).replace("\n", " ")) from None
    return base


#: A preset parameter holding a run config (the config an arm starts from), checked at load.
RunConfigDict = Annotated[dict[str, Any], AfterValidator(_valid_run_config)]


class SpecLoader(yaml.SafeLoader):
    """YAML 1.1 with ``1e-4`` read as a number (PyYAML needs a dot in the mantissa), and
    merge lists (``<<: [*a, *b]``) refused where the merged mappings share a key: which one
    wins is easy to misread, so a spec says it with one merge and explicit keys."""

    def flatten_mapping(self, node: yaml.MappingNode) -> None:
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge" and isinstance(value_node,
                                                                       yaml.SequenceNode):
                seen: dict[str, int] = {}
                for index, merged in enumerate(value_node.value):
                    if not isinstance(merged, yaml.MappingNode):
                        continue
                    self.flatten_mapping(merged)
                    for merged_key, _ in merged.value:
                        name = merged_key.value
                        if name in seen and seen[name] != index:
                            raise yaml.constructor.ConstructorError(
                                "while merging", node.start_mark,
                                f"key {name!r} comes from two merged mappings; merge one and "
                                "write the other's keys out", merged_key.start_mark)
                        seen[name] = index
        super().flatten_mapping(node)


SpecLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:\d[\d_]*)?\.?\d*[eE][-+]?\d+$"),
    list("-+0123456789."))


@dataclass
class ExperimentSpec:
    title: str
    description: str
    presets: dict[str, dict[str, Any]]
    claims: dict[str, ClaimSpec]
    path: Path
    scale: ScaleSpec | None = None


def validate_params(model: type[ExperimentParams], params: dict[str, Any], where: str
                    ) -> dict[str, Any]:
    """The parameters checked against ``model`` (defaults filled in), as a plain dict."""
    try:
        return model.model_validate(params).model_dump()
    except ValidationError as exc:
        message = format_validation_error(exc, model, params).replace(
            "invalid config:", f"invalid parameters of {where}:", 1)
        raise SglabError(message) from None


def unshared(value: Any) -> Any:
    """A copy in which no two places hold the same dict or list (``copy.deepcopy`` keeps
    such sharing, so a change through one alias would show through the other)."""
    if isinstance(value, dict):
        return {k: unshared(v) for k, v in value.items()}
    if isinstance(value, list):
        return [unshared(v) for v in value]
    return value


def load_spec(path: Path, model: type[ExperimentParams], name: str) -> ExperimentSpec:
    """Read and check a spec file: its keys, every preset's parameters and every claim."""
    try:
        data = yaml.load(path.read_text(), Loader=SpecLoader)  # noqa: S506 (a safe loader)
    except (OSError, yaml.YAMLError) as exc:
        raise SglabError(f"experiment spec {path.name}: cannot read it ({exc})") from None
    if not isinstance(data, dict):
        raise SglabError(f"experiment spec {path.name} must hold a mapping")
    unknown = sorted(set(data) - set(SPEC_KEYS))
    if unknown:
        raise SglabError(f"experiment spec {path.name}: unknown keys {unknown}; "
                         f"known: {', '.join(SPEC_KEYS)}")
    data = unshared(data)  # an alias (*name) must not tie two presets' values together
    presets = data.get("presets") or {}
    if set(presets) - set(PRESET_NAMES) or "quick" not in presets:
        raise SglabError(f"experiment spec {path.name}: presets must be among "
                         f"{', '.join(PRESET_NAMES)} and include quick; found {sorted(presets)}")
    for preset, params in presets.items():
        validate_params(model, params, f"{name}:{preset}")
    claims = {}
    for claim_id, claim in (data.get("claims") or {}).items():
        try:
            claims[claim_id] = ClaimSpec.model_validate(claim)
        except ValidationError as exc:
            raise SglabError(f"experiment spec {path.name}: claim {claim_id!r}: "
                             + format_validation_error(exc, ClaimSpec, claim)) from None
    scale = None
    if data.get("scale") is not None:
        try:
            scale = ScaleSpec.model_validate(data["scale"])
        except ValidationError as exc:
            problems = format_validation_error(exc, ScaleSpec, data["scale"])
            raise SglabError(f"experiment spec {path.name}: scale: "
                             + problems.removeprefix("invalid config:\n  ")) from None
    return ExperimentSpec(str(data.get("title", name)), str(data.get("description", "")),
                          presets, claims, path, scale)


__all__ = ["ExperimentParams", "ExperimentSpec", "PRESET_NAMES", "RunConfigDict", "ScaleSpec",
           "load_spec", "validate_params"]
