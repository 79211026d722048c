"""A field set where it has no effect, or a metric name the task never logs, is a config error.

Fields left at their default are never errors, so configs that do not set them (and their
run ids) are unchanged; every config of every experiment preset still validates. A
transformer's settings live in families whose kinds have only the fields they use, so there
such a setting is an unknown key; written the old flat way it is the error it always was.
"""

import shutil
from pathlib import Path

import pytest
import torch
import yaml

from sglab import registry
from sglab.cli import main
from sglab.config import RunConfig, build_run_config, parse_override, validate
from sglab.errors import SglabError
from sglab.models import build_model
from sglab.tasks import build_task
from sglab.train.evaluate import evaluate
from sglab.train.loop import load_run_config

FIXTURES = Path(__file__).parent / "fixtures" / "published"
TEXT_FIXTURE = Path(__file__).parent / "fixtures" / "text" / "tiny.txt"
GEOMETRIC = ["model.attention=geometric", "model.attention_mask=bidirectional",
             "model.pos_encoding=none"]
ABS_REL = ["model.attention=abs_rel_gated", "model.attention_mask=bidirectional",
           "model.pos_encoding=none"]
COPY_GATE = ["model.copy_gate=true", "model.norm=post"]
ACT = ["model.shared_layers=true", "model.act=graves"]

# (overrides, the field as the message shows it, the switch the message asks for); the
# transformer's settings here are written the old flat way, which the migration checks
NO_EFFECT = [
    (["model.init_gamma=0.3"], "init_gamma=0.3", "init=gamma"),
    (["model.pos_encoding=none", "model.max_len=64"], "max_len=64",
     "pos_encoding=learned, sinusoidal or rotary"),
    (["model.ffn=none", "model.activation=relu"], "activation=relu",
     "ffn=dense, topk, sigma_moe, switch or s_base"),
    ([*GEOMETRIC, "model.attention_out_projection=false"], "attention_out_projection=false",
     "attention=softmax"),
    (["model.attention_dropout=0.1"], "attention_dropout=0.1",
     "attention=geometric or attention=abs_rel_gated"),
    ([*ABS_REL, "model.geometric_normalize=true"], "geometric_normalize=true", "attention=geometric"),
    (["model.copy_gate_bias_init=-1"], "copy_gate_bias_init=-1.0", "copy_gate=true"),
    (["model.gate_dropout=0.1"], "gate_dropout=0.1", "copy_gate=true"),
    (["model.update_norm=tanh"], "update_norm=tanh", "copy_gate=true"),
    (["model.shared_layers=true", "model.act_threshold=0.9"], "act_threshold=0.9",
     "act=graves or act=ut"),
    (["model.act_loss_weight=0.1"], "act_loss_weight=0.1", "act=graves or act=ut"),
    (["model.act_bias_init=2"], "act_bias_init=2.0", "act=graves or act=ut"),
    (["model.name=seq2seq", "model.n_layers=1", "model.universal=true"], "universal=true",
     "n_layers > 1"),
    (["train.lr_schedule=constant", "train.min_lr=0.001"], "min_lr=0.001", "lr_schedule=cosine"),
    (["train.optimizer=sgd", "train.betas=[0.9, 0.95]"], "betas=[0.9, 0.95]", "optimizer=adamw"),
    (["train.early_stop_threshold=0.9"], "early_stop_threshold=0.9", "early_stop_metric"),
    (["train.early_stop_metric=iid_test/exact_match"], "early_stop_metric=iid_test/exact_match",
     "early_stop_threshold"),
    (["train.device=cpu", "train.precision=bf16"], "precision=bf16", "device=cuda or device=auto"),
    (["train.device=cuda", "train.threads=2"], "threads=2", "device=cpu or device=auto"),
    (["task.block_size=64"], "block_size=64", "loss_on=stream or loss_on=packed"),
    (["task.name=topics", "task.mixture=dirichlet", "task.topics_per_document=3"],
     "topics_per_document=3", "mixture=uniform_subset"),
    (["task.name=topics", "task.dirichlet_alpha=0.5"], "dirichlet_alpha=0.5", "mixture=dirichlet"),
]

# the same fields, with the switch they need
WITH_SWITCH = [
    ["task.loss_on=packed", "task.block_size=64"],
    ["task.name=topics", "task.mixture=dirichlet", "task.dirichlet_alpha=0.5"],
    ["model.init=gamma", "model.init_gamma=0.3"],
    ["model.pos_encoding=rotary", "model.max_len=64"],
    [*GEOMETRIC, "model.attention_dropout=0.1", "model.geometric_normalize=true"],
    [*ABS_REL, "model.attention_dropout=0.1"],
    [*COPY_GATE, "model.copy_gate_bias_init=-1", "model.gate_dropout=0.1", "model.update_norm=tanh"],
    [*ACT, "model.act_threshold=0.9", "model.act_loss_weight=0.1", "model.act_bias_init=2"],
    ["model.name=seq2seq", "model.n_layers=2", "model.universal=true"],
    ["train.lr_schedule=cosine", "train.min_lr=0.001"],
    ["train.optimizer=adamw", "train.betas=[0.9, 0.95]"],
    ["train.early_stop_metric=iid_test/exact_match", "train.early_stop_threshold=0.9"],
    ["train.device=auto", "train.precision=bf16", "train.threads=2"],
]


def _error(overrides: list[str], base: dict | None = None) -> str:
    with pytest.raises(SglabError) as err:
        build_run_config(base or {}, overrides)
    return str(err.value)


@pytest.mark.parametrize("overrides, field, switch", NO_EFFECT)
def test_a_field_without_effect_is_one_error_naming_the_switch_it_needs(overrides, field, switch):
    message = _error(overrides)
    assert message.count("\n") == 1  # "invalid config:" and one line
    assert f"{field} has no effect without {switch}: set {switch}, or leave" in message


# the same settings written in the families: a field its kind does not have is an unknown
# key, named with the keys that kind has (overrides, the key, a valid key listed)
UNKNOWN_IN_FAMILY = [
    (["model.init.gamma=0.3"], "model.init.gamma", "kind"),
    (["model.positions.kind=none", "model.positions.max_len=64"], "model.positions.max_len",
     "kind"),
    (["model.ffn.kind=none", "model.ffn.activation=relu"], "model.ffn.activation", "kind"),
    ([*GEOMETRIC, "model.attention.out_projection=false"], "model.attention.out_projection",
     "normalize"),
    (["model.attention.dropout=0.1"], "model.attention.dropout", "out_projection"),
    ([*ABS_REL, "model.attention.normalize=true"], "model.attention.normalize", "dropout"),
    (["model.block.bias_init=-1"], "model.block.bias_init", "residual_ablation"),
    (["model.block.gate_dropout=0.1"], "model.block.gate_dropout", "residual_ablation"),
    (["model.block.kind=copy_gate", "model.block.residual_ablation=[0]"],
     "model.block.residual_ablation", "gate_dropout"),
    (["model.block.shared=true", "model.halting.threshold=0.9"], "model.halting.threshold",
     "kind"),
    (["model.ffn.kind=sigma_moe", "model.ffn.experts=4", "model.ffn.expert_size=8",
      "model.ffn.top_k=2", "model.ffn.loss_scale=code"], "model.ffn.loss_scale", "selection"),
]


@pytest.mark.parametrize("overrides, key, listed", UNKNOWN_IN_FAMILY)
def test_a_family_field_its_kind_does_not_use_is_an_unknown_key(overrides, key, listed):
    message = _error(overrides)
    assert message.count("\n") == 1
    assert f"unknown key {key!r}." in message and listed in message.split("Valid keys here:")[1]


def test_an_unknown_family_key_names_the_nearest_one():
    message = _error(["model.ffn.d_fff=64"])
    assert "unknown key 'model.ffn.d_fff'. Did you mean 'model.ffn.d_ff'?" in message
    assert "Valid keys here: kind, d_ff, activation" in message
    assert "unknown ffn kind 'topkk'. Did you mean 'topk'?" in _error(["model.ffn.kind=topkk"])


@pytest.mark.parametrize("overrides", WITH_SWITCH)
def test_the_same_fields_are_accepted_with_their_switch(overrides):
    config = build_run_config({}, overrides)
    for text in overrides:  # every value set is kept as given, none dropped or reset
        path, value = parse_override(text)
        assert config.value_at(".".join(path)) == value, text
    # the field that needs the switch is set to something other than its default
    *sections, field = parse_override(overrides[-1])[0]
    node = config
    for part in sections:
        node = getattr(node, part)
    default = (type(node)().legacy_fields()[field] if field not in type(node).model_fields
               else type(node).model_fields[field].default)  # an old flat name: its old default
    assert config.value_at(".".join([*sections, field])) != default, overrides[-1]


# WITH_SWITCH's transformer settings in the families
BIDIRECTIONAL = ["model.attention_mask=bidirectional", "model.positions.kind=none"]
NEW_FORM_WITH_SWITCH = [
    ["model.init.kind=gamma", "model.init.gamma=0.3"],
    ["model.positions.kind=rotary", "model.positions.max_len=64"],
    [*BIDIRECTIONAL, "model.attention.kind=geometric", "model.attention.dropout=0.1",
     "model.attention.normalize=true"],
    [*BIDIRECTIONAL, "model.attention.kind=abs_rel_gated", "model.attention.dropout=0.1"],
    ["model.block.kind=copy_gate", "model.block.bias_init=-1", "model.block.gate_dropout=0.1",
     "model.block.update_norm=tanh"],
    ["model.block.shared=true", "model.halting.kind=graves", "model.halting.threshold=0.9",
     "model.halting.loss_weight=0.1", "model.halting.bias_init=2"],
]


@pytest.mark.parametrize("new, old", list(zip(NEW_FORM_WITH_SWITCH, WITH_SWITCH[2:8])))
def test_the_families_hold_the_same_settings_with_the_same_run_id(new, old):
    config = build_run_config({}, new)
    data = config.to_dict()
    for text in new:
        path, value = parse_override(text)
        section = data
        for part in path:
            section = section[part]
        assert section == value, text
    assert config.run_id() == build_run_config({}, old).run_id()
    assert config == build_run_config({}, old)


def test_several_fields_without_effect_are_named_in_one_message():
    message = _error(["model.gate_dropout=0.2", "model.update_norm=tanh"])
    assert message.count("\n") == 1
    assert "gate_dropout=0.2 has no effect" in message and "update_norm=tanh has no effect" in message


def test_fields_spelled_out_at_their_default_are_accepted_and_keep_the_run_id():
    plain = build_run_config({}, ["train.lr_schedule=constant"])
    explicit = build_run_config({}, [
        "train.lr_schedule=constant", "train.min_lr=1e-4", "model.attention_dropout=0.0",
        "model.copy_gate_bias_init=-3", "model.gate_dropout=0", "model.update_norm=layernorm",
        "model.act_threshold=0.99", "model.init_gamma=0.5", "model.geometric_normalize=false",
        "train.early_stop_threshold=null", "train.target_metric=iid_test/exact_match"])
    assert explicit.run_id() == plain.run_id()


@pytest.mark.parametrize("overrides", [
    ["model.uniform_attention=true", "model.shared_layers=true"],
    ["model.pos_encoding=relative", "model.uniform_attention=true"],
    ["model.attention.identity_value=true", "model.block.shared=true"],
])
def test_frozen_attention_weights_need_softmax_attention_in_separate_layers(overrides):
    assert ("attention.uniform / attention.identity_value fix the weights of softmax attention "
            "in separate layers") in _error(overrides)
    # other attention kinds have no such field
    assert "identity_value=true has no effect without attention=softmax" in _error(
        [*GEOMETRIC, "model.identity_value=true"])
    assert "unknown key 'model.attention.identity_value'" in _error(
        [*GEOMETRIC, "model.attention.identity_value=true"])


@pytest.mark.parametrize("overrides, message", [
    (["model.attention=geometric"], "attention.kind=geometric is bidirectional only; set "
                                    "attention_mask=bidirectional"),
    (["model.attention.kind=abs_rel_gated", "model.attention_mask=bidirectional",
      "model.positions.kind=relative"], "positions.kind=relative cannot be combined with it"),
    (["model.block.kind=copy_gate", "model.ffn.kind=topk", "model.ffn.top_k=4"],
     "set ffn.kind=dense (got ffn.kind=topk)"),
    (["model.block.kind=copy_gate", "model.block.norm=pre"], "set norm=post (got norm=pre)"),
    (["model.copy_gate=true"], "set norm=post (got norm=pre)"),  # the flat default was pre
    (["model.halting.kind=ut"], "set block.shared=true"),
    (["model.block.eval_steps=4"], "eval_steps needs shared=true"),
    (["model.block.kind=copy_gate", "model.block.data_gain=1.0"], "set init.kind=torch"),
    (["model.positions.kind=rotary", "model.d_model=12", "model.n_heads=4"],
     "rotary positions need an even head dimension"),
    (["model.n_layers=2", "model.block.residual_ablation=[2]"], "outside 0..1"),
])
def test_settings_that_cannot_go_together_are_one_clear_error(overrides, message):
    text = _error(overrides)
    assert message in text and text.count("\n") == 1


def test_a_bidirectional_lstm_needs_an_even_width():
    message = _error(["model.name=lstm", "model.bidirectional=true", "model.d_model=201"])
    assert "set an even d_model (got 201)" in message
    build_run_config({}, ["model.name=lstm", "model.bidirectional=true", "model.d_model=200"])


# ----------------------------------------------------------------------------- metric names


def test_a_mistyped_metric_is_an_error_with_the_nearest_name_and_the_list():
    message = _error(["train.target_metric=iid_tset/exact_match"])
    assert message.count("\n") == 1
    assert "train.target_metric=iid_tset/exact_match is not a metric that task addition logs" in message
    assert "Did you mean 'iid_test/exact_match'?" in message
    assert ("Metrics: iid_valid/exact_match, iid_valid/loss, iid_test/exact_match, iid_test/loss"
            in message)
    message = _error(["task.name=ctl", "train.early_stop_metric=ood_valid/exact_mach",
                      "train.early_stop_threshold=0.9"])
    assert "Did you mean 'ood_valid/exact_match'?" in message
    assert "iid_valid/exact_match" in message and "ood_test/loss" in message


@pytest.mark.parametrize("base, overrides, metric, logged", [
    ({}, [], "iid_test/exact_match/carries=2", True),
    ({}, [], "ood_valid/exact_match", False),
    ({}, [], "iid_test/act_steps", False),
    ({}, ACT, "iid_test/act_steps", True),
    ({}, ["train.weight_norms=[tok_emb.weight]"], "weight_norm/tok_emb.weight", True),
    ({}, [], "weight_norm/tok_emb.weight", False),
    ({}, ["task.name=anchors"], "unseen/inferential/train_keys", True),
    ({}, ["task.name=anchors"], "iid_test/inferential", False),
    ({}, ["task.name=ctl"], "ood_valid/exact_match", True),
    ({}, ["task.name=topics"], "iid_test/accuracy", True),
    ({}, ["task.name=topics"], "iid_test/exact_match", False),
    ({}, ["task.name=scan", "task.split=cutoff_26"], "iid_valid/exact_match", True),
    ({}, ["task.name=scan", "task.split=length"], "iid_valid/exact_match", False),
    ({}, ["task.name=scan"], "ood_test/oracle_exact_match", False),
    ({}, ["task.name=scan", "task.eval_oracle_length=true"], "ood_test/oracle_exact_match", True),
    ({}, ["task.name=scan", "task.split=simple"], "iid_test/exact_match", True),
    ({"task": {"name": "cogs", "data_dir": "cogs"}}, [], "iid_test/exact_match", True),
    ({"task": {"name": "cfq", "data_dir": "cfq"}}, [], "ood_valid/exact_match", True),
    ({"task": {"name": "pcfg", "data_dir": "pcfg"}}, [], "iid_valid/exact_match", False),
])
def test_metric_names_follow_the_task_splits_and_the_model(base, overrides, metric, logged):
    assert build_run_config(base, overrides).logs_metric(metric) is logged
    settings = [f"train.early_stop_metric={metric}", "train.early_stop_threshold=0.5"]
    if logged:
        build_run_config(base, [*overrides, *settings])
    else:
        assert "is not a metric that task" in _error([*overrides, *settings], base)


def test_the_default_target_metric_is_the_test_split_score_of_the_task():
    expected = {"addition": "iid_test/exact_match", "topics": "iid_test/accuracy",
                "ctl": "ood_test/exact_match", "anchors": "iid_test/exact_match"}
    for task, metric in expected.items():
        config = build_run_config({}, [f"task.name={task}"])
        assert config.train.target_metric is None and config.target_metric() == metric


@pytest.mark.parametrize("task, field, old, new", [
    ("addition", "target_metric", "test/exact_match", "iid_test/exact_match"),
    ("ctl", "select_on", "test", "ood_test"),
    ("scan", "early_stop_metric", "test/exact_match", "ood_test/exact_match"),
])
def test_the_old_test_split_name_is_an_alias_with_a_warning(task, field, old, new):
    extra = ["train.early_stop_threshold=0.5"] if field == "early_stop_metric" else []
    with pytest.warns(FutureWarning, match=f"is now called '{new.split('/')[0]}'"):
        config = build_run_config({}, [f"task.name={task}", f"train.{field}={old}", *extra])
    renamed = build_run_config({}, [f"task.name={task}", f"train.{field}={new}", *extra])
    assert config.run_id() == renamed.run_id()
    # the task's default target metric is stored as null: the same run as not setting it
    stored = None if field == "target_metric" else new
    assert getattr(config.train, field) == getattr(renamed.train, field) == stored


SMALL_TASKS = {
    "addition": {"train_size": 200, "test_size": 50},
    "anchors": {"train_size": 200, "test_size": 50, "unseen_size": 50},
    "arithmetic": {"train_size": 200, "iid_valid_size": 20, "ood_valid_size": 20, "test_size": 20},
    "ctl": {"train_size": 200, "iid_valid_size": 20, "ood_valid_size": 20, "test_size": 20},
    "ctlpp": {"train_size": 300, "iid_test_size": 20, "ood_test_size": 20},
    "listops": {"train_size": 100, "iid_valid_size": 20, "ood_valid_size": 20, "test_size": 20},
    "mathematics": {"train_size": 50, "eval_size": 10},
    "scan": {"split": "simple"},
    "topics": {"eval_documents": 8},
    "cogs": {"data_dir": "cogs", "verify_published": False},
    "pcfg": {"data_dir": "pcfgset", "verify_published": False},
    "cfq": {"data_dir": "cfq"},
    "babi": {"data_dir": "babi", "tasks": [1, 8]},
    "dnc_repeat_copy": {"valid_batches": 1},
    "dnc_associative_recall": {"valid_batches": 1},
    "dnc_key_value": {"valid_batches": 1},
    "text": {"corpus": "file", "path": str(TEXT_FIXTURE), "context": 16,
             "sha256": "68d0b59171cfca17a6a36577de2a781a019c12c5462dfbd14d4edcec33e92d16"},
    "add_mul": {"valid_size": 20},
    "double_add": {"train_size": 100, "valid_size": 20},
    "digits": {},
}
BIT_TASKS = {"dnc_repeat_copy", "dnc_associative_recall", "dnc_key_value"}  # need train.loss=bits


def test_every_task_declares_a_small_config_here():
    assert set(SMALL_TASKS) == set(registry.entries("task"))


@pytest.mark.parametrize("name", sorted(SMALL_TASKS))
def test_declared_evaluation_splits_are_the_splits_the_task_evaluates(name, tmp_path):
    fields = dict(SMALL_TASKS[name])
    if "data_dir" in fields:  # loading writes SHA256SUMS beside the files: use a copy
        shutil.copytree(FIXTURES, tmp_path / "data")
        fields["data_dir"] = str(tmp_path / "data" / fields["data_dir"])
    train = {"train": {"loss": "bits"}} if name in BIT_TASKS else {}
    config = build_run_config({"task": {"name": name, **fields}, **train}).task
    assert config.evaluation_splits() == list(build_task(config).eval_splits)


@pytest.mark.parametrize("task, model", [
    ({"name": "addition", "train_size": 200, "test_size": 50}, {}),
    ({"name": "anchors", "train_size": 200, "test_size": 50, "unseen_size": 50}, {}),
    ({"name": "ctl", "train_size": 200, "iid_valid_size": 20, "ood_valid_size": 20,
      "test_size": 20}, {"attention_mask": "bidirectional", "readout": "first"}),
    ({"name": "scan", "split": "cutoff_26", "eval_oracle_length": True},
     {"name": "seq2seq", "d_model": 16, "n_heads": 2, "d_ff": 16, "n_layers": 1}),
    ({"name": "topics", "eval_documents": 8}, {"attention_mask": "bidirectional"}),
    ({"name": "text", "corpus": "file", "path": str(TEXT_FIXTURE), "context": 16,
      "sha256": "68d0b59171cfca17a6a36577de2a781a019c12c5462dfbd14d4edcec33e92d16"}, {}),
])
def test_every_metric_an_evaluation_logs_is_a_declared_metric(task, model):
    model = {"n_layers": 1, "n_heads": 2, "d_model": 16, **model}
    config = build_run_config({"task": task, "model": model})
    built = build_task(config.task)
    network = build_model(config.model, len(built.vocab), built.max_length).eval()
    logged = {}
    for split in built.eval_splits:
        logged.update(evaluate(network, built, split, 64, 64))
    assert logged and all(config.logs_metric(name) for name in logged)
    for name in config.metric_names():
        assert name in logged


def test_act_models_report_the_statistics_they_declare():
    config = build_run_config({}, [*ACT, "model.n_layers=2", "model.n_heads=2", "model.d_model=16"])
    network = build_model(config.model, 20, 16).eval()
    network(torch.randint(1, 20, (2, 5)))
    assert sorted(network.statistics) == config.model.evaluation_statistics() == ["act_steps"]


# ----------------------------------------------------------------------------- presets, stored runs


def _preset_configs(experiment_name: str, preset: str) -> list[RunConfig]:
    experiment = registry.experiment(experiment_name)
    return experiment.configs(experiment.preset(preset), [])


def test_every_config_of_every_experiment_preset_validates():
    count = 0
    for name, experiment in registry.experiments().items():
        for preset in experiment.presets:
            if not experiment.arms(experiment.preset(preset)):
                continue  # analysis only (its settings are checked by its own tests)
            for config in _preset_configs(name, preset):
                again = build_run_config(config.to_dict())
                assert again.run_id() == config.run_id()
                count += 1
    assert count > 100


def test_settings_without_effect_kept_for_run_ids_are_the_ones_named():
    """Settings without effect live only under a family's ``no_effect`` (the old flat field
    and value), written out where a preset's run ids hash one: ndr-ctl's quick + rel + gate
    arm sets the thesis's attention dropout on relative softmax attention, whose weights
    drop out with ``dropout`` (the paper arm drops the keys, attention.key_dropout). Drop
    such an entry with the runs that need it."""
    carried = set()
    for name, experiment in registry.experiments().items():
        for preset in experiment.presets:
            if not experiment.arms(experiment.preset(preset)):
                continue
            for config in _preset_configs(name, preset):
                for family in ("embedding", "positions", "attention", "ffn", "block", "halting",
                               "init"):
                    section = getattr(config.model, family, None)
                    for old, value in getattr(section, "no_effect", {}).items():
                        carried.add((f"{name}:{preset}", family, old, value))
                        # it is in the run id: without it the run would be another one
                        data = config.to_dict()
                        del data["model"][family]["no_effect"]
                        assert validate(RunConfig, data).run_id() != config.run_id()
    assert carried == {("ndr-ctl:quick", "attention", "attention_dropout", 0.1)}


def test_a_no_effect_entry_must_be_a_flat_field_its_kind_does_not_use():
    def model(attention):
        return {"model": {"attention": attention}}

    config = build_run_config(model({"kind": "softmax", "no_effect": {"attention_dropout": 0.1}}))
    flat = build_run_config({}, ["model.attention_dropout=0.0"])
    assert config.run_id() != flat.run_id()
    assert config.model.hash_fields() == {"attention_dropout": 0.1}
    for no_effect, message in [
            ({"geometric_normalize": True}, None),
            ({"attention_out_projection": False}, "has an effect with kind softmax"),
            ({"attention_dropout": 0.0}, "at the old default changes nothing"),
            ({"d_ff": 64}, "'d_ff' is not a flat field of the attention family"),
            ({"attention_dropout": 2.0}, "less than 1")]:
        data = model({"kind": "softmax", "no_effect": no_effect})
        if message is None:
            build_run_config(data)
        else:
            with pytest.raises(SglabError, match=message):
                build_run_config(data)


def test_the_config_of_an_existing_run_still_loads(tmp_path):
    data = build_run_config({}).to_dict()
    data["model"]["attention_dropout"] = 0.1  # a flat setting without effect, as old runs had
    data["train"]["target_metric"] = "valid/exact_match"
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text(yaml.safe_dump(data))
    loaded = load_run_config(run_dir)
    assert loaded.model.attention.no_effect == {"attention_dropout": 0.1}
    assert loaded.train.target_metric == "valid/exact_match"
    assert loaded.model.hash_fields() == {"attention_dropout": 0.1}  # in the run id, as before
    again = validate(RunConfig, loaded.to_dict())  # written in the families, read back
    assert again == loaded and again.run_id() == loaded.run_id()
    with pytest.raises(SglabError, match="attention_dropout=0.1 has no effect"):
        validate(RunConfig, data, check_effects=True)


# ----------------------------------------------------------------------------- command line


@pytest.mark.parametrize("settings, expected", [
    (["model.attention_dropout=0.1"], "model: attention_dropout=0.1 has no effect without "
                                      "attention=geometric or attention=abs_rel_gated"),
    (["model.gate_dropout=0.1"], "model: gate_dropout=0.1 has no effect without copy_gate=true"),
    (["train.lr_schedule=constant", "train.min_lr=0.01"],
     "train: min_lr=0.01 has no effect without lr_schedule=cosine"),
    (["train.target_metric=iid_test/exact"], "Did you mean 'iid_test/exact_match'?"),
])
def test_cli_train_exits_2_with_one_message_and_writes_nothing(settings, expected, tmp_path, capsys):
    runs = tmp_path / "runs"
    args = [part for setting in settings for part in ("--set", setting)]
    assert main(["train", "--runs-dir", str(runs), *args]) == 2
    err = capsys.readouterr().err
    assert expected in err and err.count("error:") == 1
    assert not runs.exists()
