"""Bit tasks of the DNC chapter and the bit protocol: packed rows, the ``bits`` loss, RMSProp
(alone and in ensembles), model kwargs from the task."""

import pytest
import torch
import torch.nn.functional as F

from sglab.config import build_run_config
from sglab.errors import SglabError
from sglab.tasks import build_task
from sglab.tasks.base import IGNORE, target_loss
from sglab.tasks.dnc_bits import associative_recall, key_value, pack, repeat_copy, unpack
from sglab.train.loop import load_model, load_trained
from tests.test_ensemble import assert_same_as_alone, member_configs


def g(seed=0):
    return torch.Generator().manual_seed(seed)


def test_repeat_copy_blocks_repeat_their_data_after_the_flag():
    data = repeat_copy(g(), 3, [2, 4, 1], bits=8)
    inputs, targets = unpack(data.inputs, 9), unpack(data.targets, 9)
    assert inputs.shape == (3, (2 * 2 + 2) + (2 * 4 + 2) + (2 * 1 + 2), 9)
    start = 0
    for length in (2, 4, 1):
        stop = start + 2 * length + 2
        block_in, block_target = inputs[:, start:stop], targets[:, start:stop]
        assert block_in[:, length].tolist() == [[0] * 8 + [1]] * 3  # the flag row
        assert not block_in[:, length + 1:].any() and not block_target[:, : length + 1].any()
        assert torch.equal(block_target[:, length + 1:], block_in[:, : length + 1])
        start += 2 * length + 2
    assert int(data.scored.sum(1)[0]) == (2 + 1) + (4 + 1) + (1 + 1)


def test_repeat_copy_default_draws_the_authors_ranges_with_a_length_per_block():
    """The `default` preset trains at the authors' ranges (L in [2, 14] rows, N in [1, 8]
    blocks): blocks longer than App. A.2's L <= 8 (Fig. 2.4's read phases of 10-13 steps),
    a length drawn per block, one layout per batch, sequences that overflow the memory."""
    from sglab import registry

    experiment = registry.experiment("dnc-repeat-copy")
    config = experiment.configs(experiment.preset("default"), [])[0]
    task = build_task(config.task)
    sequences, generator = [], g(3)
    for _ in range(300):
        data = task.sample(generator, 2)
        flag = unpack(data.inputs, 9)[..., 8]  # [2, T]
        assert torch.equal(flag[0], flag[1])  # every row of a batch has the same blocks
        blocks, position = [], 0
        while position < flag.shape[1]:  # a block: L data rows, the flag, L + 1 blank rows
            length = int(flag[0, position:].nonzero()[0])
            blocks.append(length)
            position += 2 * length + 2
        assert position == flag.shape[1]
        sequences.append(blocks)
    lengths = [length for blocks in sequences for length in blocks]
    assert (min(lengths), max(lengths)) == (2, 14)
    assert (min(map(len, sequences)), max(map(len, sequences))) == (1, 8)
    assert sum(length > 8 for length in lengths) > len(lengths) / 3
    assert sum(len(set(blocks)) > 1 for blocks in sequences) > len(sequences) / 2
    written = [sum(length + 1 for length in blocks) for blocks in sequences]
    assert sum(rows > config.model.memory_cells for rows in written) > len(sequences) / 2


def test_associative_recall_target_is_the_block_after_the_query():
    data, query = associative_recall(g(1), 64, blocks=5, words=3, bits=8)
    inputs, targets = unpack(data.inputs, 10), unpack(data.targets, 8)
    assert inputs.shape[1] == 5 * 4 + 7
    assert (query <= 3).all() and len(set(query.tolist())) > 1
    for row in range(64):
        t = int(query[row])
        blocks = inputs[row, :20].reshape(5, 4, 10)[:, :3, :8]
        assert torch.equal(inputs[row, 20:23, :8], blocks[t])  # the query is block t
        assert torch.equal(targets[row, -3:], blocks[t + 1])  # the answer is block t+1
        assert not targets[row, :-3].any()
    assert inputs[:, 19, 9].all() and inputs[:, 23, 9].all() and inputs[:, 3, 8].all()


def test_key_value_keys_unique_and_answers_match():
    data = key_value(g(2), 32, words=12, half_bits=4)
    assert data.inputs.shape[1] == 3 * (12 + 1)
    words = data.inputs[:, :12]
    keys, values = words & 15, (words >> 4) & 15
    for row in range(32):
        assert len(set(keys[row].tolist())) == 12 and len(set(values[row].tolist())) == 12
        lookup = dict(zip(keys[row].tolist(), values[row].tolist()))
        queries, answers = data.inputs[row, 13:25], data.targets[row, 13:25]
        assert sorted(queries.tolist()) == sorted(keys[row].tolist())
        assert all(lookup[int(q)] == int(a) for q, a in zip(queries, answers))
        inverse = {v: k for k, v in lookup.items()}
        asked, told = data.inputs[row, 26:38] >> 4, data.targets[row, 26:38]
        assert all(inverse[int(q)] == int(a) for q, a in zip(asked, told))
    assert data.scored[:, 13:25].all() and not data.scored[:, :13].any()


@pytest.mark.parametrize("name", ["dnc_repeat_copy", "dnc_associative_recall", "dnc_key_value"])
def test_same_seed_same_data(name):
    config = build_run_config({"task": {"name": name}, "model": {"name": "dnc"},
                               "train": {"loss": "bits", "target_metric": "iid_valid/exact_match"}})
    a, b = build_task(config.task), build_task(config.task)
    assert all(torch.equal(x.inputs, y.inputs) and torch.equal(x.targets, y.targets)
               for x, y in zip(a.valid, b.valid))
    batch_a = a.train_batch(4, g(5))
    batch_b = b.train_batch(4, g(5))
    assert torch.equal(batch_a.input_ids, batch_b.input_ids)
    assert max(len(x.inputs[0]) for x in a.valid) <= a.max_length


def test_bit_packing_round_trips():
    bits = torch.randint(0, 2, (4, 9, 18))
    assert torch.equal(unpack(pack(bits), 18), bits)


def test_bits_loss_by_hand():
    logits = torch.randn(2, 3, 4)
    targets = torch.tensor([[5, 0, 15], [IGNORE, 8, 1]])
    total = 0.0
    for b in range(2):
        for t in range(3):
            if targets[b, t] == IGNORE:
                continue
            for i in range(4):
                y = (int(targets[b, t]) >> i) & 1
                total += float(F.binary_cross_entropy_with_logits(logits[b, t, i], torch.tensor(float(y))))
    assert float(target_loss(logits, targets, "bits")) == pytest.approx(total / 2, rel=1e-5)
    assert float(target_loss(logits, targets, "bits", reduction="sum")) == pytest.approx(total, rel=1e-5)


def dnc_configs(*extra):
    return [build_run_config({"task": {"name": "dnc_key_value"}, "model": {"name": "dnc"}}, [
        f"seed={seed}", f"train.lr={lr}", "task.words=[2,3]", "task.half_bits=3",
        "task.valid_batches=2", "task.valid_batch_size=8", "model.memory_cells=6",
        "model.cell_width=6", "model.controller_size=8", "model.variant=DNC-MDS",
        "model.mask_min=0.1", "train.loss=bits", "train.optimizer=rmsprop",
        "train.momentum=0.9", "train.weight_decay=1e-5", "train.grad_clip=10",
        "train.lr_schedule=constant", "train.warmup_steps=0", "train.steps=8",
        "train.batch_size=4", "train.eval_interval=4", "train.checkpoint_interval=4",
        "train.target_metric=iid_valid/bit_accuracy", "train.threads=1", *extra])
        for seed, lr in [(0, 1e-3), (1, 3e-3)]]


def test_rmsprop_ensemble_members_equal_members_alone(tmp_path):
    # RMSProp with eps 1e-10 divides a gradient by the root of its own running square, so
    # the batched kernels' rounding in tiny gradients is not damped as in Adam: 1e-4 bounds
    assert_same_as_alone(member_configs("train.optimizer=rmsprop"), tmp_path / "plain")
    assert_same_as_alone(member_configs("train.optimizer=rmsprop", "train.momentum=0.9"),
                         tmp_path / "transformer", atol=1e-4)
    assert_same_as_alone(dnc_configs(), tmp_path / "dnc", atol=1e-4)


def test_trained_dnc_reloads_with_its_bit_widths(tmp_path):
    from sglab.train.loop import Trainer

    config = dnc_configs()[0]
    summary = Trainer(config, tmp_path, printer=None).run()
    assert summary["model_kwargs"] == {"input_bits": 8, "output_bits": 3}
    final = summary["final"]  # the evaluation at the last step, with every metric
    assert final["step"] == config.train.steps == summary["step"]
    assert {"iid_valid/bit_accuracy", "iid_valid/exact_match", "iid_valid/wrong_bits"} <= set(final)
    assert final["iid_valid/wrong_bits"] > 0 and 0 < final["iid_valid/bit_accuracy"] < 1
    _, model = load_model(tmp_path / config.run_id())
    _, task, trained = load_trained(tmp_path / config.run_id())
    ids = task.valid[0].inputs
    torch.testing.assert_close(model(ids), trained(ids))


@pytest.mark.parametrize("change, needle", [
    ({"task.words": [5, 4]}, "empty"),
    ({"task.words": [0, 4]}, "empty"),
    ({"train.loss": "cross_entropy"}, "train.loss=bits"),
    ({"train.optimizer": "adamw", "train.momentum": 0.9}, "momentum"),
])
def test_bad_task_config_is_a_clear_error(change, needle):
    base = {"task": {"name": "dnc_key_value"}, "model": {"name": "dnc"},
            "train": {"loss": "bits", "optimizer": "rmsprop"}}
    with pytest.raises(SglabError, match=needle):
        build_run_config(base, change)


def test_bit_task_rejects_a_token_model():
    config = build_run_config({"task": {"name": "dnc_repeat_copy"}, "model": {"name": "dnc"},
                               "train": {"loss": "bits"}}, {"model.io": "tokens"})
    with pytest.raises(SglabError, match="io=bits"):
        build_task(config.task).check_model(config.model)


@pytest.mark.parametrize("setting, needle", [
    ("model.variant=DNC-X", "variant"), ("model.memory_cells=0", "memory_cells"),
    ("model.cell_width=0", "cell_width"), ("model.read_heads=0", "read_heads"),
    ("model.mask_min=1.0", "mask_min"), ("task.words=[4,2]", "empty"),
])
def test_cli_bad_input_exits_2_and_writes_nothing(tmp_path, capsys, setting, needle):
    from sglab.cli import main

    argv = ["train", "--preset", "dnc-key-value:quick", "--set", "model.variant=DNC-M",
            "--set", setting, "--runs-dir", str(tmp_path / "runs")]
    assert main(argv) == 2
    assert needle in capsys.readouterr().err
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
