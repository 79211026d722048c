"""The composite anchor task: layout, targets, splits and the two scorings of (4,3)."""

import pytest
import torch

from sglab.config import build_run_config
from sglab.errors import SglabError
from sglab.tasks import build_task
from sglab.tasks.anchors import (
    ANCHOR_SHIFT,
    AnchorsConfig,
    AnchorsTask,
    inferential_shift,
    make_sequences,
    training_pairs,
)
from sglab.train.evaluate import evaluate

SIZES = dict(train_size=6000, test_size=2000, unseen_size=600)


@pytest.fixture(scope="module")
def task():
    return AnchorsTask(AnchorsConfig(**SIZES))


def _anchor_positions(tokens: torch.Tensor) -> torch.Tensor:
    return (tokens[:, :-1] >= 1) & (tokens[:, :-1] <= 4)


def _decode(tokens: torch.Tensor):
    """(key, pair, key position, target) of each row, read back from the tokens alone."""
    out = []
    for row in tokens.tolist():
        prompt, target = row[:-1], row[-1]
        first = next(i for i, t in enumerate(prompt) if 1 <= t <= 4)
        out.append((prompt[first - 1], (prompt[first], prompt[first + 1]), first - 1, target))
    return out


def test_worked_examples_of_the_paper():
    # (23, 1, 2, 43, ...) -> 29 and (52, 33, 36, 2, 4, ...) -> 29
    pairs = torch.tensor([[1, 2], [2, 4]])
    keys, positions = torch.tensor([23, 36]), torch.tensor([0, 2])
    shifts = torch.tensor([inferential_shift((1, 2)), inferential_shift((2, 4))])
    rows = make_sequences(pairs, keys, positions, shifts, 9, torch.Generator().manual_seed(0))
    assert rows[:, -1].tolist() == [29, 29]
    assert rows[0, :3].tolist() == [23, 1, 2] and rows[1, 2:5].tolist() == [36, 2, 4]


def test_each_sequence_has_one_adjacent_anchor_pair_and_the_right_target(task):
    for name, data in task.splits.items():
        tokens = data.tokens
        assert tokens.shape[1] == 10 and bool((data.prompt_lengths == 9).all())
        anchors = _anchor_positions(tokens)
        assert bool((anchors.sum(1) == 2).all()), name
        for key, pair, pos, target in _decode(tokens[:500]):
            assert 20 <= key <= 99 and 0 <= pos <= 6
            if name == "unseen":
                assert pair == (4, 3) and target == key - 10
            elif pair == (3, 4):
                assert target == key - 6  # the seen non-inferential mapping
            else:
                assert target == key + ANCHOR_SHIFT[pair[0]] + ANCHOR_SHIFT[pair[1]]
        noise = tokens[:, :-1][~anchors]
        assert int(noise.min()) >= 20 and int(noise.max()) <= 99


def test_unseen_pair_never_appears_in_training_and_the_rest_do(task):
    decoded = _decode(task.split("train").tokens)
    pairs = {pair for _, pair, _, _ in decoded}
    assert (4, 3) not in pairs
    assert pairs == set(training_pairs(task.config)) and len(pairs) == 15
    assert set(task.split("iid_test").groups["pair"].tolist()) == {10 * a + b for a, b in pairs}


def test_key_split_holds_and_value_position_combinations_are_disjoint(task):
    train = {(k, p) for k, _, p, _ in _decode(task.split("train").tokens)}
    test = {(k, p) for k, _, p, _ in _decode(task.split("iid_test").tokens)}
    assert all(k % 7 != p for k, p in train)
    assert all(k % 7 == p for k, p in test)
    assert not train & test
    # values are shared: every key value occurs in both splits
    assert {k for k, _ in train} == {k for k, _ in test} == set(range(20, 100))
    unseen = _decode(task.split("unseen").tokens)
    on_test_keys = task.split("unseen").groups["test_key"].bool().tolist()
    assert any(on_test_keys) and not all(on_test_keys)
    for (k, _, p, _), is_test in zip(unseen, on_test_keys):
        assert (k % 7 == p) == is_test


def test_held_out_non_inferential_pair_variant():
    task = AnchorsTask(AnchorsConfig(seen_non_inferential=False, **SIZES))
    pairs = {pair for _, pair, _, _ in _decode(task.split("train").tokens)}
    assert len(pairs) == 14 and (3, 4) not in pairs and (4, 3) not in pairs


def test_same_seed_same_data_and_a_new_seed_new_data():
    a = AnchorsTask(AnchorsConfig(**SIZES))
    b = AnchorsTask(AnchorsConfig(**SIZES))
    c = AnchorsTask(AnchorsConfig(data_seed=1, **SIZES))
    assert all(torch.equal(a.splits[s].tokens, b.splits[s].tokens) for s in a.splits)
    assert not torch.equal(a.split("train").tokens, c.split("train").tokens)


class _Oracle(torch.nn.Module):
    """Answers f(x) = x + shift(pair) with shift chosen per pair; a hand-built model."""

    is_causal = True

    def __init__(self, shift_of_pair: dict[tuple[int, int], int], vocab: int):
        super().__init__()
        self.shift_of_pair, self.vocab = shift_of_pair, vocab

    def forward(self, input_ids, key_padding_mask=None):
        logits = torch.zeros(*input_ids.shape, self.vocab)
        for i, row in enumerate(input_ids.tolist()):
            first = next(j for j, t in enumerate(row) if 1 <= t <= 4)
            pair = (row[first], row[first + 1])
            logits[i, -1, row[first - 1] + self.shift_of_pair[pair]] = 1.0
        return logits


def _shifts(unseen_shift: int) -> dict[tuple[int, int], int]:
    shifts = {(a, b): ANCHOR_SHIFT[a] + ANCHOR_SHIFT[b] for a in range(1, 5) for b in range(1, 5)}
    shifts[(3, 4)] = -6
    shifts[(4, 3)] = unseen_shift
    return shifts


@pytest.mark.parametrize("unseen_shift, inferential, symmetric", [(-10, 1.0, 0.0), (-6, 0.0, 1.0),
                                                                   (0, 0.0, 0.0)])
def test_unseen_pair_is_scored_against_both_targets(task, unseen_shift, inferential, symmetric):
    model = _Oracle(_shifts(unseen_shift), len(task.vocab))
    unseen = evaluate(model, task, "unseen", batch_size=128, max_examples=200)
    assert unseen["unseen/inferential"] == inferential and unseen["unseen/symmetric"] == symmetric
    assert unseen["unseen/exact_match/pair=43"] == inferential
    seen = evaluate(model, task, "iid_test", batch_size=128, max_examples=300)
    assert seen["iid_test/exact_match"] == 1.0 and seen["iid_test/exact_match/pair=34"] == 1.0


def test_a_model_that_ignores_the_override_fails_on_pair_34(task):
    shifts = _shifts(-10)
    shifts[(3, 4)] = -10  # the inferential answer where training asks for x-6
    metrics = evaluate(_Oracle(shifts, len(task.vocab)), task, "iid_test", 256, 1000)
    assert metrics["iid_test/exact_match/pair=34"] == 0.0 and metrics["iid_test/exact_match/pair=12"] == 1.0
    assert 0.8 < metrics["iid_test/exact_match"] < 1.0


def test_training_batches_put_the_loss_on_the_answer_token_only(task):
    batch = task.train_batch(32, torch.Generator().manual_seed(0))
    assert batch.input_ids.shape == (32, 9)
    scored = batch.targets != -100
    assert bool(scored[:, -1].all()) and int(scored.sum()) == 32


def test_bad_configs_are_clear_errors(tmp_path):
    with pytest.raises(SglabError, match="vocab_size"):
        build_run_config({"task": {"name": "anchors", "vocab_size": 100}})
    config = build_run_config({"task": {"name": "anchors", **SIZES},
                               "model": {"name": "transformer", "attention_mask": "bidirectional"}})
    with pytest.raises(SglabError, match="causal"):
        build_task(config.task).check_model(config.model)
