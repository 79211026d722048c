"""Name -> (config class, factory) for tasks and models; name -> experiment.

Modules register themselves on import; :func:`load_builtins` imports every module
of the ``sglab.tasks`` and ``sglab.models`` packages (and ``sglab.experiments`` when
experiments are asked for), so a new component only has to live in its package.
"""

from __future__ import annotations

import difflib
import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from sglab.errors import SglabError


@dataclass(frozen=True)
class Entry:
    name: str
    config_class: type[BaseModel]
    factory: Callable[..., Any]
    description: str


_SECTIONS: dict[str, dict[str, Entry]] = {"task": {}, "model": {}}
_EXPERIMENTS: dict[str, Any] = {}

_COMPONENT_PACKAGES = ("sglab.tasks", "sglab.models")
_EXPERIMENT_PACKAGES = ("sglab.experiments",)


_IMPORTED_PACKAGES: set[str] = set()


def _import_package_modules(package_name: str) -> None:
    if package_name in _IMPORTED_PACKAGES:
        return
    _IMPORTED_PACKAGES.add(package_name)
    package = importlib.import_module(package_name)
    for module in pkgutil.walk_packages(package.__path__, prefix=f"{package_name}."):
        importlib.import_module(module.name)


def load_builtins(experiments: bool = False) -> None:
    for package in _COMPONENT_PACKAGES + (_EXPERIMENT_PACKAGES if experiments else ()):
        _import_package_modules(package)


def register(section: str, name: str, config_class: type[BaseModel], description: str = ""):
    """Decorator: ``@register("task", "addition", AdditionConfig)`` on a factory."""

    def decorator(factory):
        _SECTIONS[section][name] = Entry(name, config_class, factory, description)
        return factory

    return decorator


def register_experiment(experiment) -> Any:
    _EXPERIMENTS[experiment.name] = experiment
    return experiment


def _unknown(kind: str, name: Any, known: list[str]) -> SglabError:
    near = difflib.get_close_matches(str(name), known, n=1, cutoff=0.4)
    hint = f" Did you mean {near[0]!r}?" if near else ""
    return SglabError(f"unknown {kind} {name!r}.{hint} Known: {', '.join(sorted(known))}")


def entries(section: str) -> dict[str, Entry]:
    load_builtins()
    return dict(_SECTIONS[section])


def entry(section: str, name: str) -> Entry:
    load_builtins()
    if name not in _SECTIONS[section]:
        raise _unknown(section, name, list(_SECTIONS[section]))
    return _SECTIONS[section][name]


def config_class(section: str, name: str) -> type[BaseModel] | None:
    load_builtins()
    found = _SECTIONS[section].get(name)
    return found.config_class if found else None


def validate_section(section: str, value: Any) -> Any:
    """Turn a task/model dict into the registered config class for its ``name``."""
    if isinstance(value, BaseModel):
        return value
    if not isinstance(value, dict):
        raise ValueError(f"the {section} section must be a mapping with a 'name' key")
    if "name" not in value:
        raise ValueError(
            f"the {section} section needs a 'name' (one of: {', '.join(sorted(entries(section)))})"
        )
    if not isinstance(value["name"], str):
        raise ValueError(f"the {section} name must be a string (one of: "
                         f"{', '.join(sorted(entries(section)))}), not a "
                         f"{type(value['name']).__name__}")
    cls = config_class(section, value["name"])
    if cls is None:
        raise ValueError(str(_unknown(section, value["name"], list(entries(section)))))
    return cls.model_validate(value)


def experiments() -> dict[str, Any]:
    load_builtins(experiments=True)
    return dict(_EXPERIMENTS)


def experiment(name: str):
    load_builtins(experiments=True)
    if name not in _EXPERIMENTS:
        raise _unknown("experiment", name, list(_EXPERIMENTS))
    return _EXPERIMENTS[name]
