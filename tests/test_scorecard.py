"""The scorecard is generated from the committed results alone, and the committed
docs/scorecard.md is what the results generate."""

import json
from pathlib import Path

from sglab import registry
from sglab.cli import main
from sglab.experiments.scorecard import (
    collect,
    experiment_summaries,
    render_html,
    render_markdown,
    short_summary,
)
from sglab.experiments.spec import ScaleSpec

ROOT = Path(__file__).resolve().parents[1]


def claim(claim_id, verdict, ours, seed_mean=1.0):
    return {"id": claim_id, "statement": "s", "source": "001_76659a6d281e669d.txt, Table 5.1",
            "verdict": verdict, "evidence": "e",
            "values": {"NDR": {"mean": ours, "std": 0.01, "seeds": [ours - 0.01, ours + 0.01]}},
            "references": {"NDR": {"mean": seed_mean, "std": 0.0, "seeds": 5}}}


def write(root: Path, experiment: str, preset: str, claims: list[dict],
          runs: tuple[int, int] = (2, 4)) -> None:
    directory = root / experiment / preset
    directory.mkdir(parents=True)
    (directory / "results.json").write_text(json.dumps({
        "experiment": experiment, "preset": preset, "claims": claims, "seconds": 600,
        "created": "2026-12-05T10:00:00", "params": {"seeds": [0, 1]},
        "provenance": {"runs_trained": runs[0], "runs_reused": runs[1],
                       "run_seconds": 5400 if any(runs) else 0}}))


def test_the_scorecard_counts_verdicts_and_shows_both_numbers(tmp_path):
    write(tmp_path, "ndr-ctl", "default",
          [claim("a", "REPRODUCES", 0.99), claim("b", "FAILS", 0.14)])
    write(tmp_path, "ndr-ctl", "paper", [claim("a", "QUALITATIVE", 0.9)])
    write(tmp_path, "symmetry", "default",  # an older result: pass / fail, not judged
          [{"id": "c", "statement": "s", "evidence": "e", "passed": True}])
    found = collect(tmp_path)
    assert [r.preset for r in found["ndr-ctl"]] == ["default", "paper"]
    text = render_markdown(found, ["ndr-ctl", "symmetry", "topics"])
    assert "1 REPRODUCES, 0 QUALITATIVE, 1 FAILS, 0 NOT MEASURED" in text  # default only
    assert "| ndr-ctl | default | 2026-12-05 | 2 | 2 / 4 | 1.5 h | 1 reproduces, 1 fails |" in text
    assert "| symmetry | - | - | - | - | - | no judged result committed |" in text
    assert "| topics | - | - | - | - | - | no judged result committed |" in text
    assert ("| ndr-ctl (default) | `b` | 001_76659a6d281e669d.txt, Table 5.1 | "
            "NDR 1 ± 0 (n=5) | NDR 0.14 ± 0.01 (n=2) | **FAILS** |") in text
    assert experiment_summaries(found) == {"ndr-ctl": "1 reproduces, 1 fails"}
    page = render_html(found, ["ndr-ctl", "symmetry"])
    assert page.count("<span title=") == 3 and "FAILS: 1" in page
    assert render_markdown(collect(tmp_path), ["ndr-ctl", "symmetry", "topics"]) == text
    assert "## Setup" not in text


def test_an_experiment_that_trains_nothing_shows_its_analysis_time(tmp_path):
    write(tmp_path, "topics-pretrained", "default", [claim("a", "QUALITATIVE", 0.9)], runs=(0, 0))
    text = render_markdown(collect(tmp_path), ["topics-pretrained"])
    assert "| topics-pretrained | default | 2026-12-05 | 2 | 0 / 0 | 10 min (analysis) |" in text


def test_a_claim_judged_on_medians_shows_our_median(tmp_path):
    median = claim("m", "REPRODUCES", 0.6)
    median["values"]["NDR"].update(median=1.0, seeds=[1.0, 0.0, 1.0, 1.0, 0.0])
    write(tmp_path, "ndr-ctl", "default", [median])
    text = render_markdown(collect(tmp_path), ["ndr-ctl"])
    assert "| NDR 1 ± 0 (n=5) | NDR median 1 (n=5) | **REPRODUCES** |" in text


def test_the_setup_table_says_what_default_scales_down_and_what_faithful_costs(tmp_path):
    scale = ScaleSpec(default="d 64 instead of 256 | 3 seeds", faithful_cpu="2.9 h a run",
                      paper_gpu="not measured")
    text = render_markdown(collect(tmp_path), ["ndr-ctl", "topics"],
                           {"ndr-ctl": scale, "topics": None})
    assert ("| ndr-ctl | d 64 instead of 256 \\| 3 seeds | 2.9 h a run | not measured |"
            in text)
    assert "| topics | - | - | - |" in text
    assert text.index("## Setup") < text.index("## Claims")


def test_an_experiment_that_needs_user_files_says_which_while_unmeasured(tmp_path):
    scale = ScaleSpec(default="small", faithful_cpu="-", paper_gpu="-",
                      user_files="qa1_x_train.txt in task.data_dir")
    write(tmp_path, "topics", "default", [claim("a", "REPRODUCES", 0.99)])
    text = render_markdown(collect(tmp_path), ["dnc-babi", "topics", "symmetry"],
                           {"dnc-babi": scale, "topics": scale, "symmetry": None})
    assert ("| dnc-babi | - | - | - | - | - | not measured: needs qa1_x_train.txt in "
            "task.data_dir |" in text)
    assert "| symmetry | - | - | - | - | - | no judged result committed |" in text
    assert "| topics | default |" in text  # a committed result is shown, not the files


def test_short_summary_leaves_out_empty_verdicts():
    assert short_summary({"REPRODUCES": 0, "QUALITATIVE": 2, "FAILS": 0,
                          "NOT MEASURED": 1}) == "2 qualitative, 1 not measured"


def test_the_committed_scorecard_is_what_the_committed_results_generate():
    experiments = registry.experiments()
    names = sorted(experiments)
    expected = render_markdown(collect(ROOT / "results"), names,
                               {name: experiments[name].spec.scale for name in names})
    assert (ROOT / "docs" / "scorecard.md").read_text() == expected, \
        "docs/scorecard.md is stale: run `sglab scorecard`"


def test_scorecard_command_writes_both_pages_and_refuses_a_missing_directory(tmp_path, capsys):
    write(tmp_path / "results", "ndr-ctl", "default", [claim("a", "REPRODUCES", 0.99)])
    out, page = tmp_path / "scorecard.md", tmp_path / "scorecard.html"
    assert main(["scorecard", "--results", str(tmp_path / "results"), "--out", str(out),
                 "--html", str(page)]) == 0
    assert "`a`" in out.read_text() and "REPRODUCES" in page.read_text()
    assert main(["scorecard", "--results", str(tmp_path / "none")]) == 2
    assert "no results directory" in capsys.readouterr().err
