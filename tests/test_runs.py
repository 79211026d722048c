"""Labelled runs: arms build configs, grid axes reject --set, RunSet groups and summarizes."""

import json

import pytest

from sglab.errors import SglabError
from sglab.experiments.runs import (
    Arm,
    FinishedRun,
    RunSet,
    build_arm_configs,
    format_mean_std,
    selected,
)

BASE = {"task": {"name": "addition", "train_size": 100, "test_size": 50},
        "model": {"name": "transformer", "n_layers": 2, "d_model": 16, "n_heads": 2},
        "train": {"steps": 10}}


def _arms():
    return [Arm({"pe": pe}, BASE, {"model.pos_encoding": pos}, seed)
            for pe, pos in (("learned", "learned"), ("NoPE", "none")) for seed in (0, 1)]


def test_arms_build_configs_with_their_overrides_and_seed():
    configs = build_arm_configs("demo", _arms(), ["train.lr=0.01"])
    assert [c.model.positions.kind for c in configs] == ["learned", "learned", "none", "none"]
    assert [c.seed for c in configs] == [0, 1, 0, 1]
    assert {c.train.lr for c in configs} == {0.01}
    assert len({c.run_id() for c in configs}) == 4


@pytest.mark.parametrize("override, named", [
    ("model.pos_encoding=rotary", "'model.pos_encoding' is a grid axis of experiment 'demo'"),
    ("model={}", "'model.pos_encoding' is a grid axis"),
    ("seed=7", "use --seeds N"),
])
def test_overrides_on_a_grid_axis_are_errors(override, named):
    with pytest.raises(SglabError, match=named.replace("(", r"\(").replace(")", r"\)")):
        build_arm_configs("demo", _arms(), [override])


def _finished(labels, seed, accuracy, tmp_path):
    directory = tmp_path / f"run{len(list(tmp_path.iterdir()))}"
    directory.mkdir()
    (directory / "metrics.jsonl").write_text(
        json.dumps({"step": 5, "train/loss": 2.0}) + "\n"
        + json.dumps({"step": 10, "iid_test/exact_match": accuracy}) + "\n")
    config = Arm(labels, BASE, {}, seed).config()
    summary = {"run_id": directory.name, "final": {"iid_test/exact_match": accuracy}}
    return FinishedRun(labels, config, summary, directory)


def test_runset_filters_groups_and_summarizes(tmp_path):
    runs = RunSet([_finished({"pe": "learned", "removed": "{}"}, 0, 0.9, tmp_path),
                   _finished({"pe": "learned", "removed": "{}"}, 1, 0.7, tmp_path),
                   _finished({"pe": "NoPE", "removed": "{}"}, 0, 0.5, tmp_path),
                   _finished({"pe": "NoPE", "removed": "{0}"}, 0, 0.1, tmp_path)])
    assert len(runs.where(pe="NoPE")) == 2
    assert runs.only(pe="NoPE", removed="{0}").final["iid_test/exact_match"] == 0.1
    with pytest.raises(LookupError):
        runs.only(pe="learned")
    groups = runs.group_by("pe")
    assert list(groups) == ["learned", "NoPE"]
    assert groups["learned"].mean("iid_test/exact_match") == pytest.approx(0.8)
    assert groups["learned"].mean_std("iid_test/exact_match") == "0.8000 ± 0.1414"
    assert list(runs.group_by("pe", "removed")) == [("learned", "{}"), ("NoPE", "{}"),
                                                    ("NoPE", "{0}")]
    table = runs.table(["pe"], {"n": len, "acc": lambda g: g.mean_std("iid_test/exact_match", 2)})
    assert table["columns"] == ["pe", "n", "acc"]
    assert table["rows"] == [["learned", 2, "0.80 ± 0.14"], ["NoPE", 2, "0.30 ± 0.28"]]
    assert runs.label_values("removed") == ["{}", "{0}"]


def test_group_means_read_the_final_or_a_chosen_record(tmp_path):
    runs = RunSet([_finished({"pe": "NoPE"}, seed, 0.5, tmp_path) for seed in (0, 1)])
    for run, (short, long) in zip(runs, [(1.0, 0.2), (0.8, 0.4)]):
        run.summary["final"].update({"iid_test/exact_match/length=12": long,
                                     "iid_test/exact_match/length=3": short})
    assert runs.group_means("iid_test/exact_match/length=") == pytest.approx({3: 0.9, 12: 0.3})
    assert list(runs.group_means("iid_test/exact_match/length=")) == [3, 12]  # numeric order
    chosen = runs.group_means("iid_test/exact_match/length=",
                              record=lambda run: {"iid_test/exact_match/length=3": run.seed})
    assert chosen == pytest.approx({3: 0.5})


def test_finished_run_reads_metrics_lazily_with_training_loss_records(tmp_path):
    run = _finished({"pe": "NoPE"}, 0, 0.5, tmp_path)
    assert run.curve("iid_test/exact_match") == ([10], [0.5])
    assert run.curve("train/loss") == ([5], [2.0])
    assert run["pe"] == "NoPE" and run.seed == 0 and run.best is None


def test_selected_reads_the_best_checkpoints_record_else_the_last(tmp_path):
    run = _finished({"pe": "NoPE"}, 0, 0.5, tmp_path)
    assert run.selected == {"step": 10, "iid_test/exact_match": 0.5}  # no best: the last
    with open(run.directory / "metrics.jsonl", "a") as f:
        f.write(json.dumps({"step": 20, "iid_valid/exact_match": 0.6,
                            "iid_test/exact_match": 0.4}) + "\n")
    later = FinishedRun(run.labels, run.config, {**run.summary, "best": {"step": 10}},
                        run.directory)
    assert selected("iid_test/exact_match")(later) == 0.5  # the step-10 record, not the last
    assert RunSet([later]).values(selected("iid_test/exact_match")) == [0.5]
    assert RunSet([later]).values("iid_test/exact_match") == [0.5]  # summary's final record


def test_format_mean_std():
    assert format_mean_std([]) == "-"
    assert format_mean_std([0.5]) == "0.5000"
    assert format_mean_std([0.5, 0.7], digits=3) == "0.600 ± 0.141"
    assert format_mean_std([0.0076, 0.0082], digits=3, significant=True) == "0.0079 ± 0.00042"


def test_preset_param_changes_reach_the_runs_and_unknown_keys_are_errors(tmp_path, capsys):
    from sglab import registry
    from sglab.cli import main

    experiment = registry.experiment("masks-add-mul")
    params = experiment.preset("quick", changes=["models=[LSTM]", "lstm_hidden=12"])
    assert params["models"] == ["LSTM"] and experiment.presets["quick"]["models"] != ["LSTM"]
    configs = experiment.configs(params, [])
    assert [(c.model.name, c.model.d_model) for c in configs] == [("lstm", 12)]
    ndr = registry.experiment("ndr-arithmetic").preset(
        "quick", changes=["variants.ndr.train.steps=7"])
    assert ndr["variants"]["ndr"]["train"]["steps"] == 7
    for change, named in (("modelz=[LSTM]", "'modelz'"),
                          ("variants.ndr.train.stepz=7", "'variants.ndr.train.stepz'"),
                          ("models.x=1", "'models.x'")):
        with pytest.raises(SglabError, match=named):
            registry.experiment("masks-add-mul" if "model" in change else "ndr-arithmetic"
                                ).preset("quick", changes=[change])
    out = tmp_path / "out"
    assert main(["run", "masks-add-mul", "--preset", "quick", "--param", "modelz=[LSTM]",
                 "--runs-dir", str(tmp_path / "runs"), "--out", str(out)]) == 2
    assert "keys there: " in capsys.readouterr().err and not out.exists()
