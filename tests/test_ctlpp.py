"""CTL++ task (thesis Ch. 6): the systematicity splits 'A' and 'R'."""

import itertools

import numpy as np
import pytest
import torch

from sglab.config import build_run_config
from sglab.errors import SglabError
from sglab.tasks import build_task
from sglab.tasks.base import ClassificationSplit
from sglab.tasks.ctlpp import FUNCTION_NAMES, GROUP


def make(**fields):
    return build_task(build_run_config({"task": {"name": "ctlpp", "train_size": 6000,
                                                 **fields}}, []).task)


def sequences(task, split):
    """Decode every example back to (function indices in application order, symbol, label)
    by reading its tokens, independently of the generator."""
    vocab = task.vocab
    out = []
    for row, length, label in zip(split.tokens.tolist(), split.lengths.tolist(),
                                  split.labels.tolist()):
        words = vocab.decode(row[:length])
        if task.config.boundary_tokens:
            assert words[0] == "<B>" and words[-1] == "<E>"
            words = words[1:-1]
        functions = [FUNCTION_NAMES.index(w) for w in reversed(words[:-1])]  # right to left
        out.append((functions, int(words[-1]), int(vocab.decode([label])[0])))
    return out


def adjacent_groups(functions):
    return [(a // GROUP, b // GROUP) for a, b in itertools.pairwise(functions)]


def trains_on(variant, functions):
    """The slow adjacency rule: 'A' switches group at every step, 'R' never does."""
    return all((a != b) == (variant == "A") for a, b in adjacent_groups(functions))


@pytest.mark.parametrize("variant", ["A", "R"])
def test_training_keeps_its_adjacency_rule_and_every_ood_sequence_breaks_it(variant):
    task = make(variant=variant)
    train = sequences(task, task.splits["train"])
    fresh = sequences(task, _batch_split(make(variant=variant, lengths="uniform")))
    for functions, _, _ in train + fresh:
        assert trains_on(variant, functions)
    for functions, _, _ in sequences(task, task.splits["iid_test"]):
        assert trains_on(variant, functions)
    ood = sequences(task, task.splits["ood_test"])
    assert {len(f) for f, _, _ in ood} == {2, 3, 4, 5, 6}
    for functions, _, _ in ood:
        pairs = adjacent_groups(functions)
        # each OOD sequence breaks the rule at every step: 'A' stays, 'R' alternates
        assert all((a == b) == (variant == "A") for a, b in pairs)


def _batch_split(task, n=2000, seed=1):
    batch = task.train_batch(n, torch.Generator().manual_seed(seed))
    lengths = batch.key_padding_mask.sum(1)
    return ClassificationSplit(batch.input_ids, lengths, batch.targets[:, 0])


@pytest.mark.parametrize("variant", ["A", "R"])
def test_iid_test_is_disjoint_from_training_and_singles_cover_every_pair(variant):
    task = make(variant=variant)
    train = {(tuple(f), s) for f, s, _ in sequences(task, task.splits["train"])}
    fresh = {(tuple(f), s) for f, s, _ in sequences(
        task, _batch_split(make(variant=variant, lengths="uniform"), n=4000))}
    iid = {(tuple(f), s) for f, s, _ in sequences(task, task.splits["iid_test"])}
    assert len(iid) == 1000
    assert not iid & train and not iid & fresh
    singles = {(f[0], s) for f, s in train if len(f) == 1}
    assert singles == {(f, s) for f in range(32) for s in range(8)}


@pytest.mark.parametrize("variant", ["A", "S"])
def test_labels_match_a_slow_reference_of_the_tables(variant):
    task = make(variant=variant)
    for name in ("train", "iid_test", "ood_test"):
        for functions, symbol, label in sequences(task, task.splits[name])[:400]:
            value = symbol
            for f in functions:  # the function next to the symbol applies first
                value = int(task.tables[f][value])
            assert value == label
    assert all(sorted(row) == list(range(8)) for row in task.tables.tolist())  # bijections


def test_thesis_length_mix_caps_each_length_at_half_its_sequences():
    task = make(variant="R", train_size=20_000)
    counts = torch.bincount(task.splits["train"].groups["length"]).tolist()
    assert counts[1] == 256
    assert counts[2] == task.population(2) // 2  # 2 x 16^2 x 8 = 4096 sequences, half train
    assert sum(counts) == 20_000 and max(counts[3:]) - min(counts[3:]) <= 1
    codes = task.splits["train"].tokens[:, :9]
    assert len(torch.unique(codes, dim=0)) == 20_000  # distinct sequences


def test_uniform_lengths_draw_fresh_batches_with_uniform_lengths():
    task = make(variant="A", lengths="uniform")
    split = _batch_split(task, n=6000, seed=3)
    lengths = torch.tensor([len(f) for f, _, _ in sequences(task, split)])
    counts = torch.bincount(lengths)[1:].float()
    assert len(counts) == 6 and counts.min() > 0.8 * counts.mean()
    other = _batch_split(task, n=6000, seed=4)
    assert not torch.equal(split.tokens, other.tokens)


@pytest.mark.parametrize("lengths", ["uniform", "thesis"])
def test_one_length_batches_are_unpadded_and_follow_the_length_mix(lengths):
    task = make(variant="R", lengths=lengths, train_size=20_000, batch_lengths="one")
    generator = torch.Generator().manual_seed(0)
    seen, held = [], {(tuple(f), s) for f, s, _ in sequences(task, task.splits["iid_test"])}
    for _ in range(900):
        batch = task.train_batch(8, generator)
        assert batch.key_padding_mask.all()  # one length, so no padding column
        split = ClassificationSplit(batch.input_ids, batch.key_padding_mask.sum(1),
                                    batch.targets[:, 0])
        rows = sequences(task, split)
        assert len({len(f) for f, _, _ in rows}) == 1
        for functions, symbol, label in rows:
            assert trains_on("R", functions) and (tuple(functions), symbol) not in held
            value = symbol
            for f in functions:
                value = int(task.tables[f][value])
            assert value == label
        seen.append(len(rows[0][0]))
    share = torch.bincount(torch.tensor(seen), minlength=7)[1:].float() / len(seen)
    if lengths == "uniform":  # each of the six lengths 1/6 of the batches
        expected = torch.full((6,), 1 / 6)
    else:  # as often as the fixed set holds that length (singles: 256 of 20,000)
        counts = torch.bincount(task.splits["train"].groups["length"], minlength=7)[1:]
        expected = counts.float() / counts.sum()
    assert (share - expected).abs().max() < 0.045


def test_mixed_batches_draw_a_length_per_example():
    task = make(variant="R", lengths="uniform")
    batch = task.train_batch(64, torch.Generator().manual_seed(0))
    assert len(set(batch.key_padding_mask.sum(1).tolist())) > 3


@pytest.mark.parametrize("variant", ["A", "R"])
def test_without_singles_training_holds_compositions_of_two_to_six_only(variant):
    """The authors' code trains on 2-6 functions; the thesis text adds single applications."""
    fixed = make(variant=variant, singles=False, train_size=20_000)
    counts = torch.bincount(fixed.splits["train"].groups["length"]).tolist()
    assert counts[:2] == [0, 0] and sum(counts) == 20_000
    assert counts[2] == fixed.population(2) // 2 and max(counts[3:]) - min(counts[3:]) <= 1
    split = _batch_split(make(variant=variant, lengths="uniform", singles=False), n=5000)
    seen = sequences(fixed, split)
    lengths = torch.bincount(torch.tensor([len(f) for f, _, _ in seen]))
    assert lengths[:2].tolist() == [0, 0]
    assert lengths[2:].min() > 0.8 * lengths[2:].float().mean()
    assert all(trains_on(variant, f) for f, _, _ in seen)
    # with singles and 256 more examples: the same compositions and the same test sets
    with_singles = make(variant=variant, train_size=20_256)
    assert torch.equal(fixed.splits["train"].tokens, with_singles.splits["train"].tokens[256:])
    for name in ("iid_test", "ood_test"):
        assert torch.equal(fixed.splits[name].tokens, with_singles.splits[name].tokens)


def test_same_seed_same_data_other_seed_other_tables():
    a, b, c = make(variant="A"), make(variant="A"), make(variant="A", data_seed=1)
    for name in a.splits:
        assert torch.equal(a.splits[name].tokens, b.splits[name].tokens)
        assert torch.equal(a.splits[name].labels, b.splits[name].labels)
    assert not np.array_equal(a.tables, c.tables)
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    x = make(variant="R", lengths="uniform")
    assert torch.equal(x.train_batch(64, g1).input_ids, x.train_batch(64, g2).input_ids)


def test_without_boundary_tokens_the_input_is_just_the_expression():
    task = make(variant="R", boundary_tokens=False)
    functions, symbol, _ = sequences(task, task.splits["ood_test"])[0]
    assert task.splits["ood_test"].lengths[0] == len(functions) + 1


@pytest.mark.parametrize("fields, message", [
    ({"variant": "Q"}, "variant"), ({"lengths": "short"}, "lengths"),
    ({"max_length": 1}, "max_length"), ({"train_size": 10}, "train_size"),
    ({"variant": "S", "shared_symbols": 9}, "shared_symbols"),
    ({"variant": "S", "shared_symbols": -1}, "shared_symbols"),
    ({"variant": "S", "shared_functions": 6}, "multiple of 4"),
    ({"variant": "S", "shared_functions": 4, "shared_symbols": 1}, "cover"),
    ({"variant": "A", "shared_symbols": 2}, "no effect without variant=S"),
    ({"variant": "S", "singles": False}, "no effect without variant=A or variant=R"),
])
def test_bad_config_is_an_sglab_error(fields, message):
    with pytest.raises(SglabError, match=message):
        make(**fields)


def test_an_unknown_variant_on_the_command_line_exits_2_and_writes_nothing(tmp_path, capsys):
    from sglab.cli import main

    runs = tmp_path / "runs"
    assert main(["train", "--set", "task.name=ctlpp", "--set", "task.variant=Q", "--set",
                 "model.readout=first", "--runs-dir", str(runs)]) == 2
    assert "variant" in capsys.readouterr().err
    assert not runs.exists() or not any(runs.iterdir())


# ---------------------------------------------------------------------------- variant 'S'

STAGED = {"o": range(0, 8), "a1": range(8, 14), "a2": range(14, 20), "b1": range(20, 26),
          "b2": range(26, 32)}  # shared_functions 8: G_o first, then 6 each (thesis Sec. 6.2)


def group_of(function):
    return next(name for name, members in STAGED.items() if function in members)


def staged_trains_on(task, functions, symbol):
    """The slow training rule: pairs (G_p1, G_p2), or (G_p1, f in G_o) with the symbol f
    receives in S_p^f."""
    sets = dict(zip("ab", task.symbol_sets))
    value = symbol
    for first, second in zip(functions[::2], functions[1::2]):
        path = group_of(first)[0]
        if group_of(first) not in ("a1", "b1"):
            return False
        value = int(task.tables[first][value])
        if group_of(second) == "o":
            if value not in sets[path][second]:
                return False
        elif group_of(second) != f"{path}2":
            return False
        value = int(task.tables[second][value])
    return True


def test_staged_training_keeps_its_rule_with_even_lengths_and_ood_crosses_paths():
    task = make(variant="S", shared_functions=8, shared_symbols=3)
    assert {k: v.tolist() for k, v in task.groups.items()} == {
        k: list(v) for k, v in STAGED.items()}
    train = sequences(task, task.splits["train"])
    fresh = sequences(task, _batch_split(make(variant="S", shared_functions=8, shared_symbols=3,
                                              lengths="uniform"), n=3000))
    iid = sequences(task, task.splits["iid_test"])
    for functions, symbol, _ in train + fresh + iid:
        assert len(functions) % 2 == 0 and staged_trains_on(task, functions, symbol)
    assert {len(f) for f, _, _ in train} == {len(f) for f, _, _ in fresh} == {2, 4, 6}
    # G_o is used, after both paths, only on symbols of S_p^f
    seen = {"a": set(), "b": set()}
    for functions, symbol, _ in train:
        value = symbol
        for first, second in zip(functions[::2], functions[1::2]):
            value = int(task.tables[first][value])
            if second in STAGED["o"]:
                path = group_of(first)[0]
                assert value in task.symbol_sets["ab".index(path)][second]
                seen[path].add((second, value))
            value = int(task.tables[second][value])
    allowed = {p: {(f, s) for f in STAGED["o"] for s in task.symbol_sets[i][f]}
               for i, p in enumerate("ab")}
    assert seen["a"] == allowed["a"] and seen["b"] == allowed["b"]  # every allowed use occurs
    ood = sequences(task, task.splits["ood_test"])
    assert {len(f) for f, _, _ in ood} == {2, 4, 6}
    for functions, symbol, _ in ood:
        assert not staged_trains_on(task, functions, symbol)
        for first, second in zip(functions[::2], functions[1::2]):  # every pair crosses paths
            assert (group_of(first), group_of(second)) in {("a1", "b2"), ("b1", "a2")}
    keys = {(tuple(f), s) for f, s, _ in train}
    assert not keys & {(tuple(f), s) for f, s, _ in iid}
    assert not {(tuple(f), s) for f, s, _ in fresh} & {(tuple(f), s) for f, s, _ in iid}
    assert len(task.splits["train"].labels) == 6000


@pytest.mark.parametrize("functions, shared", [(4, 2), (8, 3), (12, 5), (16, 6), (8, 8), (8, 0)])
def test_shared_symbol_sets_have_the_stated_overlap_and_cover_every_symbol(functions, shared):
    task = make(variant="S", shared_functions=functions, shared_symbols=shared, train_size=1000,
                max_length=4)
    sets_a, sets_b = task.symbol_sets
    assert len(sets_a) == len(sets_b) == functions
    for a, b in zip(sets_a, sets_b):
        assert len(a & b) == shared and a | b == set(range(8))
        assert abs(len(a) - len(b)) <= 1  # the rest split between the paths
    if shared:
        assert set().union(*(a & b for a, b in zip(sets_a, sets_b))) == set(range(8))
    assert len(task.groups["a1"]) == (32 - functions) // 4


def test_staged_sequence_counts_match_composing_every_pair():
    task = make(variant="S", shared_functions=12, shared_symbols=2, train_size=1000)
    graph = task.train_graph
    firsts, symbols = graph.all_pairs()
    assert len(set(zip(map(tuple, firsts.tolist()), symbols.tolist()))) == graph.count(2)
    # length 4: every pair, then every pair that starts from the symbol it ends on
    ends = task.apply(firsts, symbols)
    starts = np.bincount(symbols, minlength=8)
    assert graph.count(4) == int(starts[ends].sum())
    assert task.ood_graph.count(2) == 2 * 5 * 5 * 8  # (G_a1 x G_b2 + G_b1 x G_a2) x symbols


def test_staged_same_seed_same_data():
    a, b = (make(variant="S", shared_functions=16, shared_symbols=5) for _ in range(2))
    c = make(variant="S", shared_functions=16, shared_symbols=5, data_seed=3)
    for name in a.splits:
        assert torch.equal(a.splits[name].tokens, b.splits[name].tokens)
    assert a.symbol_sets == b.symbol_sets
    assert not torch.equal(a.splits["train"].tokens, c.splits["train"].tokens)


@pytest.mark.parametrize("variant", ["A", "R"])
def test_pairs_add_every_training_pair_but_the_iid_test_ones(variant):
    """The authors' code trains 'A' and 'R' on its fixed set plus its `pairs` split: every
    length-2 sequence of the training graph (fit.train_on_pairs)."""
    base = make(variant=variant, singles=False, train_size=20_000)
    task = make(variant=variant, singles=False, train_size=20_000, pairs=True)
    population = task.population(2)
    train = sequences(task, task.splits["train"])
    assert len(train) == 20_000 + population - len(task.held_out[2])
    assert torch.equal(task.splits["train"].tokens[:20_000, :5],
                       base.splits["train"].tokens[:20_000, :5])
    pairs = {(tuple(f), s) for f, s, _ in train if len(f) == 2}
    held = {(tuple(f), s) for f, s, _ in sequences(task, task.splits["iid_test"]) if len(f) == 2}
    assert len(held) == len(task.held_out[2]) and not pairs & held
    assert len(pairs) + len(held) == population  # every pair of the training graph
    assert all(trains_on(variant, list(f)) for f, _ in pairs)
    for name in ("iid_test", "ood_test"):
        assert torch.equal(task.splits[name].tokens, base.splits[name].tokens)
    with pytest.raises(SglabError, match="pairs"):
        make(variant=variant, lengths="uniform", pairs=True)
