"""Every benchmark script runs in its ``--quick`` mode, so a change that breaks one fails the
suite (the figures of a quick run mean nothing; the scripts' full runs are in
docs/performance.md)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def scripts() -> list[str]:
    return sorted(p.name for p in BENCHMARKS.glob("*.py")
                  if 'if __name__ == "__main__":' in p.read_text())


def extra_arguments(name: str, tmp_path: Path) -> list[str]:
    """What a script needs besides --quick: the authors' DNC checkout (a stand-in with its
    interface) and where to write its log."""
    if name == "dnc_authors_recall.py":
        return ["--code-dir", str(FIXTURES / "dnc_checkout"), "--out", str(tmp_path / "log.json")]
    return []


def test_every_script_is_covered():
    assert len(scripts()) == 15
    assert "mutation.py" in scripts()  # the mutation score (mutmut), quick: 6 mutants
    assert "common.py" not in scripts()


@pytest.mark.parametrize("name", scripts())
def test_quick_mode_runs(name, tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "SGLAB_RUNS_DIR": str(tmp_path / "runs"),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, str(BENCHMARKS / name), "--quick",
                           *extra_arguments(name, tmp_path)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"{name} --quick failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert done.stdout.strip() or done.stderr.strip()
    if name == "dnc_authors_recall.py":
        log = json.loads((tmp_path / "log.json").read_text())
        assert [row["step"] for row in log["log"]] == [100]


def test_quick_only_replaces_options_left_at_their_default():
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import argparse

        from common import parse_with_quick
    finally:
        sys.path.remove(str(BENCHMARKS))
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--seeds", type=int, default=5)
    quick = {"steps": 10, "seeds": 2}
    assert vars(parse_with_quick(parser, quick, ["--quick", "--seeds", "4"])) == {
        "steps": 10, "seeds": 4, "quick": True}
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=300)
    assert parse_with_quick(parser, {"steps": 10}, []).steps == 300


def test_rates_keep_their_significant_figures():
    """A paper-size model on a CPU steps at about 0.02 steps/s: rounding it to decimals made
    the grid projection divide by zero."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        from common import significant
    finally:
        sys.path.remove(str(BENCHMARKS))
    assert significant(0.022481) == 0.0225
    assert significant(1234.5) == 1230.0
    assert significant(27.14) == 27.1


def _throughput(tmp_path: Path, *arguments: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, str(BENCHMARKS / "gpu_throughput.py"), "--quick",
                           "--experiment", "ndr-ctl", "--members", "1", *arguments],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)


def test_throughput_measures_the_arm_named_by_its_labels(tmp_path):
    done = _throughput(tmp_path, "--arm", "variant=ndr", "--arm", "direction=backward")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "arm: {'variant': 'ndr', 'model': 'NDR', 'direction': 'backward'}" in done.stdout
    for bad, message in (("variant=nope", "no arm of ndr-ctl has {'variant': 'nope'}"),
                         ("nope", "--arm takes LABEL=VALUE")):
        done = _throughput(tmp_path, "--arm", bad)
        assert done.returncode == 2 and message in done.stderr, done.stderr[-2000:]
