"""The init-scale experiment: phase-cell aggregation and the quick preset end to end."""

import json

import pytest

from sglab import registry
from sglab.experiments import run_experiment
from sglab.experiments.init_scale.init_scale import InitScale, phase_cells, pick_exemplars, solution_type
from sglab.tasks.anchors import probe_unseen_input


def _run(depth, gamma, seed, lr, test, inferential, symmetric):
    run = {"depth": depth, "gamma": gamma, "seed": seed, "lr": lr, "test": test,
           "inferential": inferential, "symmetric": symmetric}
    run["solution"] = solution_type(run)
    return run


def test_solution_type_rules():
    assert _run(2, 0.5, 0, 1e-3, 0.95, 0.1, 0.8)["solution"] == "symmetric"
    assert _run(2, 0.8, 0, 1e-3, 0.95, 0.7, 0.1)["solution"] == "inferential"
    assert _run(2, 0.8, 0, 1e-3, 0.95, 0.3, 0.2)["solution"] == "other"
    assert _run(2, 0.3, 0, 1e-3, 0.60, 0.1, 0.9)["solution"] == "unsolved"


def test_phase_cells_take_the_best_learning_rate_per_seed_and_scoring_then_average():
    runs = [_run(2, 0.5, 0, 1e-3, 0.9, 0.2, 0.6), _run(2, 0.5, 0, 2e-3, 0.95, 0.4, 0.3),
            _run(2, 0.5, 1, 1e-3, 0.99, 0.0, 1.0), _run(2, 0.5, 1, 2e-3, 0.97, 0.2, 0.9)]
    cell = phase_cells(runs, [2], [0.5])[(2, 0.5)]
    assert cell["inferential"] == pytest.approx((0.4 + 0.2) / 2)
    assert cell["symmetric"] == pytest.approx((0.6 + 1.0) / 2)
    assert cell["test"] == pytest.approx((0.95 + 0.99) / 2)
    assert cell["label"] == "symmetric" and cell["seeds"] == 2


def test_exemplars_prefer_runs_with_that_solution():
    runs = [_run(2, 0.3, 0, 1e-3, 0.5, 0.0, 0.9), _run(2, 0.5, 0, 1e-3, 0.95, 0.1, 0.8),
            _run(2, 0.8, 0, 1e-3, 0.95, 0.9, 0.0), _run(3, 0.8, 0, 1e-3, 0.99, 1.0, 0.0)]
    chosen = pick_exemplars(runs, depth=2)
    assert chosen["symmetric"] is runs[1]  # runs[0] is more symmetric but unsolved
    assert chosen["inferential"] is runs[2]


def test_the_attention_probe_is_the_papers_key_99_with_pair_43():
    tokens = probe_unseen_input(9).tolist()
    position = tokens.index(4)
    assert len(tokens) == 9 and tokens[position - 1] == 99 and tokens[position + 1] == 3
    assert tokens.count(99) == 1 and tokens.count(4) == 1


def test_presets_build_valid_configs():
    experiment = InitScale()
    for preset in ("quick", "default", "paper"):
        params = experiment.preset(preset)
        configs = experiment.configs(params, [])
        arms = experiment.arms(params)
        assert len(configs) == len(arms)
        for config, arm in zip(configs, arms):
            assert str(config.model.n_layers) == arm.labels["depth"]
            assert f"{config.model.init_gamma:g}" == arm.labels["gamma"]
            assert config.model.norm == "post" and config.model.n_heads == 1
            assert config.task.seen_non_inferential == (arm.labels["group"] == "phase")
    paper = experiment.preset("paper")
    assert len(paper["lrs"]) == 9 and min(paper["lrs"]) == 1e-4 and max(paper["lrs"]) == 3e-4


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    root = tmp_path_factory.mktemp("init_scale")
    results = run_experiment(registry.experiment("init-scale"), "quick", root / "out",
                             root / "runs", workers=2, printer=lambda _: None)
    return root, results


def test_quick_preset_writes_every_figure_and_the_claims(quick):
    root, results = quick
    assert json.loads((root / "out" / "results.json").read_text())["claims"] == results["claims"]
    assert [c["id"] for c in results["claims"]] == [
        "small-init-inferential-large-init-symmetric", "inferential-condenses",
        "inferential-embedding-low-rank"]
    for claim in results["claims"]:
        assert claim["passed"] in (True, False, None) and claim["evidence"]
    titles = [s["title"] for s in results["sections"]]
    for title in ("Phase diagram", "Condensation of W_Q(1)", "Spectra",
                  "t-SNE of first-layer outputs", "Information flow"):
        assert title in titles
    html = (root / "out" / "report.html").read_text()
    assert html.count("data:image/png;base64") == 6  # phase, condensation, 2 spectra, t-SNE, attention
    phase = next(s for s in results["sections"] if s["title"] == "Phase diagram")
    assert len(phase["tables"][0]["rows"]) == 2  # depth 2 x gamma {0.5, 1.0}
    # the snapshots for the spectrum-over-training panel were written
    assert len(list((root / "runs").glob("*/checkpoints/step_*.pt"))) == 2 * 4
