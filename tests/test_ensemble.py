import json

import pytest
import torch

from sglab.cli import main
from sglab.config import build_run_config
from sglab.store import RunStore
from sglab.tasks import build_task
from sglab.train.ensemble import EnsembleTrainer, ensemble_key
from sglab.train.loop import Trainer, execution_run_id, load_trained
from tests.conftest import tiny_config


def member_configs(*extra):
    # three members differing in seed, learning rate and weight decay; a small clip so
    # that clipping is active on some steps
    return [
        tiny_config(f"seed={seed}", f"train.lr={lr}", f"train.weight_decay={wd}",
                    "train.grad_clip=0.5", "train.steps=12", "train.eval_interval=6",
                    "train.checkpoint_interval=6", *extra)
        for seed, lr, wd in [(0, 3e-3, 0.1), (1, 1e-3, 0.0), (2, 2e-3, 0.05)]
    ]


def final_weights(runs_dir, config, execution="alone"):
    _, _, model = load_trained(runs_dir / execution_run_id(config, execution))
    return {n: p.detach() for n, p in model.state_dict().items()}


def assert_same_as_alone(configs, tmp_path, rtol=1e-4, atol=1e-6):
    together, alone = tmp_path / "together", tmp_path / "alone"
    summaries = EnsembleTrainer(configs, together, store=RunStore(together), printer=None).run()
    assert [s["status"] for s in summaries] == ["finished"] * len(configs)
    assert all(s["ensemble_size"] == len(configs) for s in summaries)
    for config in configs:
        Trainer(config, alone, printer=None).run()
        a, b = final_weights(together, config, "ensemble"), final_weights(alone, config)
        for name in a:
            torch.testing.assert_close(a[name], b[name], rtol=rtol, atol=atol, msg=name)
        metrics = [json.loads(line) for line in
                   (together / execution_run_id(config, "ensemble") / "metrics.jsonl")
                   .read_text().splitlines()]
        reference = [json.loads(line) for line in
                     (alone / config.run_id() / "metrics.jsonl").read_text().splitlines()]
        assert [m["step"] for m in metrics] == [m["step"] for m in reference]
        for m, r in zip(metrics, reference):
            for key in r:
                if key.endswith("exact_match"):
                    assert m[key] == pytest.approx(r[key], abs=0.011), key


def test_ensemble_members_get_the_updates_they_would_get_alone(tmp_path):
    assert_same_as_alone(member_configs(), tmp_path)


def test_ensemble_bidirectional_members_with_padding_match_alone(tmp_path):
    # bidirectional models train on prefix rows; member batches are padded to one shape
    configs = member_configs("model.attention_mask=bidirectional", "model.pos_encoding=none")
    assert_same_as_alone(configs, tmp_path)


def test_ensemble_of_copy_gated_geometric_members_matches_alone(tmp_path):
    # the NDR: geometric attention has scalar parameters (alpha, beta, gamma; one value a
    # member once stacked), shared layers, copy gates without gate dropout
    configs = member_configs("model.attention_mask=bidirectional", "model.pos_encoding=none",
                             "model.attention=geometric", "model.copy_gate=true",
                             "model.norm=post", "model.shared_layers=true")
    assert_same_as_alone(configs, tmp_path)


def test_ensemble_of_classifiers_on_batches_of_different_widths_matches_alone(tmp_path):
    # CTL with one length per batch (the thesis's bucketed batches): each member's batch
    # has its own width, while a classifier's target is one readout slot, not a row of
    # next-token targets
    configs = member_configs("task.name=ctl", "task.train_sampling=bucketed",
                             "task.train_size=300", "task.test_size=64",
                             "model.attention_mask=bidirectional", "model.pos_encoding=none",
                             "model.readout=last")
    widths = {configs[0].seed: None}
    for config in configs:
        task = build_task(config.task)
        batch = task.train_batch(8, torch.Generator().manual_seed(config.seed))
        widths[config.seed] = batch.input_ids.shape[1]
    assert len(set(widths.values())) > 1  # the members' first batches differ in width
    assert_same_as_alone(configs, tmp_path)


def test_ensemble_of_classifiers_scoring_only_the_labels_matches_alone(tmp_path):
    # task.scored_classes=labels: the logit mask is a buffer of the template model,
    # stacked per member like every other buffer
    configs = member_configs("task.name=ctl", "task.scored_classes=labels",
                             "task.train_size=300", "task.test_size=64",
                             "model.attention_mask=bidirectional", "model.pos_encoding=none",
                             "model.readout=last")
    assert_same_as_alone(configs, tmp_path)


def test_ensemble_sgd_and_different_lengths(tmp_path):
    configs = member_configs("train.optimizer=sgd", "train.momentum=0.9")
    configs[1] = configs[1].model_copy(update={"train": configs[1].train.model_copy(
        update={"steps": 6})})
    assert_same_as_alone(configs, tmp_path)


def test_ensemble_decaying_every_parameter_matches_alone(tmp_path):
    # train.weight_decay_on=all: biases, norm gains and the geometric attention's scalars
    # decay too (one dimension less than their stack in the ensemble)
    configs = member_configs("train.weight_decay_on=all", "model.attention_mask=bidirectional",
                             "model.pos_encoding=none", "model.attention=geometric",
                             "model.copy_gate=true", "model.norm=post")
    assert_same_as_alone(configs, tmp_path)


def test_ensemble_of_relative_members_with_learned_scales_matches_alone(tmp_path):
    # the thesis code's relative attention: a trained scalar scale (one value a member once
    # stacked), no biases on its projections
    configs = member_configs("model.attention_mask=bidirectional", "model.pos_encoding=relative",
                             "model.attention.learned_scale=true", "model.attention.bias=false",
                             "train.weight_decay_on=all")
    # W_kP's gradient sums over the 2L-1 distances in another order under vmap: its
    # elements differ by up to ~4e-6 after 12 Adam steps (a missed update: ~lr = 1e-3)
    assert_same_as_alone(configs, tmp_path, atol=2e-5)


def test_ensemble_key_groups_only_compatible_runs():
    a, b, c = member_configs()
    assert ensemble_key(a) == ensemble_key(b) == ensemble_key(c)
    wider = tiny_config("model.d_model=32")
    assert ensemble_key(wider) != ensemble_key(a)
    dropout = tiny_config("model.dropout=0.1")
    assert ensemble_key(dropout) is not None and ensemble_key(dropout) != ensemble_key(a)
    lstm = {"task": {"name": "ctl"}, "model": {"name": "lstm", "n_layers": 2, "dropout": 0.1}}
    assert ensemble_key(build_run_config(lstm)) is None  # nn.LSTM draws its own masks


class Interrupted(Exception):
    pass


def test_ensemble_killed_mid_run_resumes_to_the_same_weights(tmp_path):
    configs = member_configs()
    runs = tmp_path / "runs"
    second = execution_run_id(configs[1], "ensemble")

    def die_at_second_members_checkpoint(line):
        if line.startswith(f"[{second}] eval @ 6"):
            raise Interrupted  # member 0 has saved step 6; members 1 and 2 have not

    with pytest.raises(Interrupted):
        EnsembleTrainer(configs, runs, printer=die_at_second_members_checkpoint).run()
    assert Trainer(configs[0], runs, execution="ensemble").checkpoint_step() == 6
    assert Trainer(configs[2], runs, execution="ensemble").checkpoint_step() == 0
    # resuming: member 0 goes on as an ensemble of one from its checkpoint (optimizer state
    # included), members 1 and 2 restart together
    summaries = EnsembleTrainer(configs, runs, printer=None).run()
    assert [s["step"] for s in summaries] == [12, 12, 12]
    alone = tmp_path / "alone"
    for config in configs:
        Trainer(config, alone, printer=None).run()
        a, b = final_weights(runs, config, "ensemble"), final_weights(alone, config)
        for name in a:
            torch.testing.assert_close(a[name], b[name], rtol=1e-4, atol=1e-6, msg=name)


def test_ensemble_member_with_non_finite_loss_fails_and_the_others_finish(tmp_path):
    configs = [tiny_config(f"seed={seed}", f"train.lr={lr}", "train.grad_clip=null",
                           "train.warmup_steps=0", "train.lr_schedule=constant")
               for seed, lr in [(0, 1e-3), (1, 1e4), (2, 2e-3)]]
    summaries = EnsembleTrainer(configs, tmp_path, printer=None).run()
    assert [s["status"] for s in summaries] == ["finished", "failed", "finished"]
    assert "training loss became" in summaries[1]["error"]
    assert summaries[0]["step"] == summaries[2]["step"] == 30


def test_member_and_lone_run_of_one_config_are_different_runs(tmp_path, capsys):
    """A member's float rounding differs from a lone run's and training amplifies it, so a
    config trained both ways is two runs, and neither is mistaken for the other."""
    configs = member_configs()
    store = RunStore(tmp_path)
    members = EnsembleTrainer(configs, tmp_path, store=store, printer=None).run()
    lone = Trainer(configs[0], tmp_path, store=store, printer=print).run()
    assert "already finished" not in capsys.readouterr().out  # the lone run really trained
    assert members[0]["run_id"] == configs[0].run_id() + "-ensemble" != lone["run_id"]
    assert (members[0]["execution"], lone["execution"]) == ("ensemble", "alone")
    executions = {row["run_id"]: row["summary"]["execution"] for row in store.query()}
    assert executions[lone["run_id"]] == "alone" and executions[members[0]["run_id"]] == "ensemble"
    # an interrupted member resumes from the command line as an ensemble member
    summary_path = tmp_path / members[1]["run_id"] / "summary.json"
    summary_path.write_text(json.dumps({**members[1], "status": "running"}))
    assert main(["train", "--resume", members[1]["run_id"], "--runs-dir", str(tmp_path)]) == 0
    assert json.loads(summary_path.read_text())["execution"] == "ensemble"


def test_a_member_is_evaluated_by_the_one_evaluator_on_its_own_weights(tmp_path):
    # members leave the ensemble step for evaluation: the line a member logs is the
    # evaluator's record of its checkpoint, prefix rows (bidirectional) included
    from sglab.train.evaluate import evaluate

    configs = member_configs("model.attention_mask=bidirectional", "model.pos_encoding=none")[:2]
    EnsembleTrainer(configs, tmp_path, store=RunStore(tmp_path), printer=None).run()
    for config in configs:
        run_dir = tmp_path / execution_run_id(config, "ensemble")
        logged = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()
                  if json.loads(line).get("kind", "eval") == "eval"][-1]
        _, task, model = load_trained(run_dir, "last")
        record = {}
        for split in task.eval_splits:
            record.update(evaluate(model, task, split, config.train.eval_batch_size))
        assert record == {k: logged[k] for k in record}
