"""The one-pass scorer must agree with real greedy decoding, example by example."""

import torch

from sglab.tasks.base import SequenceSplit, causal_batch, greedy_generate, prefix_batch
from tests.conftest import tiny_model


def _split_from_model_outputs(task, model, n=40):
    """Half the examples carry the model's own greedy answer, half a corrupted one."""
    test = task.split("iid_test")
    rows, lengths, prompt_lengths, expect = [], [], [], []
    for i in range(n):
        prompt = test.tokens[i, : test.prompt_lengths[i]].tolist()
        answer = greedy_generate(model, prompt, 4, stop_id=None)
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
            per_example.append(task.evaluate(model, "one", 64)["one/exact_match"] == 1.0)
        total = task.evaluate(model, "probe", 64)["probe/exact_match"]
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
