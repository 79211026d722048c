"""The one-pass scorer must agree with real greedy decoding, example by example; greedy
decoding driven by the evaluator (the task's decode step) must agree with decoding one
example at a time."""

import torch

from sglab.tasks.base import IGNORE, SequenceSplit, causal_batch, prefix_batch, prefix_rows
from sglab.train.evaluate import evaluate, greedy_decode, model_is_causal
from tests.conftest import tiny_model


@torch.no_grad()
def _greedy_one_at_a_time(model, prompt_ids: list[int], steps: int) -> list[int]:
    """Plain greedy decoding of one example: its exact prefix, no padding."""
    ids = list(prompt_ids)
    for _ in range(steps):
        x = torch.tensor([ids])
        mask = None if model_is_causal(model) else torch.ones_like(x, dtype=torch.bool)
        ids.append(int(model(x, key_padding_mask=mask)[0, -1].argmax()))
    return ids[len(prompt_ids):]


def _prompts_with_blank_answers(task, n: int, steps: int) -> SequenceSplit:
    """The first ``n`` test prompts, each with an answer of ``steps`` placeholder tokens
    (what the decode step fills in)."""
    test = task.split("iid_test")
    prompt_lengths = test.prompt_lengths[:n]
    tokens = torch.zeros(n, int(prompt_lengths.max()) + steps, dtype=torch.long)
    for i in range(n):
        p = int(prompt_lengths[i])
        tokens[i, :p] = test.tokens[i, :p]
        tokens[i, p: p + steps] = 1
    return SequenceSplit(tokens, prompt_lengths + steps, prompt_lengths.clone())


def _greedy_answers(task, model, n=40, steps=4) -> list[list[int]]:
    task.splits["decode"] = _prompts_with_blank_answers(task, n, steps)
    try:
        return greedy_decode(model, task, "decode", 16)
    finally:
        task.splits.pop("decode")


def _split_from_model_outputs(task, model, n=40):
    """Half the examples carry the model's own greedy answer, half a corrupted one."""
    test = task.split("iid_test")
    answers = _greedy_answers(task, model, n)
    rows, lengths, prompt_lengths, expect = [], [], [], []
    for i in range(n):
        prompt = test.tokens[i, : test.prompt_lengths[i]].tolist()
        answer = list(answers[i])
        matches = i % 2 == 0
        if not matches:  # corrupt one token of the greedy answer
            j = i % 4
            answer[j] = answer[j] % (len(task.vocab) - 1) + 1
        rows.append(prompt + answer)
        lengths.append(len(rows[-1]))
        prompt_lengths.append(len(prompt))
        expect.append(matches)
    tokens = torch.zeros(n, max(lengths), dtype=torch.long)
    for i, row in enumerate(rows):
        tokens[i, : len(row)] = torch.tensor(row)
    return SequenceSplit(tokens, torch.tensor(lengths), torch.tensor(prompt_lengths)), expect


def _one_pass_correct(task, model, split):
    task.splits["probe"] = split
    try:
        per_example = []
        for i in range(len(split)):
            one = split.subset(torch.tensor([i]))
            task.splits["one"] = one
            per_example.append(evaluate(model, task, "one", 64)["one/exact_match"] == 1.0)
        total = evaluate(model, task, "probe", 64)["probe/exact_match"]
    finally:
        task.splits.pop("probe"), task.splits.pop("one", None)
    return per_example, total


def test_one_pass_exact_match_equals_greedy_decoding_causal():
    torch.manual_seed(1)
    task, model = tiny_model("model.pos_encoding=none")
    model.eval()
    split, expect = _split_from_model_outputs(task, model)
    per_example, total = _one_pass_correct(task, model, split)
    assert per_example == expect
    assert total == sum(expect) / len(expect)


def test_one_pass_exact_match_equals_greedy_decoding_bidirectional():
    torch.manual_seed(2)
    task, model = tiny_model("model.pos_encoding=learned", "model.attention_mask=bidirectional")
    model.eval()
    split, expect = _split_from_model_outputs(task, model)
    per_example, _ = _one_pass_correct(task, model, split)
    assert per_example == expect


def test_batched_greedy_decoding_equals_decoding_one_example_at_a_time():
    for seed, overrides in ((1, ["model.pos_encoding=none"]),
                            (2, ["model.pos_encoding=learned",
                                 "model.attention_mask=bidirectional"])):
        torch.manual_seed(seed)
        task, model = tiny_model(*overrides)
        model.eval()
        test = task.split("iid_test")
        answers = _greedy_answers(task, model, n=24, steps=4)
        for i, answer in enumerate(answers):
            prompt = test.tokens[i, : test.prompt_lengths[i]].tolist()
            assert answer == _greedy_one_at_a_time(model, prompt, 4)


def test_prefix_batch_rows_are_the_prefixes_before_each_answer_token():
    task, _ = tiny_model()
    split = task.split("iid_test").subset(torch.arange(3))
    batch = prefix_batch(split)
    answer_tokens = int((split.lengths - split.prompt_lengths).sum())
    assert batch.input_ids.shape[0] == answer_tokens
    for row in range(answer_tokens):
        i = int(batch.example_index[row])
        real = int(batch.key_padding_mask[row].sum())
        assert torch.equal(batch.input_ids[row, :real], split.tokens[i, :real])
        assert int(batch.targets[row, real - 1]) == int(split.tokens[i, real])
        assert (batch.targets[row] >= 0).sum() == 1
    causal = causal_batch(split)
    assert int((causal.targets >= 0).sum()) == answer_tokens
    assert causal.next_token and not batch.next_token


def _prefix_batch_from_the_split(split: SequenceSplit):
    """The prefix rows built from the split itself (how they were built before the batch
    carried what both kinds of model need): the reference for :func:`prefix_rows`."""
    answer_lengths = split.lengths - split.prompt_lengths
    example = torch.repeat_interleave(torch.arange(len(split)), answer_lengths)
    offsets = torch.arange(len(example)) - torch.repeat_interleave(
        torch.cumsum(answer_lengths, 0) - answer_lengths, answer_lengths)
    prefix_len = split.prompt_lengths[example] + offsets
    width = int(prefix_len.max())
    rows = split.tokens[example, :width].clone()
    real = torch.arange(width).unsqueeze(0) < prefix_len[:, None]
    rows[~real] = 0
    targets = torch.full_like(rows, IGNORE)
    targets[torch.arange(len(example)), prefix_len - 1] = split.tokens[example, prefix_len]
    return rows, targets, real, example


def test_prefix_rows_of_the_causal_batch_equal_the_prefix_rows_of_the_split():
    task, _ = tiny_model()
    generator = torch.Generator().manual_seed(0)
    train = task.split("train")
    for _ in range(5):
        split = train.subset(torch.randint(len(train), (16,), generator=generator))
        expanded = prefix_rows(causal_batch(split))
        rows, targets, real, example = _prefix_batch_from_the_split(split)
        assert torch.equal(expanded.input_ids, rows) and torch.equal(expanded.targets, targets)
        assert torch.equal(expanded.key_padding_mask, real)
        assert torch.equal(expanded.example_index, example)
