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
            assert f"{config.model.init.gamma:g}" == arm.labels["gamma"]
            assert config.model.block.norm == "post" and config.model.n_heads == 1
            assert config.task.seen_non_inferential == (arm.labels["group"] == "phase")
    paper = experiment.preset("paper")
    assert len(paper["lrs"]) == 9 and min(paper["lrs"]) == 1e-4 and max(paper["lrs"]) == 3e-4
    assert paper["lr_wd"]["depth"] == 3 and len(paper["lr_wd"]["weight_decays"]) == 5


def test_parameters_are_checked_by_the_model():
    from sglab.errors import SglabError

    experiment = InitScale()
    with pytest.raises(SglabError, match="lr_wd"):
        experiment.preset("quick", changes=["lr_wd={depth: 3}"])
    assert experiment.preset("quick", changes=["gammas=[0.4, 0.8]"])["gammas"] == [0.4, 0.8]


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    root = tmp_path_factory.mktemp("init_scale")
    results = run_experiment(registry.experiment("init-scale"), "quick", root / "out",
                             root / "runs", workers=2, printer=lambda _: None)
    return root, results


def test_quick_preset_writes_every_figure_and_the_claims(quick):
    root, results = quick
    assert json.loads((root / "out" / "results.json").read_text())["claims"] == results["claims"]
    claims = {c["id"]: c for c in results["claims"]}
    assert list(claims) == list(InitScale().spec.claims)
    for claim in claims.values():
        assert claim["source"].startswith("004_cc40e9fcbd7676e3.txt") and claim["evidence"]
    phase = claims["small-init-inferential-large-init-symmetric"]
    assert phase["verdict"] != "NOT MEASURED" and phase["values"]["depth"] == [2]
    assert len(phase["values"]["inferential at the largest γ"]) == 1  # one entry per depth
    by_gamma = claims["condensation-grows-with-gamma"]
    assert by_gamma["verdict"] != "NOT MEASURED"
    assert len(by_gamma["values"]["W_Q(1) fraction at the largest γ"]) == 1
    for claim_id in ("inferential-condenses", "inferential-embedding-low-rank",
                     "symmetric-clusters-mirrored-pairs", "attention-information-flow"):
        claim = claims[claim_id]  # both solution types needed: measured, or said why not
        assert claim["verdict"] != "NOT MEASURED" or "both solution types" in claim["evidence"]
    assert sum(int(part.split()[0]) for part in results["verdicts"].split(", ")) == len(claims)
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


def test_measurements_name_every_value_their_claims_read():
    """Constructed runs of both solution types at two depths: every claim is measured, and
    the values the spec's rules read are all there (judge_all raises otherwise)."""
    from sglab.experiments.claims import Verdict, judge_all
    from sglab.experiments.init_scale.init_scale import (
        condensation_measurement,
        mechanism_measurements,
        solution_measurement,
    )

    runs = []
    for depth in (2, 3):
        for gamma, (test, inferential, symmetric) in ((0.3, (0.95, 0.02, 0.9)),
                                                      (0.65, (0.97, 0.9, 0.03))):
            run = _run(depth, gamma, 0, 1e-3, test, inferential, symmetric)
            small = gamma == 0.65
            run.update(condensation_fraction=0.1 if small else 0.8,
                       embedding_rank=3.0 if small else 30.0, mirrored=0.1 if small else 0.95,
                       unmirrored=0.05, anchors_to_key=0.6 if small else 0.1,
                       last_to_anchors=0.2 if small else 0.8)
            runs.append(run)
    depths, gammas = [2, 3], [0.3, 0.65]
    measured = {"small-init-inferential-large-init-symmetric":
                solution_measurement(phase_cells(runs, depths, gammas), depths, gammas),
                "condensation-grows-with-gamma": condensation_measurement(runs, depths, gammas),
                **mechanism_measurements(runs)}
    claims = judge_all(InitScale().spec.claims, measured)
    assert [c.verdict for c in claims] == [Verdict.REPRODUCES] * len(claims)
    assert claims[0].values["a smaller γ symmetric"] == [True, True]
