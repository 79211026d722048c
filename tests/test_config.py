import pytest

from sglab.cli import main
from sglab.config import build_run_config, parse_override
from sglab.errors import SglabError


def test_unknown_key_names_the_nearest_valid_key():
    with pytest.raises(SglabError, match="Did you mean 'model.pos_encoding'"):
        build_run_config({}, ["model.pos_encodng=none"])
    with pytest.raises(SglabError, match="Did you mean 'train'"):
        build_run_config({}, ["trian.steps=3"])


def test_wrong_type_and_range_name_field_value_and_what_is_allowed():
    with pytest.raises(SglabError) as err:
        build_run_config({}, ["model.pos_encoding=nope"])
    assert "model.pos_encoding = 'nope'" in str(err.value)
    assert "Input should be 'learned', 'sinusoidal', 'none', 'rotary'" in str(err.value)
    with pytest.raises(SglabError, match=r"train.lr = -1: Input should be greater than 0"):
        build_run_config({}, ["train.lr=-1"])
    with pytest.raises(SglabError, match="model.n_layers = 'abc'"):
        build_run_config({}, ["model.n_layers=abc"])


def test_cross_field_checks():
    with pytest.raises(SglabError, match=r"residual_ablation has layer indices \[5\] outside 0..3"):
        build_run_config({}, ["model.n_layers=4", "model.residual_ablation=[5]"])
    with pytest.raises(SglabError, match="divisible by n_heads"):
        build_run_config({}, ["model.d_model=30", "model.n_heads=4"])
    with pytest.raises(SglabError, match="unknown model 'foo'"):
        build_run_config({}, ["model.name=foo"])


def test_overrides_are_read_as_yaml():
    assert parse_override("model.residual_ablation=[0, 1]") == (["model", "residual_ablation"], [0, 1])
    assert parse_override("train.lr=3e-3")[1] == 3e-3
    with pytest.raises(SglabError, match="no '='"):
        parse_override("train.lr")
    config = build_run_config({}, ["model.residual_ablation=[0,1]", "seed=3"])
    assert config.model.block.residual_ablation == [0, 1] and config.seed == 3


def test_run_id_is_deterministic_and_seed_sensitive():
    a = build_run_config({}, ["seed=1"])
    assert a.run_id() == build_run_config({}, ["seed=1"]).run_id()
    assert a.run_id() != build_run_config({}, ["seed=2"]).run_id()


def test_cli_bad_config_exits_2_and_writes_nothing(tmp_path, capsys):
    runs = tmp_path / "runs"
    code = main(["train", "--runs-dir", str(runs), "--set", "model.pos_encodng=none"])
    assert code == 2
    assert "Did you mean 'model.pos_encoding'" in capsys.readouterr().err
    assert not runs.exists()


def test_cli_missing_config_file_exits_2(tmp_path, capsys):
    code = main(["train", "--runs-dir", str(tmp_path), "--config", str(tmp_path / "nope.yaml")])
    assert code == 2
    assert "does not exist" in capsys.readouterr().err


def test_run_id_depends_only_on_non_default_values():
    """Spelling out a default does not change the id, so runs stay valid when the config
    schema grows new options with defaults."""
    plain = build_run_config({}, [])
    explicit = build_run_config({}, ["train.steps=3000", "model.norm=pre", "task.format=reverse"])
    assert plain.run_id() == explicit.run_id()
    assert plain.run_id() != build_run_config({}, ["model.norm=post"]).run_id()
    assert plain.run_id() != build_run_config({}, ["task.name=addition", "task.data_seed=1"]).run_id()
