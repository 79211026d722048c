"""SCAN generator: interpretation function, command count, split rules, export format."""

import pytest

from sglab.cli import main
from sglab.config import build_run_config
from sglab.errors import SglabError
from sglab.tasks import build_task
from sglab.tasks.scan import all_commands, all_examples, build_split, interpret


@pytest.mark.parametrize("command, actions", [
    # examples from Lake & Baroni (2018), Fig. 1 and Sec. 2
    ("jump", "JUMP"),
    ("jump left", "LTURN JUMP"),
    ("jump around right", "RTURN JUMP RTURN JUMP RTURN JUMP RTURN JUMP"),
    ("turn left twice", "LTURN LTURN"),
    ("jump thrice", "JUMP JUMP JUMP"),
    ("jump opposite left and walk thrice", "LTURN LTURN JUMP WALK WALK WALK"),
    ("jump opposite left after walk around left",
     "LTURN WALK LTURN WALK LTURN WALK LTURN WALK LTURN LTURN JUMP"),
    ("turn opposite right", "RTURN RTURN"),
    ("turn around left", "LTURN LTURN LTURN LTURN"),
    ("look right after run twice", "RUN RUN RTURN LOOK"),
])
def test_interpretation_matches_the_paper(command, actions):
    short = {"LTURN": "I_TURN_LEFT", "RTURN": "I_TURN_RIGHT"}
    expected = [short.get(a, f"I_{a}") for a in actions.split()]
    assert interpret(command) == expected


def test_grammar_generates_20910_distinct_commands():
    commands = all_commands()
    assert len(commands) == 20_910 == len(set(commands))
    lengths = [len(a.split()) for _, a in all_examples()]
    assert max(lengths) == 48 and min(lengths) == 1


def test_non_commands_are_rejected():
    for bad in ("turn", "walk up", "fly", "jump left around"):
        with pytest.raises(SglabError):
            interpret(bad)


def _commands(examples):
    return {c for c, _ in examples}


@pytest.mark.parametrize("name, sizes", [
    ("simple", {"train": 16_728, "iid_test": 4_182}),
    ("length", {"train": 16_990, "ood_test": 3_920}),
    ("addprim_jump", {"train": 14_670, "ood_test": 7_706}),
    ("addprim_turn_left", {"train": 21_890, "ood_test": 1_208}),
    ("cutoff_26", {"train": 16_458, "iid_valid": 1_828, "ood_test": 2_624}),  # thesis Table C.7
])
def test_split_sizes_and_no_test_command_in_training(name, sizes):
    split = build_split(name)
    assert {k: len(v) for k, v in split.items()} == sizes
    train = _commands(split["train"])
    assert not train & _commands(split["iid_test" if name == "simple" else "ood_test"])
    if "iid_valid" in split:
        assert not train & _commands(split["iid_valid"])


@pytest.mark.parametrize("cutoff", [22, 26, 30, 40])
def test_cutoff_splits_respect_the_output_length(cutoff):
    split = build_split(f"cutoff_{cutoff}", seed=3)
    assert all(len(a.split()) <= cutoff for _, a in split["train"] + split["iid_valid"])
    assert all(len(a.split()) > cutoff for _, a in split["ood_test"])
    pool = len(split["train"]) + len(split["iid_valid"])
    assert len(split["iid_valid"]) == pool // 10
    assert pool + len(split["ood_test"]) == 20_910


def test_cutoff_22_has_the_length_split_test_set_and_seeds_change_the_iid_holdout():
    assert set(build_split("cutoff_22")["ood_test"]) == set(build_split("length")["ood_test"])
    assert _commands(build_split("cutoff_26", 0)["iid_valid"]) != _commands(
        build_split("cutoff_26", 1)["iid_valid"])


def test_add_primitive_splits_repeat_the_bare_primitive_to_ten_percent():
    for name, primitive in (("addprim_jump", "jump"), ("addprim_turn_left", "turn left")):
        split = build_split(name)
        copies = sum(c == primitive for c, _ in split["train"])
        assert copies / len(split["train"]) == pytest.approx(0.1, abs=1e-3)
        others = _commands(split["train"]) - {primitive}
        assert all(primitive not in c for c in others)
        assert all(primitive in c for c in _commands(split["ood_test"]))


def test_bad_split_name_is_a_clear_config_error():
    with pytest.raises(SglabError, match="cutoff_L"):
        build_run_config({"task": {"name": "scan", "split": "cutoff_99"},
                          "model": {"name": "seq2seq"}})


def test_task_round_trips_text_and_needs_a_seq2seq_model():
    config = build_run_config({"task": {"name": "scan", "split": "length"},
                               "model": {"name": "seq2seq"}})
    task = build_task(config.task)
    assert set(task.pairs_text("ood_test")) == set(build_split("length")["ood_test"])
    with pytest.raises(SglabError, match="model.name=seq2seq"):
        task.check_model(build_run_config({}).model)


def test_export_writes_the_published_line_format(tmp_path):
    assert main(["data", "export", "scan", "--split", "addprim_jump", "--out", str(tmp_path)]) == 0
    train = (tmp_path / "train.txt").read_text().splitlines()
    test = (tmp_path / "test.txt").read_text().splitlines()
    assert len(train) == 14_670 and len(test) == 7_706
    assert "IN: jump OUT: I_JUMP" in train
    line = next(x for x in test if x.startswith("IN: jump twice OUT:"))
    assert line == "IN: jump twice OUT: I_JUMP I_JUMP"
    assert main(["data", "export", "scan", "--split", "cutoff_26", "--out",
                 str(tmp_path / "c")]) == 0
    assert len((tmp_path / "c" / "iid_valid.txt").read_text().splitlines()) == 1_828


def test_export_rejects_unknown_dataset_and_split(tmp_path, capsys):
    assert main(["data", "export", "scan", "--split", "nope", "--out", str(tmp_path)]) == 2
    assert "unknown SCAN split" in capsys.readouterr().err
    assert main(["data", "export", "scam", "--split", "length", "--out", str(tmp_path)]) == 2
    assert "Did you mean 'scan'" in capsys.readouterr().err
