"""The README and docs/ stay short, current and consistent with the code.

README at most 300 lines, each docs page at most 250; every relative link resolves; every
registered experiment has exactly one chapter page (its ``Experiments:`` line) and every
experiment a page names is registered; the README's two commands are the ones CI runs.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from sglab import registry
from sglab.experiments.scorecard import collect, experiment_summaries

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
README_MAX_LINES = 300
PAGE_MAX_LINES = 250
NOT_YET = "not yet judged"  # the README's verdict for an experiment with no committed result

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
EXPERIMENTS_LINE = re.compile(r"^Experiments: (.+)$", re.MULTILINE)


def docs_pages() -> list[Path]:
    return sorted(DOCS.glob("*.md"))


def too_long(text: str, limit: int) -> bool:
    return len(text.splitlines()) > limit


def broken_links(path: Path) -> list[str]:
    """Relative link targets in ``path`` that name no file (anchors and URLs skipped)."""
    broken = []
    for target in LINK.findall(path.read_text()):
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            continue
        file_part = target.split("#", 1)[0]
        if not (path.parent / file_part).exists():
            broken.append(target)
    return broken


def named_experiments(text: str) -> list[str]:
    """The experiment names on a chapter page's ``Experiments:`` line."""
    match = EXPERIMENTS_LINE.search(text)
    return re.findall(r"`([^`]+)`", match.group(1)) if match else []


def test_readme_is_at_most_300_lines():
    assert not too_long(README.read_text(), README_MAX_LINES)


def test_a_301_line_readme_is_rejected():
    text = "\n".join(f"line {i}" for i in range(README_MAX_LINES + 1))
    assert too_long(text, README_MAX_LINES)
    assert not too_long("\n".join(text.splitlines()[:README_MAX_LINES]), README_MAX_LINES)


def test_readme_says_what_sglab_is_first():
    prose = [line for line in README.read_text().splitlines()[1:12]
             if line and not line.startswith(("#", "```", "python3", "|"))]
    assert prose and "sglab" in prose[0]


@pytest.mark.parametrize("page", docs_pages(), ids=lambda p: p.name)
def test_docs_page_is_at_most_250_lines(page):
    assert not too_long(page.read_text(), PAGE_MAX_LINES), page.name


@pytest.mark.parametrize("path", [README, ROOT / "CHANGELOG.md", *docs_pages()],
                         ids=lambda p: p.name)
def test_relative_links_resolve(path):
    assert broken_links(path) == []


def test_a_broken_link_is_found(tmp_path):
    page = tmp_path / "page.md"
    (tmp_path / "there.md").write_text("x")
    page.write_text("[ok](there.md#part) [web](https://example.org) [gone](missing.md)")
    assert broken_links(page) == ["missing.md"]


def test_every_experiment_has_exactly_one_chapter_page():
    pages: dict[str, list[str]] = {}
    for page in docs_pages():
        for name in named_experiments(page.read_text()):
            pages.setdefault(name, []).append(page.name)
    registered = set(registry.experiments())
    assert sorted(set(pages) - registered) == [], "pages name unregistered experiments"
    assert sorted(registered - set(pages)) == [], "registered experiments without a page"
    assert {n: p for n, p in pages.items() if len(p) > 1} == {}


def test_every_claim_is_named_on_its_chapter_page():
    missing = []
    for page in docs_pages():
        text = page.read_text()
        for name in named_experiments(text):
            for claim_id in registry.experiment(name).spec.claims:
                if f"`{claim_id.split('[')[0]}" not in text:
                    missing.append(f"{page.name}: {name} {claim_id}")
    assert missing == []


def readme_verdicts() -> dict[str, str]:
    """The README experiment table's verdict column, by experiment."""
    rows = re.findall(r"^\| \[`([^`]+)`\]\(docs/[^)]+\) \|.*\| ([^|]+) \|$",
                      README.read_text(), re.MULTILINE)
    return {name: verdict.strip() for name, verdict in rows}


def test_readme_verdicts_are_the_scorecards():
    """An experiment with a committed `default` result shows the scorecard's summary; one
    without says it has none."""
    summaries = experiment_summaries(collect(ROOT / "results"))
    verdicts = readme_verdicts()
    assert set(verdicts) == set(registry.experiments())
    for name, verdict in verdicts.items():
        assert verdict == summaries.get(name, NOT_YET), name


def test_readme_table_links_every_experiment_to_its_page():
    text = README.read_text()
    for page in docs_pages():
        for name in named_experiments(page.read_text()):
            assert re.search(rf"\[`{re.escape(name)}`\]\(docs/{re.escape(page.name)}", text), name


def readme_commands() -> list[str]:
    block = re.search(r"^```bash\n(.*?)^```$", README.read_text(), re.MULTILINE | re.DOTALL)
    assert block, "the README has no bash block"
    return block.group(1).splitlines()


def test_the_readme_test_command_is_what_ci_runs():
    ci = (ROOT / ".ci" / "run").read_text()
    extract = re.search(r"^test_command=\$\((.*)\)$", ci, re.MULTILINE)
    assert extract, ".ci/run no longer reads the test command from the README"
    ci_command = subprocess.run(["bash", "-c", extract.group(1)], cwd=ROOT, check=True,
                                capture_output=True, text=True).stdout.strip()
    install, tests = readme_commands()
    assert ci_command == tests
    assert "pytest" in tests and "sglab run" in install
    # both start from the same fresh environment with torch pinned to the CPU wheel
    assert install.split("pip install")[0] == tests.split("pip install")[0]
    assert "torch==" in install and "torch==" in tests
