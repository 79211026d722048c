import collections

import numpy as np
import torch

from sglab.tasks.addition import AdditionConfig, AdditionTask, count_carries
from sglab.tasks.base import IGNORE


def _decode(task, split, i):
    tokens = split.tokens[i, : split.lengths[i]].tolist()
    p = int(split.prompt_lengths[i])
    return "".join(task.vocab.decode(tokens[:p])), "".join(task.vocab.decode(tokens[p:]))


def test_carry_count():
    assert count_carries(np.array([999]), np.array([1])).tolist() == [3]
    assert count_carries(np.array([123]), np.array([456])).tolist() == [0]
    assert count_carries(np.array([15]), np.array([5])).tolist() == [1]


def test_reverse_format_and_correct_sums():
    task = AdditionTask(AdditionConfig(train_size=1000, test_size=300))
    for name in ("train", "iid_test"):
        split = task.split(name)
        for i in range(len(split)):
            prompt, answer = _decode(task, split, i)
            assert prompt.startswith("$") and prompt.endswith("=") and answer.endswith("$")
            a, b = map(int, prompt[1:-1].split("+"))
            assert answer[:-1] == str(a + b)[::-1]  # only the sum is reversed, no padding
    assert _decode(task, task.split("train"), 55)[0] == "$5+5="  # one-digit pairs come first
    assert _decode(task, task.split("train"), 55)[1] == "01$"


def test_plain_format():
    task = AdditionTask(AdditionConfig(format="plain", train_size=200, test_size=10))
    prompt, answer = _decode(task, task.split("iid_test"), 0)
    a, b = map(int, prompt[:-1].split("+"))
    assert answer == f"{a + b}\n"


def test_training_set_is_balanced_like_lee_et_al():
    task = AdditionTask(AdditionConfig())
    pairs = task.pairs["train"]
    assert len(pairs) == 10_000
    carries = collections.Counter(count_carries(pairs[:, 0], pairs[:, 1]).tolist())
    assert carries == {0: 2500, 1: 2500, 2: 2500, 3: 2500}
    longest = np.maximum(pairs[:, 0], pairs[:, 1])
    assert ((longest < 10).sum()) >= 100  # all one-digit pairs are present
    assert {(a, b) for a in range(10) for b in range(10)} <= set(map(tuple, pairs.tolist()))
    assert 0.7 < (longest >= 100).mean() < 0.95
    # carries are recorded per example for breakdowns
    assert torch.equal(task.split("train").groups["carries"],
                       torch.from_numpy(count_carries(pairs[:, 0], pairs[:, 1])))


def test_test_set_is_disjoint_and_distinct():
    task = AdditionTask(AdditionConfig())
    train = set(map(tuple, task.pairs["train"].tolist()))
    test = list(map(tuple, task.pairs["iid_test"].tolist()))
    assert len(test) == len(set(test)) == 10_000
    assert not train & set(test)
    assert task.overlap_count() == 0


def test_generation_is_deterministic_in_the_data_seed():
    a = AdditionTask(AdditionConfig(train_size=300, test_size=50))
    b = AdditionTask(AdditionConfig(train_size=300, test_size=50))
    c = AdditionTask(AdditionConfig(train_size=300, test_size=50, data_seed=1))
    assert torch.equal(a.split("iid_test").tokens, b.split("iid_test").tokens)
    assert not torch.equal(a.split("iid_test").tokens, c.split("iid_test").tokens)


def test_answer_only_batches_supervise_exactly_the_answer():
    task = AdditionTask(AdditionConfig(train_size=300, test_size=10))
    batch = task.train_batch(32, torch.Generator().manual_seed(0))
    for row in range(32):
        targets = batch.targets[row]
        supervised = "".join(task.vocab.decode(targets[targets >= 0]))
        inputs = "".join(task.vocab.decode(batch.input_ids[row]))
        prompt = inputs[: inputs.index("=") + 1]
        a, b = map(int, prompt[1:-1].split("+"))
        assert supervised == str(a + b)[::-1] + "$"


def test_stream_protocol_supervises_every_position():
    task = AdditionTask(AdditionConfig(train_size=300, test_size=10, loss_on="stream",
                                       block_size=64))
    batch = task.train_batch(4, torch.Generator().manual_seed(0))
    assert batch.input_ids.shape == (4, 64)
    assert (batch.targets >= 0).all()
    assert torch.equal(batch.input_ids[:, 1:], batch.targets[:, :-1])
    text = "".join(task.vocab.decode(task.stream[:200]))
    assert text.startswith("$") and "$\n$" in text


def test_packed_protocol_rows_hold_whole_examples_with_answer_only_loss():
    task = AdditionTask(AdditionConfig(train_size=300, test_size=10, loss_on="packed",
                                       block_size=48))
    batch = task.train_batch(6, torch.Generator().manual_seed(1))
    assert batch.input_ids.shape == batch.targets.shape == (6, 48)
    train_texts = {"".join(task.text(a, b)) for a, b in task.pairs["train"].tolist()}
    for row, targets in zip(batch.input_ids.tolist(), batch.targets.tolist()):
        text = "".join(task.vocab.decode(row))
        examples = text.split("\n")
        assert text.startswith("$") and len(examples) >= 3  # example 1 starts at position 0
        assert all(example in train_texts for example in examples[:-1])
        in_answer, after_equals = [], False
        for char in text:
            after_equals = after_equals and char != "\n" or char == "="
            in_answer.append(after_equals and char != "=")
        for position in range(len(row) - 1):  # target i is token i + 1
            scored = targets[position] != IGNORE
            assert scored == in_answer[position + 1]
            assert not scored or targets[position] == row[position + 1]
