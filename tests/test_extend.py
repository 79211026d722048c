"""Extending a finished run (sglab.train.extend): the result equals the longer run trained
in one go, and every case where it would not is refused before anything is written."""

import json

import pytest
import torch

from sglab.cli import main
from sglab.errors import SglabError
from sglab.store import read_metrics
from sglab.sweep.jobs import run_job
from sglab.train import Trainer
from sglab.train.extend import extend_run, extend_shorter_twin
from tests.conftest import tiny_config

CONSTANT = ("train.lr_schedule=constant", "train.warmup_steps=5", "model.dropout=0.1",
            "train.eval_interval=10", "train.log_interval=10", "train.checkpoint_interval=15")


def _weights(run_dir):
    return torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)["model"]


def _timeless(run_dir):
    return [{k: v for k, v in r.items() if k != "seconds"}
            for r in read_metrics(run_dir, kind="all")]


def test_extended_run_equals_the_longer_run_trained_in_one_go(tmp_path):
    short = tiny_config(*CONSTANT, "train.steps=20")
    long = tiny_config(*CONSTANT, "train.steps=40")
    Trainer(short, tmp_path / "ext", printer=None).run()
    before = (tmp_path / "ext" / short.run_id() / "metrics.jsonl").read_text()

    extended = extend_run(tmp_path / "ext", short.run_id(), 40)
    assert extended.run_id() == long.run_id() != short.run_id()
    summary = Trainer(extended, tmp_path / "ext", printer=None).run(resume=True)
    clean = Trainer(long, tmp_path / "clean", printer=None).run()

    a, b = tmp_path / "ext" / long.run_id(), tmp_path / "clean" / long.run_id()
    assert summary["status"] == "finished" and summary["step"] == 40
    assert summary["extended_from"] == {"run_id": short.run_id(), "step": 20}
    assert all(torch.equal(x, y) for x, y in zip(_weights(a).values(), _weights(b).values()))
    assert _timeless(a) == _timeless(b)
    assert [r["step"] for r in read_metrics(a)] == [10, 20, 30, 40]
    assert summary["best"] == clean["best"]
    # the source run is untouched, and extending again reuses the extended run
    assert (tmp_path / "ext" / short.run_id() / "metrics.jsonl").read_text() == before
    assert extend_run(tmp_path / "ext", short.run_id(), 40).run_id() == long.run_id()


# a CTL classifier whose accuracy moves between evaluations (chance 1/8), so that the best
# checkpoint is at the first evaluation (seed 0), or at the last step of the source run
# (seed 5: 0/40 right at step 10, 9/40 at step 20)
CTL = ("task.name=ctl", "task.train_size=300", "task.iid_valid_size=40", "task.ood_valid_size=40",
       "task.test_size=40", "task.train_lengths=[1,2]", "task.ood_valid_lengths=[3,3]",
       "task.test_lengths=[4,4]", "train.lr=0.01", "model.readout=last",
       "model.attention_mask=bidirectional", "train.eval_max_examples=5",
       "train.target_metric=iid_valid/exact_match", "train.target_threshold=0.1")


@pytest.mark.parametrize("seed, best_step", [(0, 10), (5, 20)])
def test_a_run_with_capped_evaluations_extends_to_the_longer_run(tmp_path, seed, best_step):
    """A capped run scores every example at its last step only; the extension re-scores
    that step with the cap, as the longer run does, so metrics, best checkpoint, target
    and weights all equal the longer run trained in one go."""
    short = tiny_config(*CONSTANT, *CTL, f"seed={seed}", "train.steps=20")
    long = tiny_config(*CONSTANT, *CTL, f"seed={seed}", "train.steps=40")
    source = Trainer(short, tmp_path / "ext", printer=None).run()
    assert source["best"]["step"] == best_step
    full = read_metrics(tmp_path / "ext" / short.run_id())[-1]
    extended = extend_run(tmp_path / "ext", short.run_id(), 40)
    summary = Trainer(extended, tmp_path / "ext", printer=None).run(resume=True)
    clean = Trainer(long, tmp_path / "clean", printer=None).run()
    a, b = tmp_path / "ext" / long.run_id(), tmp_path / "clean" / long.run_id()
    assert _timeless(a) == _timeless(b)
    rescored = read_metrics(a)[1]
    assert rescored["step"] == 20 and rescored != {**full, "seconds": rescored["seconds"]}
    assert all(torch.equal(x, y) for x, y in zip(_weights(a).values(), _weights(b).values()))
    best = [torch.load(d / "checkpoints" / "best.pt", weights_only=True) for d in (a, b)]
    assert best[0]["step"] == best[1]["step"]
    assert all(torch.equal(x, y) for x, y in zip(best[0]["model"].values(),
                                                 best[1]["model"].values()))
    assert summary["best"] == clean["best"]
    assert summary["target"]["step"] == clean["target"]["step"]


def test_a_capped_run_whose_lost_best_checkpoint_the_longer_run_keeps_is_refused(tmp_path):
    """Seed 1: 0/40 right at step 10 and 5/40 at step 20, so the source kept step 20 as its
    best; with the cap at step 20 (0/5) the longer run keeps step 10, whose weights the
    source overwrote."""
    config = tiny_config(*CONSTANT, *CTL, "seed=1", "train.steps=20")
    assert Trainer(config, tmp_path, printer=None).run()["best"]["step"] == 20
    listing = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(SglabError, match="keeps step 10, whose weights"):
        extend_run(tmp_path, config.run_id(), 40)
    assert sorted(p.name for p in tmp_path.iterdir()) == listing


@pytest.mark.parametrize("overrides, steps, message", [
    (("train.lr_schedule=cosine",), 40, "decays towards train.steps"),
    ((), 20, "extend it to more than that"),
    (("train.steps=25", "train.log_interval=5"), 40, "not a multiple of its train.eval_interval"),
])
def test_extension_that_would_differ_from_a_longer_run_is_refused(tmp_path, overrides, steps,
                                                                   message):
    config = tiny_config(*CONSTANT, "train.steps=20", *overrides)
    Trainer(config, tmp_path, printer=None).run()
    listing = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(SglabError, match=message):
        extend_run(tmp_path, config.run_id(), steps)
    assert sorted(p.name for p in tmp_path.iterdir()) == listing


def test_an_early_stopped_run_is_the_longer_run_already(tmp_path):
    """A longer run of a config that stopped early stops at the same step: the extension
    is a finished copy under the longer config's id, equal to that run trained in one go."""
    stop = ("train.early_stop_metric=iid_test/loss", "train.early_stop_threshold=-1e9")
    stopped = tiny_config(*CONSTANT, "train.steps=40", *stop)  # loss >= -1e9: stops at once
    assert Trainer(stopped, tmp_path / "ext", printer=None).run()["stopped_early"]
    extended = extend_run(tmp_path / "ext", stopped.run_id(), 80)
    summary = Trainer(extended, tmp_path / "ext", printer=None).run(resume=True)
    clean = Trainer(tiny_config(*CONSTANT, "train.steps=80", *stop), tmp_path / "clean",
                    printer=None).run()
    assert extended.run_id() == clean["run_id"] == summary["run_id"] != stopped.run_id()
    assert (summary["status"], summary["step"], summary["steps"]) == ("finished", 10, 80)
    timeless = [{k: v for k, v in run["final"].items() if k != "seconds"} for run in (summary, clean)]
    assert summary["stopped_early"] and timeless[0] == timeless[1]
    assert summary["extended_from"] == {"run_id": stopped.run_id(), "step": 10}
    a, b = tmp_path / "ext" / extended.run_id(), tmp_path / "clean" / extended.run_id()
    assert _timeless(a) == _timeless(b)
    assert all(torch.equal(x, y) for x, y in zip(_weights(a).values(), _weights(b).values()))


def test_unfinished_run_is_refused(tmp_path):
    config = tiny_config(*CONSTANT, "train.steps=20")
    run_dir = tmp_path / config.run_id()
    Trainer(config, tmp_path, printer=None).run()
    summary = json.loads((run_dir / "summary.json").read_text())
    (run_dir / "summary.json").write_text(json.dumps({**summary, "status": "interrupted"}))
    with pytest.raises(SglabError, match="not finished.*--resume"):
        extend_run(tmp_path, config.run_id(), 40)


def test_cli_extends_a_run_and_rejects_half_an_option_pair(tmp_path, capsys):
    config = tiny_config(*CONSTANT, "train.steps=20")
    Trainer(config, tmp_path, printer=None).run()
    assert main(["train", "--extend", config.run_id(), "--runs-dir", str(tmp_path)]) == 2
    assert "go together" in capsys.readouterr().err
    assert main(["train", "--extend", config.run_id(), "--steps", "30",
                 "--runs-dir", str(tmp_path)]) == 0
    longer = tiny_config(*CONSTANT, "train.steps=30")
    summary = json.loads((tmp_path / longer.run_id() / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["step"] == 30


def test_a_sweep_job_trains_a_run_on_from_its_finished_shorter_twin(tmp_path):
    """run_job (every backend, experiments included) extends the longest finished shorter
    twin of a lone run instead of training from step 0; the result equals a clean run."""
    short, mid = tiny_config(*CONSTANT, "train.steps=10"), tiny_config(*CONSTANT, "train.steps=20")
    long = tiny_config(*CONSTANT, "train.steps=40")
    other_seed = tiny_config(*CONSTANT, "train.steps=20", "seed=1")
    for config in (short, mid, other_seed):
        Trainer(config, tmp_path / "store", printer=None).run()
    [summary] = run_job([long.to_dict()], str(tmp_path / "store"), 1, None, quiet=True)
    assert summary["extended_from"] == {"run_id": mid.run_id(), "step": 20}
    clean = Trainer(long, tmp_path / "clean", printer=None).run()
    a, b = tmp_path / "store" / long.run_id(), tmp_path / "clean" / long.run_id()
    assert all(torch.equal(x, y) for x, y in zip(_weights(a).values(), _weights(b).values()))
    assert _timeless(a) == _timeless(b) and summary["final"]["step"] == clean["final"]["step"]
    # no finished twin: trained from step 0
    [fresh] = run_job([tiny_config(*CONSTANT, "train.steps=20", "seed=2").to_dict()],
                      str(tmp_path / "store"), 1, None, quiet=True)
    assert fresh["status"] == "finished" and "extended_from" not in fresh
    assert extend_shorter_twin(tmp_path / "store", long) is None  # it exists now
