"""Data flows one way: config -> task + model -> Trainer -> run directory -> analysis -> report.

This walks every module of the package (imports inside functions included) and fails on an
import against that direction.
"""

import ast
import sys
from pathlib import Path

import pytest

import sglab

PACKAGE = Path(sglab.__file__).parent

# The parts of sglab from the bottom up; a part imports only parts on lower levels (parts
# on one level do not import each other). Data flows one way: config -> task + model ->
# Trainer -> run directory (+ store) -> analysis -> report; sweeps and experiments compose.
LEVELS = [
    {"errors", "__version__"},
    {"io", "names", "provenance"},
    {"registry"},
    {"config"},
    {"tasks", "models"},
    {"store"},
    {"train"},
    {"analysis"},
    {"report"},
    {"sweep"},
    {"experiments"},
    {"api"},
    {"cli", "__init__"},
]
RANK = {part: level for level, parts in enumerate(LEVELS) for part in parts}
# Lower parts a part must still not reach directly: the sweep plans and runs jobs through
# train/ (what a member costs: train.ensemble_cost), never by building tasks or models.
SKIPS_FORBIDDEN = {"sweep": {"models", "tasks"}}
# Imports between chapters of experiments/ (a chapter's package may use another's code
# only where declared here).
CHAPTERS_ALLOWED: dict[str, set[str]] = {}


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


def module_part(path: Path) -> str:
    return path.relative_to(PACKAGE).parts[0].removesuffix(".py")


def chapter_of(module: str) -> str | None:
    """``sglab.experiments.ndr.ndr_grid`` -> ``ndr`` (None outside a chapter package)."""
    pieces = module.split(".")
    if pieces[:2] == ["sglab", "experiments"] and len(pieces) > 3:
        return pieces[2]
    return None


def forbidden_imports() -> list[str]:
    problems = []
    for path in sorted(PACKAGE.rglob("*.py")):
        source_part = module_part(path)
        if source_part not in RANK:
            problems.append(f"{path.relative_to(PACKAGE)}: part {source_part!r} has no level")
            continue
        module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        for line, name in _imports(path):
            target = _part(name)
            where = f"{path.relative_to(PACKAGE)}:{line} ({source_part}) imports {name}"
            if target is None or target == source_part:
                source_chapter, target_chapter = chapter_of(module), chapter_of(name)
                if (target == "experiments" and source_chapter and target_chapter
                        and target_chapter != source_chapter
                        and target_chapter not in CHAPTERS_ALLOWED.get(source_chapter, set())):
                    problems.append(where + " (another chapter)")
                continue
            if target not in RANK:
                problems.append(where + f" (part {target!r} has no level)")
            elif RANK[target] >= RANK[source_part] or target in SKIPS_FORBIDDEN.get(
                    source_part, set()):
                problems.append(where)
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


@pytest.mark.parametrize("source, text, problem", [
    ("sweep/jobs.py", "from sglab.models import build_model\n",
     "sweep/jobs.py:1 (sweep) imports sglab.models"),
    ("models/moe.py", "from sglab.tasks import build_task\n",
     "models/moe.py:1 (models) imports sglab.tasks"),
    ("train/loop.py", "import sglab.sweep.local\n", "train/loop.py:1 (train) imports sglab.sweep.local"),
    ("experiments/ndr/ndr.py", "from sglab.experiments.ctlpp.ctlpp import CTLPP\n",
     "experiments/ndr/ndr.py:1 (experiments) imports sglab.experiments.ctlpp.ctlpp (another "
     "chapter)"),
    ("widgets.py", "x = 1\n", "widgets.py: part 'widgets' has no level"),
])
def test_a_planted_upward_import_is_found(tmp_path, monkeypatch, source, text, problem):
    path = tmp_path / "sglab" / source
    path.parent.mkdir(parents=True)
    path.write_text(text)
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", tmp_path / "sglab")
    assert forbidden_imports() == [problem]


def test_the_real_tree_has_every_part_on_a_level():
    parts = {module_part(p) for p in PACKAGE.rglob("*.py")}
    assert parts <= set(RANK)
