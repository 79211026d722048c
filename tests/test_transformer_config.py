"""The transformer config in families, and the one migration from its old flat layout.

A nested config and its old flat form are one config: they validate to the same object,
hash to the same run id and train to the same losses; stored runs' flat configs load and
are rewritten in the families by ``sglab runs --migrate`` with their ids unchanged.
"""

from __future__ import annotations

import json

import pytest
import torch
import yaml

from sglab import registry
from sglab.cli import main
from sglab.config import (
    FamilyConfig,
    RunConfig,
    build_run_config,
    canonical_setting,
    validate,
)
from sglab.models.transformer_config import FAMILIES, TransformerConfig
from sglab.models.transformer_legacy import (
    COMMON,
    FIELDS,
    KIND_KEYS,
    LEGACY_DEFAULTS,
    legacy_model_config,
    migrate_model_config,
)
from sglab.store import read_metrics
from sglab.train import Trainer
from sglab.train.loop import load_model, load_run_config


def test_a_transformer_config_is_a_few_fields_and_seven_families():
    fields = TransformerConfig.model_fields
    assert len(fields) <= 15
    assert set(fields) == {"name", "n_layers", "n_heads", "d_model", "attention_mask", "dropout",
                           "bias", "readout", *FAMILIES}
    kinds = {name: list(family.kinds) for name, family in FAMILIES.items()}
    assert kinds == {
        "embedding": ["learned", "one_hot"],
        "positions": ["learned", "sinusoidal", "none", "rotary", "relative"],
        "attention": ["softmax", "geometric", "abs_rel_gated"],
        "ffn": ["dense", "none", "topk", "pkm", "sigma_moe", "switch", "s_base"],
        "block": ["plain", "copy_gate"],
        "halting": ["none", "graves", "ut"],
        "init": ["default", "gamma", "torch", "fan_in"]}


def test_the_migration_tables_name_every_field_of_every_kind_once():
    """FIELDS (kind -> its fields -> the flat field each was) is the families' layout: every
    field of every kind maps to a flat field, and every flat field has a place."""
    placed = set(COMMON) | set(KIND_KEYS.values())
    for name, family in FAMILIES.items():
        assert list(FIELDS[name]) == list(family.kinds), name
        for kind, cls in family.kinds.items():
            own = [f for f in cls.model_fields if f not in ("kind", "no_effect")]
            assert sorted(own) == sorted(FIELDS[name][kind]), (name, kind)
            placed |= set(FIELDS[name][kind].values())
            # a kind's defaults are the flat defaults (but where BEFORE_DEFAULTS says not)
            for new, old in FIELDS[name][kind].items():
                field = cls.model_fields[new]
                if not field.is_required() and (name, kind, new) != ("block", "copy_gate", "norm"):
                    assert field.get_default(call_default_factory=True) == LEGACY_DEFAULTS[old]
    assert placed == set(LEGACY_DEFAULTS)


def _preset_transformer_configs() -> list[RunConfig]:
    configs = []
    for experiment in registry.experiments().values():
        for preset in experiment.presets:
            if experiment.arms(experiment.preset(preset)):
                configs += [c for c in experiment.configs(experiment.preset(preset), [])
                            if c.model.name == "transformer"]
    return configs


def test_every_preset_config_is_its_flat_form_and_back():
    configs = _preset_transformer_configs()
    assert len(configs) > 100
    for config in configs:
        flat = legacy_model_config(config.model, non_default=False)
        assert set(flat) == set(LEGACY_DEFAULTS)
        again = validate(TransformerConfig, flat)  # as a stored run's (ndr-ctl's no_effect)
        assert again == config.model
        assert again.hash_fields() == config.model.hash_fields() == legacy_model_config(again)
        data = {**config.to_dict(), "model": {k: v for k, v in flat.items()
                                              if v != LEGACY_DEFAULTS[k] or k == "name"}}
        assert validate(RunConfig, data).run_id() == config.run_id()


def test_migrate_model_config_moves_flat_fields_into_their_families():
    flat = {"name": "transformer", "n_layers": 6, "pos_encoding": "none", "copy_gate": True,
            "norm": "post", "shared_layers": True, "eval_steps": 8, "attention": "geometric",
            "attention_dropout": 0.1, "d_ff": 64, "activation": "relu", "init": "torch",
            "copy_gate_data_gain": 1, "attention_mask": "bidirectional"}
    assert migrate_model_config(flat) == {
        "name": "transformer", "n_layers": 6, "attention_mask": "bidirectional",
        "positions": {"kind": "none"},
        "attention": {"kind": "geometric", "dropout": 0.1},
        "ffn": {"d_ff": 64, "activation": "relu"},
        "block": {"kind": "copy_gate", "norm": "post", "shared": True, "eval_steps": 8,
                  "data_gain": 1.0},
        "init": {"kind": "torch"}}
    config = TransformerConfig.model_validate(flat)
    assert legacy_model_config(config) == {
        key: value for key, value in {**flat, "copy_gate_data_gain": 1.0}.items()
        if key != "name"}
    # a nested section with old-style settings on top: the flat setting wins
    mixed = {"ffn": {"kind": "topk", "top_k": 4, "d_ff": 32}, "ffn_top_k": 8}
    assert migrate_model_config(mixed) == {"ffn": {"kind": "topk", "top_k": 8, "d_ff": 32}}
    # a flat field without effect: dropped at its old default, else an error (new configs)
    # or kept under no_effect (the config of an existing run)
    assert migrate_model_config({"init_gamma": 0.5}) == {"init": {}}
    with pytest.raises(ValueError, match="init_gamma=0.7 has no effect without init=gamma"):
        migrate_model_config({"init_gamma": 0.7})
    assert migrate_model_config({"init_gamma": 0.7}, check_effects=False) == {
        "init": {"no_effect": {"init_gamma": 0.7}}}


@pytest.mark.parametrize("overrides, expected", [
    (["model.pos_encoding=none"], {"positions": {"kind": "none"}}),
    (["model.positions=none"], {"positions": {"kind": "none"}}),
    (["model.positions.kind=rotary", "model.max_len=64"],
     {"positions": {"kind": "rotary", "max_len": 64}}),
    # the later setting wins, whichever way each is written
    (["model.pos_encoding=learned", "model.positions.kind=none"], {"positions": {"kind": "none"}}),
    (["model.positions.kind=none", "model.pos_encoding=learned"],
     {"positions": {"kind": "learned"}}),
    # the old switch over a family keeps its other fields, as it did in the flat layout
    (["model.ffn.d_ff=32", "model.ffn=topk", "model.ffn_top_k=4"],
     {"ffn": {"kind": "topk", "d_ff": 32, "top_k": 4}}),
    (["model.copy_gate=true", "model.norm=post", "model.gate_dropout=0.1"],
     {"block": {"kind": "copy_gate", "norm": "post", "gate_dropout": 0.1}}),
    (["model.block.kind=copy_gate", "model.update_norm=tanh"],
     {"block": {"kind": "copy_gate", "update_norm": "tanh"}}),
    (["model.init=gamma", "model.init.gamma=0.3"], {"init": {"kind": "gamma", "gamma": 0.3}}),
])
def test_dotted_overrides_take_either_layout(overrides, expected):
    model = build_run_config({}, overrides).model
    for family, fields in expected.items():
        section = getattr(model, family)
        for name, value in fields.items():
            assert getattr(section, name) == value, (overrides, family, name)


def test_a_written_out_config_takes_a_kind_change():
    """config.yaml holds every field of a family's kind; an override that changes the kind
    drops the old kind's fields that are at their defaults (they are no setting) and names
    those that are not."""
    base = build_run_config({}, ["model.ffn.d_ff=64"]).to_dict()
    assert base["model"]["positions"] == {"kind": "learned", "max_len": None}
    config = build_run_config(base, ["model.pos_encoding=none", "model.ffn.kind=sigma_moe",
                                     "model.ffn.experts=4", "model.ffn.expert_size=8",
                                     "model.ffn.top_k=2", "model.ffn.d_ff=null"])
    assert config.model.positions.kind == "none" and config.model.ffn.kind == "sigma_moe"
    with pytest.raises(Exception, match="unknown key 'model.ffn.d_ff'"):
        build_run_config(base, ["model.ffn.kind=sigma_moe", "model.ffn.experts=4",
                                "model.ffn.expert_size=8", "model.ffn.top_k=2"])


def test_old_names_read_and_query_where_the_families_hold_them():
    config = build_run_config({}, ["model.copy_gate=true", "model.norm=post", "model.ffn.d_ff=64"])
    assert config.value_at("model.copy_gate") is True
    assert config.value_at("model.norm") == "post" and config.value_at("model.d_ff") == 64
    assert config.value_at("model.ffn") == "dense" and config.value_at("model.ffn.d_ff") == 64
    assert canonical_setting("model.copy_gate", True) == ("model.block.kind", "copy_gate")
    assert canonical_setting("model.pkm_top_k", 8) == ("model.ffn.top_k", 8)
    assert canonical_setting("model.positions.kind", "none") == ("model.positions.kind", "none")
    assert canonical_setting("train.lr", 0.1) == ("train.lr", 0.1)


def test_families_take_a_bare_kind_and_name_unknown_kinds():
    assert isinstance(TransformerConfig(ffn="none").ffn, FamilyConfig)
    assert TransformerConfig(halting="ut", block={"shared": True}).halting.kind == "ut"
    with pytest.raises(ValueError, match="unknown halting kind 'graaves'. Did you mean 'graves'"):
        TransformerConfig(halting="graaves")


TRAIN = ["task.train_size=300", "task.test_size=50", "train.steps=20", "train.batch_size=8",
         "train.eval_interval=20", "train.checkpoint_interval=20", "train.log_interval=1",
         "train.warmup_steps=2", "train.threads=1", "train.device=cpu"]
OLD_STYLE = {"name": "transformer", "n_layers": 2, "n_heads": 2, "d_model": 16,
             "pos_encoding": "rotary", "norm": "post", "bias": True, "dropout": 0.1,
             "ffn": "topk", "d_ff": 32, "ffn_top_k": 8, "activation": "relu",
             "tie_embeddings": False, "output_bias": True, "init": "gamma", "init_gamma": 0.6,
             "residual_ablation": [1]}


def _losses(model_section: dict, runs_dir) -> tuple[str, list[float]]:
    config = build_run_config({"model": model_section}, TRAIN)
    Trainer(config, runs_dir, printer=None).run()
    records = read_metrics(runs_dir / config.run_id(), kind="train")
    return config.run_id(), [record["train/loss"] for record in records]


def test_an_old_style_config_and_its_migrated_form_train_bit_identically(tmp_path):
    migrated = migrate_model_config(OLD_STYLE)
    assert not set(migrated) & set(LEGACY_DEFAULTS) - set(COMMON) - set(FAMILIES)
    old_id, old = _losses(OLD_STYLE, tmp_path / "old")
    new_id, new = _losses(migrated, tmp_path / "new")
    assert old_id == new_id and len(old) == 20
    assert old == new  # bit-identical


def test_runs_migrate_rewrites_stored_flat_configs_keeping_run_ids(tmp_path, capsys):
    runs = tmp_path / "runs"
    config = build_run_config({"model": OLD_STYLE}, [*TRAIN, "train.steps=4"])
    Trainer(config, runs, printer=None).run()
    run_dir = runs / config.run_id()
    stored = config.to_dict()
    stored["model"] = {"name": "transformer", **legacy_model_config(config.model,
                                                                    non_default=False)}
    (run_dir / "config.yaml").write_text(yaml.safe_dump(stored, sort_keys=False))
    assert load_run_config(run_dir).run_id() == config.run_id()  # read as it is
    assert main(["runs", "--migrate", "--runs-dir", str(runs)]) == 0
    assert "migrated the config of 1 run(s)" in capsys.readouterr().out
    data = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert data["model"]["positions"] == {"kind": "rotary", "max_len": None}
    assert "pos_encoding" not in data["model"] and data["train"] == stored["train"]
    assert load_run_config(run_dir) == config
    load_model(run_dir)  # the checkpoint's config hash still matches
    assert main(["runs", "--migrate", "--runs-dir", str(runs)]) == 0  # nothing left to do
    assert "migrated the config of 0 run(s)" in capsys.readouterr().out
    for where in ("model.pos_encoding=rotary", "model.positions.kind=rotary",
                  "model.copy_gate=false"):
        assert main(["runs", "--runs-dir", str(runs), "--json", "--where", where]) == 0
        rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        assert [row["run_id"] for row in rows] == [config.run_id()], where


def test_a_flat_model_needs_no_torch_state_to_validate():
    """The migration is plain data: validating never builds a module (no RNG drawn)."""
    state = torch.random.get_rng_state()
    TransformerConfig.model_validate(OLD_STYLE)
    assert torch.equal(state, torch.random.get_rng_state())


def test_embedding_dropout_overrides_the_models_dropout_on_the_embedded_tokens_only():
    """The thesis code's gated and geometric models drop no embedding units (their
    positional function is the identity) while dropping 0.5 inside the layers."""
    from sglab.models import build_model

    base = ["model.dropout=0.5", "model.d_model=16", "model.n_heads=2", "model.n_layers=2"]
    default = build_run_config({}, base)
    off = build_run_config({}, [*base, "model.embedding.dropout=0"])
    assert off.model.embedding.dropout == 0 and default.model.embedding.dropout is None
    assert off.run_id() != default.run_id()
    assert build_run_config({}, [*base, "model.embedding_dropout=0"]).run_id() == off.run_id()
    model = build_model(off.model, vocab_size=12, max_len=8)
    model.train()
    x = model.drop(torch.ones(4, 8, 16))
    assert torch.equal(x, torch.ones(4, 8, 16))  # kept whole, not rescaled
    layer_drops = [m.p for name, m in model.named_modules()
                   if isinstance(m, torch.nn.Dropout) and name != "drop"]
    assert layer_drops and set(layer_drops) == {0.5}
