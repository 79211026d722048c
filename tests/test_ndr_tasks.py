"""CTL, arithmetic and ListOps: rule-generated, split by length/depth, balanced, correct labels."""

import collections

import numpy as np
import pytest
import torch

from sglab.config import build_run_config
from sglab.errors import SglabError
from sglab.tasks import build_task
from sglab.tasks.listops import dependency_depth, nesting_depth, tokens, value
from sglab.train.evaluate import evaluate


def _task(name, **fields):
    return build_task(build_run_config({"task": {"name": name, **fields}}, []).task)


def _texts(task, split):
    data = task.split(split)
    return [tuple(data.tokens[i, : data.lengths[i]].tolist()) for i in range(len(data))]


def test_ctl_splits_by_length_balanced_and_labels_follow_the_tables():
    task = _task("ctl", train_size=3000)
    lengths = {name: collections.Counter(task.split(name).groups["length"].tolist())
               for name in task.splits}
    assert set(lengths["train"]) == {1, 2, 3, 4, 5}
    assert set(lengths["ood_valid"]) == {6, 7, 8} and set(lengths["ood_test"]) == {9, 10}
    train = task.split("train")
    singles = {tuple(train.tokens[i, 1:3].tolist()) for i in range(len(train))
               if int(train.groups["length"][i]) == 1}
    assert len(singles) == 9 * 8  # every function on every symbol
    for name in ("ood_valid", "ood_test"):
        counts = list(lengths[name].values())
        assert max(counts) - min(counts) <= 1
    # thesis sampling: singles once, distinct compositions; length 2 has only 9*9*8 = 648
    # sequences (a quarter of them held out for iid_valid), so its share goes to longer lengths
    assert lengths["train"][1] == 72
    assert lengths["train"][2] == 648 - lengths["iid_valid"][2] == 648 - 162
    assert lengths["train"][3] == lengths["train"][4] == lengths["train"][5] == (3000 - 72 - 486) // 3
    assert len(set(_texts(task, "train"))) == len(task.split("train"))  # nothing to learn by rote
    repeated = _task("ctl", train_size=3000, singles="balanced", compositions="repeated")
    counts = collections.Counter(repeated.split("train").groups["length"].tolist())
    assert set(counts.values()) == {600}  # balanced 1-5 by repeating short sequences
    assert not set(_texts(repeated, "iid_valid")) & set(_texts(repeated, "train"))
    assert not set(_texts(task, "iid_valid")) & set(_texts(task, "train"))
    assert len(set(_texts(task, "ood_test"))) == len(task.split("ood_test"))
    # relabel by hand: forward input '<B> s f1 .. fL <E>' -> fL(..f1(s))
    data = task.split("ood_test")
    for i in range(20):
        words = task.vocab.decode(data.tokens[i, 1: data.lengths[i] - 1])
        symbol = task.symbol_names.index(words[0])
        for f in words[1:]:
            symbol = int(task.tables[task.function_names.index(f), symbol])
        assert task.vocab.decode([data.labels[i]]) == [task.symbol_names[symbol]]


def _relabel(task, tokens, length):
    """The answer of one CTL input computed by hand from the tables."""
    words = task.vocab.decode(tokens[1: length - 1])
    if task.config.direction == "backward":
        words = words[::-1]
    symbol = task.symbol_names.index(words[0])
    for f in words[1:]:
        symbol = int(task.tables[task.function_names.index(f), symbol])
    return task.symbol_names[symbol]


@pytest.mark.parametrize("direction", ["forward", "backward"])
def test_ctl_fresh_batches_have_uniform_lengths_correct_labels_and_no_held_out_sequence(direction):
    task = _task("ctl", train_size=2000, direction=direction, train_sampling="uniform")
    generator = torch.Generator().manual_seed(0)
    batches = [task.train_batch(500, generator) for _ in range(8)]
    lengths = torch.cat([b.key_padding_mask.sum(1) for b in batches]) - 3  # <B> symbol ... <E>
    counts = collections.Counter(lengths.tolist())
    assert set(counts) == {1, 2, 3, 4, 5}
    assert all(abs(c - 800) < 120 for c in counts.values())  # 4000 draws, 800 expected each
    held = set(_texts(task, "iid_valid"))
    for batch in batches[:2]:
        for row, mask, target in zip(batch.input_ids, batch.key_padding_mask, batch.targets[:, 0]):
            n = int(mask.sum())
            assert tuple(row[:n].tolist()) not in held
            assert task.vocab.decode([int(target)]) == [_relabel(task, row, n)]
            assert torch.all(row[n:] == 0)  # right padding
    # the layout is that of the fixed splits: every training sequence of length 1 shows up
    train_singles = {t for t in _texts(task, "train") if len(t) == 4}
    fresh_singles = {tuple(b.input_ids[i, :4].tolist()) for b in batches
                     for i in range(len(b.input_ids)) if int(b.key_padding_mask[i].sum()) == 4}
    assert fresh_singles == train_singles


@pytest.mark.parametrize("direction", ["forward", "backward"])
def test_ctl_fresh_one_length_batches_are_unpadded_uniform_and_correctly_labelled(direction):
    task = _task("ctl", train_size=2000, direction=direction, train_sampling="uniform",
                 batch_lengths="one")
    generator = torch.Generator().manual_seed(0)
    held, seen = set(_texts(task, "iid_valid")), collections.Counter()
    for i in range(500):
        batch = task.train_batch(8, generator)
        lengths = set(batch.key_padding_mask.sum(1).tolist())
        assert len(lengths) == 1 and batch.input_ids.shape[1] == next(iter(lengths))  # no pad
        length = lengths.pop()
        seen[length - 3] += 1  # <B> symbol f1 .. fL <E>
        if i < 20:
            for row, target in zip(batch.input_ids, batch.targets[:, 0]):
                assert tuple(row.tolist()) not in held
                assert task.vocab.decode([int(target)]) == [_relabel(task, row, length)]
    assert set(seen) == {1, 2, 3, 4, 5} and all(abs(c - 100) < 40 for c in seen.values())
    with pytest.raises(SglabError, match="train_sampling=uniform"):
        _task("ctl", train_size=2000, batch_lengths="one")


def test_ctl_bucketed_batches_hold_one_length_in_proportion_to_the_training_set():
    task = _task("ctl", train_size=2000, train_sampling="bucketed")
    share = collections.Counter(task.split("train").groups["length"].tolist())
    generator = torch.Generator().manual_seed(0)
    seen = collections.Counter()
    for _ in range(600):
        batch = task.train_batch(16, generator)
        lengths = set(batch.key_padding_mask.sum(1).tolist())
        assert len(lengths) == 1  # one length per batch
        seen[lengths.pop() - 3] += 1  # <B> symbol f1 .. fL <E>
    total = sum(share.values())
    assert share[1] == 72  # every single application once
    for length in (1, 2, 3, 4, 5):  # e.g. 72 / 2000 singles: 22 of 600 batches expected
        assert abs(seen[length] / 600 - share[length] / total) < 0.04


@pytest.mark.parametrize("name", ["listops", "arithmetic"])
def test_depth_tasks_bucketed_batches_are_training_rows_of_one_length_in_proportion(name):
    fields = {"train_size": 1500, "iid_valid_size": 50, "ood_valid_size": 50, "test_size": 50,
              "structure": "thesis_code", "train_depths": (1, 3), "ood_valid_depths": (4, 4),
              "test_depths": (5, 5)}
    if name == "listops":
        fields.update(max_arguments=3, operators=("MIN", "MAX", "MED"))
    task = _task(name, **fields, train_sampling="bucketed")
    train = task.split("train")
    rows = {(tuple(train.tokens[i, : train.lengths[i]].tolist()), int(train.labels[i]))
            for i in range(len(train))}
    share = collections.Counter(train.lengths.tolist())
    generator = torch.Generator().manual_seed(0)
    seen = collections.Counter()
    for _ in range(800):
        batch = task.train_batch(8, generator)
        assert bool(batch.key_padding_mask.all())  # one length, so no padding
        seen[batch.input_ids.shape[1]] += 1
        for row, target in zip(batch.input_ids, batch.targets[:, 0]):
            assert (tuple(row.tolist()), int(target)) in rows  # labels travel with their rows
    assert len(share) >= 5
    for length, count in share.items():  # within 4 standard errors of the training share
        expected = count / len(train)
        assert abs(seen[length] / 800 - expected) < 4 * (expected * (1 - expected) / 800) ** 0.5
    mixed = _task(name, **fields).train_batch(64, torch.Generator().manual_seed(0))
    assert len(set(mixed.key_padding_mask.sum(1).tolist())) > 1  # the default mixes lengths
    with pytest.raises(SglabError, match="train_sampling.*'dataset' or 'bucketed'"):
        _task(name, train_sampling="uniform")  # CTL's fresh sampler has no counterpart here


def test_ctl_backward_is_the_same_expression_reversed_and_generation_is_deterministic():
    forward, backward = _task("ctl", train_size=500), _task("ctl", train_size=500,
                                                            direction="backward")
    f, b = forward.split("ood_test"), backward.split("ood_test")
    assert torch.equal(f.labels, b.labels)
    for i in range(10):
        n = int(f.lengths[i])
        assert torch.equal(f.tokens[i, 1: n - 1], b.tokens[i, 1: n - 1].flip(0))
    again = _task("ctl", train_size=500)
    assert torch.equal(again.split("train").tokens, forward.split("train").tokens)
    other = _task("ctl", train_size=500, data_seed=1)
    assert not (other.tables == forward.tables).all()


def test_arithmetic_values_depths_and_splits():
    task = _task("arithmetic", train_size=1500)
    for split, (low, high) in (("train", (1, 5)), ("ood_valid", (6, 6)), ("ood_test", (7, 8))):
        data = task.split(split)
        depths = collections.Counter(data.groups["depth"].tolist())
        assert set(depths) == set(range(low, high + 1))
        assert max(depths.values()) - min(depths.values()) <= 1
        for i in range(0, len(data), max(len(data) // 50, 1)):
            text = "".join(task.vocab.decode(data.tokens[i, 1: data.lengths[i] - 1]))
            # mod 10 commutes with + and *, so Python's value mod 10 is the label
            assert task.vocab.decode([data.labels[i]]) == [str(eval(text) % 10)]
            nesting = max(text[:k].count("(") - text[:k].count(")") for k in range(len(text) + 1))
            assert nesting == int(data.groups["depth"][i])
            assert len(text) <= 50
    assert not set(_texts(task, "iid_valid")) & set(_texts(task, "train"))


def test_arithmetic_modulus_bounds_the_digits_and_the_labels():
    task = _task("arithmetic", train_size=600, modulus=5)
    for split in ("train", "ood_test"):
        data = task.split(split)
        for i in range(len(data)):
            text = "".join(task.vocab.decode(data.tokens[i, 1: data.lengths[i] - 1]))
            assert all(char in "()+*01234" for char in text)
            assert task.vocab.decode([data.labels[i]]) == [str(eval(text) % 5)]


def test_a_capped_evaluation_scores_every_depth_of_a_split_stored_depth_by_depth():
    from sglab.tasks.base import scored_examples

    assert scored_examples(10, 4).tolist() == [0, 3, 6, 9]
    assert scored_examples(5, None).tolist() == scored_examples(5, 9).tolist() == list(range(5))
    task = _task("arithmetic", train_size=300, iid_valid_size=100, train_depths=(1, 3),
                 ood_valid_depths=(4, 4), test_depths=(5, 5), max_tokens=25)
    depths = task.split("iid_valid").groups["depth"]
    assert depths[:10].unique().tolist() == [2]  # stored depth by depth

    def constant(input_ids, key_padding_mask=None):  # always the class of token "0"
        logits = torch.zeros(len(input_ids), 1, len(task.vocab))
        logits[..., task.vocab.encode(["0"])[0]] = 1.0
        return logits

    metrics = evaluate(constant, task, "iid_valid", batch_size=4, max_examples=10)
    assert {"iid_valid/exact_match/depth=2", "iid_valid/exact_match/depth=3"} <= set(metrics)
    labels = task.split("iid_valid").labels[scored_examples(100, 10)]
    zero = task.vocab.encode(["0"])[0]
    assert metrics["iid_valid/exact_match"] == pytest.approx(float((labels == zero).float().mean()))


def _operand_depths(text):
    """(left depth, right depth) of every operation, from the fully bracketed text."""
    pairs = []

    def parse(i):  # -> (depth, index after the operand)
        if text[i] != "(":
            return 0, i + 1
        left, i = parse(i + 1)
        right, i = parse(i + 1)  # skip the operator
        pairs.append((left, right))
        return 1 + max(left, right), i + 1

    assert parse(0)[1] == len(text)
    return pairs


@pytest.mark.parametrize("side", ["right", "random"])
def test_arithmetic_deeper_operand_sits_right_as_in_the_thesis_code(side):
    task = _task("arithmetic", train_size=600, deep_operand=side)
    data = task.split("ood_test")
    deeper_left = 0
    for i in range(len(data)):
        text = "".join(task.vocab.decode(data.tokens[i, 1: data.lengths[i] - 1]))
        pairs = _operand_depths(text)
        root_left, root_right = pairs[-1]
        deeper_left += root_left > root_right
        if side == "right":  # the deeper operand is the right one
            assert root_right == int(data.groups["depth"][i]) - 1
    if side == "right":
        assert deeper_left == 0
    else:  # about half of the roots have the deeper operand on the left
        assert 0.3 < deeper_left / len(data) < 0.7


def test_arithmetic_thesis_code_structure_mixes_sides_as_the_thesis_code_does():
    task = _task("arithmetic", train_size=2200, structure="thesis_code",
                 eval_subtree_probability=0.3, ood_valid_size=300, test_size=300)
    train = task.split("train")
    texts = _texts(task, "train")
    assert len(set(texts)) == len(texts)  # distinct, as the thesis code's sampler
    depths = collections.Counter(train.groups["depth"].tolist())
    assert depths == {1: 200, 2: 500, 3: 500, 4: 500, 5: 500}  # all 200 depth-1 once
    root_left = collections.defaultdict(list)
    for split in ("train", "ood_valid", "ood_test"):
        data = task.split(split)
        for i in range(len(data)):
            text = "".join(task.vocab.decode(data.tokens[i, 1: data.lengths[i] - 1]))
            assert task.vocab.decode([data.labels[i]]) == [str(eval(text) % 10)]
            left, right = _operand_depths(text)[-1]
            assert 1 + max(left, right) == int(data.groups["depth"][i])
            root_left[(split, int(data.groups["depth"][i]))].append(left > right)
    share = {key: sum(v) / len(v) for key, v in root_left.items()}
    # the deepest quotas fill from a deep left tree, the shallowest by wrapping on the right
    # (the thesis code's training set: 0.17 at depth 2, 0.90 at 3-5; depth 6: 0.09)
    assert share[("train", 2)] < 0.3
    assert min(share[("train", d)] for d in (3, 4, 5)) > 0.75
    assert share[("ood_valid", 6)] < 0.25 and share[("ood_test", 8)] > 0.7
    # evaluation splits use their own subtree probability: bushier side operands
    eval_chars = task.split("ood_valid").lengths.float().mean()
    plain = _task("arithmetic", train_size=300, structure="thesis_code", ood_valid_size=300,
                  test_size=300).split("ood_valid").lengths.float().mean()
    assert eval_chars > plain + 2


@pytest.mark.parametrize("setting", ["deep_operand=left", "structure=chains", "modulus=11",
                                     "eval_subtree_probability=1.5"])
def test_a_bad_arithmetic_data_setting_is_a_clear_error(tmp_path, capsys, setting):
    from sglab.cli import main

    runs = tmp_path / "runs"
    assert main(["train", "--task", "arithmetic", "--model", "lstm", "--set",
                 f"task.{setting}", "--runs-dir", str(runs)]) == 2
    assert setting.split("=")[0] in capsys.readouterr().err
    assert not runs.exists() or not any(runs.iterdir())


def test_listops_values_and_dependency_depth_on_hand_built_trees():
    leaf_list = ("MAX", (2, 4, 0, 8, 9))                       # = 9
    assert value(leaf_list) == 9 and dependency_depth(leaf_list) == 1
    # MIN picks 1: the deep branch is never selected, so it is pruned
    pruned = ("MIN", (1, ("SM", (("MAX", (3, 4)), 5))))
    assert value(pruned) == 1 and dependency_depth(pruned) == 1
    # ... unless it holds the minimum
    chosen = ("MIN", (7, ("SM", (("MAX", (3, 4)), 5))))      # SM(4, 5) = 9 -> MIN = 7
    assert value(chosen) == 7 and dependency_depth(chosen) == 1
    chosen = ("MIN", (9, ("SM", (("MAX", (3, 1)), 2))))      # SM(3, 2) = 5 -> MIN = 5
    assert value(chosen) == 5 and dependency_depth(chosen) == 3
    # MED of an even count: floor of the mean of the two middle values; both are needed
    med = ("MED", (("MIN", (8, 5)), 1, ("MAX", (("SM", (3, 3)), 2)), 9))  # 5, 1, 6, 9 -> (5+6)//2
    assert value(med) == 5 and dependency_depth(med) == 3
    # ties: the shallowest holder of the value is enough
    tie = ("MAX", (6, ("MAX", (("MIN", (6, 7)), 1))))
    assert value(tie) == 6 and dependency_depth(tie) == 1
    # SM needs every argument
    assert dependency_depth(("SM", (1, ("SM", (("SM", (1, 2)), 3))))) == 3
    assert tokens(("MED", (4, ("MAX", (8, 4))))) == ["[MED", "4", "[MAX", "8", "4", "]", "]"]


def _assert_listops_splits_balanced(task, spans):
    """Each split holds every dependency depth of its span, in equal shares, within the token
    limit; no IID-validation expression trains."""
    for split, (low, high) in spans:
        data = task.split(split)
        depths = collections.Counter(data.groups["depth"].tolist())
        assert set(depths) == set(range(low, high + 1))
        assert max(depths.values()) - min(depths.values()) <= 1
        assert int(data.lengths.max()) <= 52
    assert not set(_texts(task, "iid_valid")) & set(_texts(task, "train"))


def test_listops_splits_have_the_requested_dependency_depths():
    task = _task("listops", train_size=600, iid_valid_size=100, ood_valid_size=60, test_size=60)
    _assert_listops_splits_balanced(task, (("train", (1, 5)), ("ood_valid", (6, 6)),
                                           ("ood_test", (7, 8))))


def test_listops_draws_only_the_chosen_operators_and_labels_stay_correct():
    task = _task("listops", train_size=300, iid_valid_size=50, ood_valid_size=40, test_size=40,
                 train_depths=(1, 3), ood_valid_depths=(4, 4), test_depths=(5, 5),
                 max_tokens=30, max_arguments=3, operators=("MIN", "MAX", "MED"))
    assert "[SM" not in task.vocab.tokens and "[MED" in task.vocab.tokens
    ops, args = collections.Counter(), []
    for split in ("train", "iid_valid", "ood_valid", "ood_test"):
        data = task.split(split)
        for row, length, label in zip(data.tokens, data.lengths, data.labels):
            words = task.vocab.decode(row[:length])
            ops.update(w for w in words if w.startswith("["))
            # rebuild the tree from its prefix tokens and check the stored label
            stack = [[]]
            for w in words[1:-1]:
                if w.startswith("["):
                    stack.append([w[1:]])
                elif w == "]":
                    op, *operands = stack.pop()
                    args.append(len(operands))
                    stack[-1].append((op, tuple(operands)))
                else:
                    stack[-1].append(int(w))
            assert task.vocab.decode([label]) == [str(value(stack[0][0]))]
    assert set(ops) == {"[MIN", "[MAX", "[MED"} and min(ops.values()) > 50
    assert 2 <= min(args) and max(args) == 3
    with pytest.raises(SglabError, match="operators"):
        _task("listops", operators=("MIN", "MIN"))
    with pytest.raises(SglabError, match="operators"):
        _task("listops", operators=("MIN", "DIV"))


def _thesis_code_listops(**fields):
    """A small ListOps task drawn by the thesis code's sampler (the draws below do not depend
    on its split depths)."""
    sizes = dict(train_size=30, iid_valid_size=10, ood_valid_size=10, test_size=10,
                 train_depths=(1, 2), ood_valid_depths=(3, 3), test_depths=(4, 4))
    return _task("listops", structure="thesis_code", **{**sizes, **fields})


def test_listops_thesis_code_draws_carry_their_value_and_depths():
    task = _thesis_code_listops()
    rng = np.random.default_rng(0)
    dependency = collections.Counter()
    for depths in ((1, 3), (5, 5)):
        for _ in range(1500):
            drawn = task.thesis_code_draw(depths, rng)
            tree = drawn.tree
            assert drawn.value == value(tree) and drawn.dependency == dependency_depth(tree)
            assert drawn.n_tokens == len(tokens(tree)) and drawn.nesting == nesting_depth(tree)
            # as deep as the range asks, never deeper; pruning only makes it shallower
            assert depths[0] <= drawn.nesting <= depths[1] and drawn.dependency <= drawn.nesting
            dependency[depths, drawn.dependency] += 1
    # bushy random trees: most deep draws need far fewer levels than they are nested
    assert dependency[(5, 5), 5] < dependency[(5, 5), 1] and dependency[(5, 5), 5] > 0


def test_listops_thesis_code_wraps_the_tree_as_a_non_last_argument():
    # no sub-lists: the first tree is a digit, then every level wraps the one below it
    # (without sub-lists every tree is exactly as deep as its split's lowest depth)
    task = _thesis_code_listops(sublist_probability=0.0, max_arguments=4, train_depths=(1, 1),
                                ood_valid_depths=(2, 2), test_depths=(3, 3))
    rng = np.random.default_rng(1)
    positions, counts = collections.Counter(), collections.Counter()
    for _ in range(300):
        tree = task.thesis_code_draw((5, 5), rng).tree
        for level in range(5):
            op, args = tree
            deep = [i for i, a in enumerate(args) if not isinstance(a, int)]
            assert len(deep) == (level < 4)  # one list inside each list but the innermost
            counts[len(args)] += 1
            if deep:
                positions[deep[0] == len(args) - 1] += 1
                tree = args[deep[0]]
    assert positions[True] == 0 and positions[False] == 300 * 4
    assert set(counts) == {3, 4}  # 2 to max - 1 new arguments, plus the wrapped tree


def test_listops_thesis_code_splits_fill_their_depth_quotas():
    task = _task("listops", structure="thesis_code", train_size=300, iid_valid_size=60,
                 ood_valid_size=30, test_size=30, train_depths=(1, 3), ood_valid_depths=(4, 4),
                 test_depths=(5, 5), max_arguments=3, max_tokens=50,
                 operators=("MIN", "MAX", "MED"))
    _assert_listops_splits_balanced(task, (("train", (1, 3)), ("iid_valid", (1, 3)),
                                           ("ood_valid", (4, 4)), ("ood_test", (5, 5))))
    assert len(set(_texts(task, "ood_test"))) == 30
    # dependency depth 4 needs at least 13 tokens
    with pytest.raises(SglabError, match="unfilled.*max_tokens"):
        _thesis_code_listops(max_tokens=12)


def test_classification_tasks_need_a_classifier_model():
    task = _task("ctl", train_size=200)
    with pytest.raises(SglabError, match="readout"):
        task.check_model(build_run_config({}, ["model.attention_mask=bidirectional"]).model)
    with pytest.raises(SglabError, match="bidirectional"):
        task.check_model(build_run_config({}, ["model.readout=last"]).model)
    task.check_model(build_run_config({}, ["model.name=lstm"]).model)
    batch = task.train_batch(8, torch.Generator().manual_seed(0))
    assert batch.targets.shape == (8, 1) and batch.key_padding_mask.shape == batch.input_ids.shape


@pytest.mark.parametrize("task, field, prefix", [("ctl", "lengths", "length"),
                                                ("arithmetic", "depths", "depth"),
                                                ("listops", "depths", "depth")])
def test_split_ranges_must_be_valid_increasing_and_disjoint(task, field, prefix):
    with pytest.raises(SglabError, match=rf"{prefix} range \(0, 3\) must satisfy 1 <= low"):
        _task(task, **{f"test_{field}": (0, 3)})
    with pytest.raises(SglabError, match=rf"{prefix} ranges must be increasing and disjoint"):
        _task(task, **{f"train_{field}": (1, 5), f"ood_valid_{field}": (5, 6)})
