"""Mutation score of the modules that decide results (mutmut, run on a scratch copy).

    python benchmarks/mutation.py --quick                          # 6 mutants of train/schedule.py
    python benchmarks/mutation.py train/schedule.py experiments/claims.py
    python benchmarks/mutation.py                                  # every module below
    python benchmarks/mutation.py models/moe.py --max-children 2 --show-survivors

Each module (a path under src/sglab) is mutated by mutmut (3.x: operator swaps, constant
and string changes, comparison flips, removed arguments, ...; one mutant at a time,
switched on by an environment variable) and every mutant is run against the module's own
test files (``MODULES``; ``--tests`` replaces them), only the tests that reach the mutated
function, each with mutmut's timeout. Killed = a test failed (a timeout counts as killed);
survived = every test passed; "no tests" = no selected test reaches the function (counted
as not killed). mutmut works on a copy: src/ and tests/ go to a scratch directory with
the project's pyproject.toml and a ``[tool.mutmut]`` section, and pytest runs there with
``-n 0`` (mutmut forks one process per mutant and collects which tests reach which
function in-process, which pytest-xdist's workers would hide from it). The repository is
never written.

mutmut mutates function and method bodies, not module-level constants or class-level
tables (e.g. claims._SYMBOLS): those are pinned by tests directly.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import parse_with_quick

ROOT = Path(__file__).resolve().parents[1]

# module under src/sglab -> its own test files
MODULES: dict[str, list[str]] = {
    "models/moe.py": ["tests/test_moe_units.py", "tests/test_moe_layers.py",
                      "tests/test_moe_routing_reference.py", "tests/test_ffn_factory.py"],
    "models/ffn.py": ["tests/test_ffn_factory.py", "tests/test_moe_layers.py",
                      "tests/test_moe_routing_reference.py"],
    "models/masked.py": ["tests/test_weight_masks.py", "tests/test_weight_mask_penalty.py",
                         "tests/test_weight_masks_classes.py", "tests/test_weight_masks_sanity.py",
                         "tests/test_weight_masks_transfer.py", "tests/test_weight_masks_units.py"],
    "models/geometric.py": ["tests/test_ndr_layers.py"],
    "train/schedule.py": ["tests/test_schedule.py"],
    "train/ensemble.py": ["tests/test_ensemble.py", "tests/test_ensemble_dropout.py",
                          "tests/test_ensemble_member_masks.py", "tests/test_ensemble_units.py"],
    "experiments/claims.py": ["tests/test_claims.py"],
}
# tests that cannot run on mutmut's trampolined copy of a module (torch.compile traces the
# trampolines: the one-graph check fails whatever the mutant); they still run in the suite
DESELECT: dict[str, list[str]] = {
    "train/ensemble.py": [
        "tests/test_ensemble_dropout.py::test_a_compiled_ensemble_traces_as_one_graph_and_equals_the_eager_one"],
}
QUICK_MODULE = "train/schedule.py"
QUICK_MUTANTS = "x_learning_rate__mutmut_[1-6]"  # a handful (fnmatch on mutmut's names)
KILLED = {"killed", "timeout", "caught by type check"}
STATUS = re.compile(r"^\s*(\S+__mutmut_\d+): (.+?)\s*$")


def module_name(module: str) -> str:
    return "sglab." + module.removesuffix(".py").replace("/", ".")


def prepare(workdir: Path, module: str, tests: list[str]) -> None:
    """src/, tests/ and pyproject.toml (with a [tool.mutmut] section) in ``workdir``."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    shutil.copytree(ROOT / "src", workdir / "src", ignore=ignore)
    shutil.copytree(ROOT / "tests", workdir / "tests", ignore=ignore)
    settings = {
        "source_paths": ["src"],
        "only_mutate": [f"src/sglab/{module}"],
        "pytest_add_cli_args": ["-n", "0", "-p", "no:cacheprovider",
                                *[arg for test in DESELECT.get(module, []) for arg in ("--deselect", test)]],
        "pytest_add_cli_args_test_selection": tests,
        "use_git_change_detection": False,
    }
    lines = ["", "[tool.mutmut]"] + [f"{key} = {json.dumps(value)}" for key, value in settings.items()]
    (workdir / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text()
                                            + "\n".join(lines) + "\n")


def mutmut(workdir: Path, *arguments: str, log=None) -> subprocess.CompletedProcess:
    # mutmut puts its mutated copy (mutants/src) first on sys.path; nothing else may
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for name in ("PYTHONPATH", "MUTANT_UNDER_TEST"):
        env.pop(name, None)
    return subprocess.run([sys.executable, "-m", "mutmut", *arguments], cwd=workdir, env=env,
                          stdout=log or subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def statuses(workdir: Path, module: str) -> dict[str, str]:
    done = mutmut(workdir, "results", "--all", "true")
    prefix = module_name(module) + "."
    found = {}
    for line in done.stdout.splitlines():
        if (match := STATUS.match(line)) and match.group(1).startswith(prefix):
            found[match.group(1)] = match.group(2)
    return found


def run_module(module: str, tests: list[str], pattern: str | None, max_children: int,
               keep: Path | None, show_survivors: bool) -> dict:
    workdir = Path(tempfile.mkdtemp(prefix="sglab-mutation-")) if keep is None else keep
    if keep is not None:
        shutil.rmtree(workdir, ignore_errors=True)
        workdir.mkdir(parents=True)
    try:
        prepare(workdir, module, tests)
        start = time.perf_counter()
        names = [f"{module_name(module)}.{pattern}"] if pattern else []
        with open(workdir / "mutmut.log", "w") as log:
            done = mutmut(workdir, "run", "--max-children", str(max_children), *names, log=log)
        seconds = time.perf_counter() - start
        found = {name: status for name, status in statuses(workdir, module).items()
                 if status != "not checked"}  # outside --mutants
        if done.returncode != 0 or not found:
            tail = (workdir / "mutmut.log").read_text()[-3000:]
            raise SystemExit(f"mutmut failed on {module} (exit {done.returncode}):\n{tail}")
        counts: dict[str, int] = {}
        for status in found.values():
            counts[status] = counts.get(status, 0) + 1
        killed = sum(n for status, n in counts.items() if status in KILLED)
        survivors = sorted(name for name, status in found.items() if status not in KILLED)
        result = {"module": module, "tests": tests, "mutants": len(found), "killed": killed,
                  "score": killed / len(found), "counts": counts, "seconds": round(seconds, 1),
                  "not_killed": survivors}
        if show_survivors:
            result["diffs"] = {name: mutmut(workdir, "show", name).stdout for name in survivors}
        return result
    finally:
        if keep is None:
            shutil.rmtree(workdir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="modules and their tests:\n" + "\n".join(
                                         f"  {m}: {' '.join(t)}" for m, t in MODULES.items()))
    parser.add_argument("modules", nargs="*", default=[],
                        help="paths under src/sglab (default: every module listed below)")
    parser.add_argument("--tests", nargs="+", default=None,
                        help="test files to run instead of the modules' own")
    parser.add_argument("--mutants", default=None,
                        help="only mutants whose name matches this fnmatch pattern "
                             "(e.g. 'x_learning_rate__mutmut_*')")
    parser.add_argument("--max-children", type=int, default=os.cpu_count() or 1,
                        help="mutants tested at once")
    parser.add_argument("--keep", type=Path, default=None,
                        help="work in this directory and keep it (mutmut browse/show there)")
    parser.add_argument("--show-survivors", action="store_true",
                        help="print the diff of every mutant not killed")
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    args = parse_with_quick(parser, {"modules": [QUICK_MODULE], "mutants": QUICK_MUTANTS,
                                     "max_children": 1}, argv)
    if args.quick and args.mutants == QUICK_MUTANTS and args.modules != [QUICK_MODULE]:
        args.mutants = None  # the quick mutants are schedule.py's
    modules = args.modules or list(MODULES)
    unknown = [m for m in modules if not (ROOT / "src" / "sglab" / m).is_file()]
    if unknown:
        parser.error(f"no such module under src/sglab: {', '.join(unknown)}")
    try:
        import mutmut  # noqa: F401
    except ImportError:
        parser.error("mutmut is not installed: pip install -e '.[test]' (or pip install mutmut)")
    results = []
    for module in modules:
        tests = args.tests or MODULES.get(module)
        if not tests:
            parser.error(f"{module} has no test files in MODULES: give them with --tests")
        result = run_module(module, tests, args.mutants, args.max_children, args.keep,
                            args.show_survivors)
        results.append(result)
        counts = ", ".join(f"{n} {status}" for status, n in sorted(result["counts"].items()))
        print(f"{module}: {result['killed']}/{result['mutants']} killed "
              f"({100 * result['score']:.1f}%; {counts}) in {result['seconds']:.0f} s "
              f"[{' '.join(tests)}]", flush=True)
        for name in result["not_killed"]:
            print(f"  not killed: {name}")
            if args.show_survivors:
                print("    " + result["diffs"][name].strip().replace("\n", "\n    "))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
