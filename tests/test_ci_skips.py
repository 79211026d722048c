"""Under CI=true a test that skips because an optional extra is missing fails the run
(tests/conftest.py); elsewhere it skips, and other skips stay skips everywhere."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.conftest import EXTRAS, fail_a_missing_extra_under_ci, missing_module

ROOT = Path(__file__).resolve().parents[1]

TESTS = {
    "test_inside.py": """
        import pytest

        def test_needs_an_extra():
            pytest.importorskip("sentencepiece_not_installed_here")

        def test_skips_for_another_reason():
            pytest.skip("not about an extra")

        def test_passes():
            assert True
    """,
    "test_module_level.py": """
        import pytest

        ray = pytest.importorskip("ray_not_installed_here")

        def test_never_collected():
            assert False
    """,
}


def _run(tmp_path: Path, ci: str | None) -> subprocess.CompletedProcess:
    for name, text in TESTS.items():
        (tmp_path / name).write_text(textwrap.dedent(text))
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_ADDOPTS")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    if ci is not None:
        env["CI"] = ci
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p",
                           "no:cacheprovider", "-p", "no:xdist", "-rA",
                           "--continue-on-collection-errors", str(tmp_path)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)


def test_under_ci_a_missing_extra_fails_in_a_test_and_in_a_test_file(tmp_path):
    done = _run(tmp_path, "true")
    out = done.stdout
    assert done.returncode == 1, out[-3000:]
    assert "1 failed, 1 passed, 1 skipped, 1 error" in out, out[-3000:]
    assert "FAILED test_inside.py::test_needs_an_extra" in out
    assert "ERROR test_module_level.py" in out
    assert "CI=true: could not import 'sentencepiece_not_installed_here'" in out
    assert "CI=true: could not import 'ray_not_installed_here'" in out
    assert "SKIPPED [1] test_inside.py:8: not about an extra" in out


def test_elsewhere_a_missing_extra_skips(tmp_path):
    done = _run(tmp_path, None)
    assert done.returncode == 0, done.stdout[-3000:]
    assert "1 passed, 3 skipped" in done.stdout


def _skip_report(reason: str) -> SimpleNamespace:
    return SimpleNamespace(skipped=True, outcome="skipped", longrepr=("t.py", 3, reason))


@pytest.mark.parametrize("ci, fails", [("true", True), (None, False), ("false", False),
                                       ("1", False), ("TRUE", False)])
def test_only_ci_true_turns_the_skip_into_a_failure(monkeypatch, ci, fails):
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    report = _skip_report("Skipped: could not import 'gensim': No module named 'gensim'")
    assert missing_module(report) == "gensim"
    fail_a_missing_extra_under_ci(report)
    assert report.outcome == ("failed" if fails else "skipped")
    if fails:
        assert report.longrepr.startswith("CI=true: could not import 'gensim': No module")
        assert "the extra sglab[pretrained] is not installed" in report.longrepr


def test_other_skips_and_other_outcomes_are_left_alone(monkeypatch):
    monkeypatch.setenv("CI", "true")
    other = _skip_report("needs /proc (Linux)")
    fail_a_missing_extra_under_ci(other)
    assert other.outcome == "skipped" and missing_module(other) is None
    passed = SimpleNamespace(skipped=False, outcome="passed", longrepr=None)
    fail_a_missing_extra_under_ci(passed)
    assert passed.outcome == "passed"
    text = _skip_report("could not import 'ray.util': No module named 'ray'")
    fail_a_missing_extra_under_ci(text)
    assert text.outcome == "failed" and "sglab[ray]" in text.longrepr


def test_every_optional_extra_is_named():
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    assert set(EXTRAS.values()) == {"ray", "pretrained", "text"} <= set(extras)
