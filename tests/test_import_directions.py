"""Data flows one way: config -> task + model -> Trainer -> run directory -> analysis -> report.

This walks every module of the package (imports inside functions included) and fails on an
import against that direction.
"""

import ast
import sys
from pathlib import Path

import sglab

PACKAGE = Path(sglab.__file__).parent

# importing part -> parts it must not import
FORBIDDEN = {
    "tasks": {"train", "analysis", "experiments", "report", "sweep"},
    "models": {"tasks", "train", "analysis", "experiments", "report", "sweep"},
    "train": {"analysis", "experiments", "report", "sweep"},
    "report": {"train", "experiments", "sweep"},
    "io": {"*"},
    "names": {"*"},
    "errors": {"*"},
}
ALWAYS_ALLOWED = {"errors"}


def _part(module: str) -> str | None:
    """The top-level part of sglab that a dotted module name belongs to."""
    pieces = module.split(".")
    if pieces[0] != "sglab" or len(pieces) < 2:
        return None
    return pieces[1]


def _imports(path: Path) -> list[tuple[int, str]]:
    module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative import: resolve against this module's package
                base = module.split(".")[: -node.level]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            found.append((node.lineno, name))
            if name == "sglab":  # from sglab import registry, train, ...
                found += [(node.lineno, f"sglab.{alias.name}") for alias in node.names]
    return found


def forbidden_imports() -> list[str]:
    problems = []
    for path in sorted(PACKAGE.rglob("*.py")):
        source_part = path.relative_to(PACKAGE).parts[0].removesuffix(".py")
        banned = FORBIDDEN.get(source_part)
        if not banned:
            continue
        for line, name in _imports(path):
            target = _part(name)
            if target is None or target == source_part or target in ALWAYS_ALLOWED:
                continue
            if target in banned or "*" in banned:
                problems.append(f"{path.relative_to(PACKAGE)}:{line} ({source_part}) imports {name}")
    return problems


def test_no_import_goes_against_the_data_flow():
    assert forbidden_imports() == []


def test_the_walker_finds_imports_inside_functions(tmp_path, monkeypatch):
    (tmp_path / "sglab" / "tasks").mkdir(parents=True)
    (tmp_path / "sglab" / "tasks" / "bad.py").write_text(
        "def probe():\n    from sglab.analysis.permutation import order_blind_ceiling\n")
    (tmp_path / "sglab" / "tasks" / "fine.py").write_text("from sglab.config import TaskConfig\n")
    (tmp_path / "sglab" / "io.py").write_text("from sglab import config\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", tmp_path / "sglab")
    assert forbidden_imports() == [
        "io.py:1 (io) imports sglab.config",
        "tasks/bad.py:2 (tasks) imports sglab.analysis.permutation",
    ]
