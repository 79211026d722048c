"""Encoder-decoder transformer: embedding scaling, relative attention, universal sharing,
EOS handling, greedy decoding and sequence-level exact match."""

import math
from collections import Counter

import pytest
import torch

from sglab.config import build_run_config
from sglab.errors import SglabError
from sglab.models import build_model
from sglab.models.relative import RelativeSelfAttention
from sglab.models.seq2seq import embedding_scales, init_embedding
from sglab.tasks import build_task
from sglab.tasks.base import IGNORE, scored_examples
from sglab.tasks.seq2seq import (
    PairSplit,
    length_sorted_parts,
    seq2seq_batch,
    sequence_exact_match,
)
from sglab.train import Trainer
from sglab.train.evaluate import evaluate, greedy_decode


def greedy_exact_match(model, task, split: str, max_examples: int | None,
                       oracle_length: bool = False, batch_size: int = 16) -> torch.Tensor:
    """Per example that the evaluator scores (``max_examples`` of ``split``): whether greedy
    decoding token by token (the task's decode step, driven by the evaluator) reproduces
    the target; ``oracle_length``: EOS suppressed, cut at the target's length."""
    decoded = greedy_decode(model, task, split, batch_size, max_examples,
                            oracle_length=oracle_length)
    data = task.split(split)
    index = scored_examples(len(data), max_examples)
    targets = [data.target[i, : int(data.target_lengths[i])].tolist() for i in index.tolist()]
    return sequence_exact_match(decoded, targets)


def _config(*overrides, split="cutoff_26"):
    return build_run_config({"task": {"name": "scan", "split": split},
                             "model": {"name": "seq2seq", "d_model": 32, "d_ff": 64, "n_heads": 4,
                                       "n_layers": 2, "dropout": 0.0}}, list(overrides))


@pytest.fixture(scope="module")
def scan_task():
    return build_task(_config().task)


def _model(task, *overrides, seed=0):
    config = _config(*overrides)
    torch.manual_seed(seed)
    return build_model(config.model, len(task.vocab), task.max_length).eval()


def test_embedding_scaling_formulas():
    d = 256
    assert embedding_scales("teu", d) == (16.0, 1.0)  # H = sqrt(d) E + P
    assert embedding_scales("none", d) == (1.0, 1.0)  # H = E + P
    assert embedding_scales("ped", d) == (1.0, 1 / 16)  # H = E + P / sqrt(d)
    torch.manual_seed(0)
    table = torch.empty(2000, d)
    init_embedding(table, "teu")  # Glorot uniform: U(+-sqrt(6 / (d + N_words)))
    bound = math.sqrt(6 / (d + 2000))
    assert table.abs().max() <= bound and table.abs().max() > 0.99 * bound
    init_embedding(table, "ped")  # Kaiming normal: std sqrt(2 / d)
    assert table.std().item() == pytest.approx(math.sqrt(2 / d), rel=0.02)
    init_embedding(table, "none")
    assert table.std().item() == pytest.approx(1.0, rel=0.02)


@pytest.mark.parametrize("scheme", ["teu", "none", "ped"])
def test_model_embeds_tokens_and_positions_as_the_scheme_says(scan_task, scheme):
    model = _model(scan_task, f"model.embedding_scaling={scheme}")
    ids = torch.tensor([[3, 4, 5]])
    a, c = embedding_scales(scheme, 32)
    expected = a * model.source_embedding.weight[ids] + c * model.positions[:3]
    assert torch.allclose(model._embed(model.source_embedding, ids), expected)


def test_relative_attention_in_encoder_and_decoder_and_none_in_cross_attention(scan_task):
    model = _model(scan_task, "model.pos_encoding=relative")
    assert model.positions is None
    for block in model.encoder:
        assert isinstance(block.attn, RelativeSelfAttention) and not block.attn.causal
    for block in model.decoder:
        assert isinstance(block.attn, RelativeSelfAttention) and block.attn.causal
        assert not any("position" in n for n, _ in block.cross_attn.named_parameters())
    absolute = _model(scan_task)
    assert not any(isinstance(m, RelativeSelfAttention) for m in absolute.modules())


def test_relative_encoder_is_translation_invariant_and_absolute_is_not(scan_task):
    """Relative attention sees only distances: shifting the source right by padding
    on the left (masked) leaves the real positions' encodings unchanged."""
    source = torch.tensor([[5, 6, 7, 1]])
    shifted = torch.tensor([[0, 0, 5, 6, 7, 1]])
    mask = shifted != 0
    for pos, invariant in (("relative", True), ("sinusoidal", False)):
        model = _model(scan_task, f"model.pos_encoding={pos}")
        plain = model.encode(source, torch.ones_like(source, dtype=torch.bool))
        moved = model.encode(shifted, mask)[:, 2:]
        assert torch.allclose(plain, moved, atol=1e-5) == invariant


def test_encoder_sos_prepends_a_token_of_its_own_that_every_position_sees(scan_task):
    model = _model(scan_task, "model.encoder_sos=true", "model.pos_encoding=relative")
    plain = _model(scan_task, "model.pos_encoding=relative")
    assert model.source_embedding.num_embeddings == plain.source_embedding.num_embeddings + 1
    source = torch.tensor([[5, 6, 1, 0]])
    mask = source != 0
    ids, extended = model.with_sos(source, mask)
    assert ids.tolist() == [[len(scan_task.vocab), 5, 6, 1, 0]]
    assert extended.tolist() == [[True, True, True, True, False]]
    # the start token's embedding changes what the decoder predicts; padding does not
    target = torch.tensor([[1, 15, 16]])
    before = model(target, source_ids=source, source_mask=mask)
    with torch.no_grad():
        model.source_embedding.weight[-1] += 1.0
    assert not torch.allclose(before, model(target, source_ids=source, source_mask=mask))
    padded = torch.tensor([[5, 6, 1, 0, 0]])
    assert torch.allclose(model(target, source_ids=source, source_mask=mask),
                          model(target, source_ids=padded, source_mask=padded != 0), atol=1e-5)
    decoded = model.generate(source, mask, max_steps=4, eos_id=1)
    assert len(decoded) == 1 and len(decoded[0]) <= 4


def test_embedding_dropout_sets_the_input_dropout_apart_from_the_layers(scan_task):
    assert _model(scan_task, "model.dropout=0.3").drop.p == 0.3
    model = _model(scan_task, "model.dropout=0.3", "model.embedding_dropout=0.0")
    assert model.drop.p == 0.0
    assert any(getattr(m, "p", 0.0) == 0.3 for m in model.encoder.modules())


def test_decoder_is_causal(scan_task):
    model = _model(scan_task, "model.pos_encoding=relative")
    source = torch.tensor([[5, 6, 1]])
    a = model(torch.tensor([[1, 15, 16, 17]]), source_ids=source)
    b = model(torch.tensor([[1, 15, 16, 19]]), source_ids=source)
    assert torch.allclose(a[:, :3], b[:, :3], atol=1e-6)
    assert not torch.allclose(a[:, 3], b[:, 3])


def test_universal_shares_one_layer_and_has_fewer_parameters(scan_task):
    universal = _model(scan_task, "model.universal=true", "model.n_layers=3")
    standard = _model(scan_task, "model.n_layers=3")
    assert len(universal.encoder) == len(universal.decoder) == 1
    assert len(universal.layers(universal.encoder)) == 3
    assert universal.num_parameters() < standard.num_parameters()


def test_output_layer_is_tied_to_the_decoder_embedding(scan_task):
    model = _model(scan_task)
    names = [n for n, _ in model.named_parameters()]
    assert not any("head" in n for n in names)
    h = torch.randn(1, 1, 32)
    logits = model.final(h) @ model.target_embedding.weight.T + model.output_bias
    assert logits.shape[-1] == len(scan_task.vocab)


def test_batch_trains_eos_and_starts_the_decoder_with_it(scan_task):
    split = PairSplit(torch.tensor([[5, 1, 0], [6, 7, 1]]), torch.tensor([2, 3]),
                      torch.tensor([[15, 16, 17], [18, 0, 0]]), torch.tensor([3, 1]))
    batch = seq2seq_batch(split, eos_id=1)
    assert batch.input_ids.tolist() == [[1, 15, 16, 17], [1, 18, 0, 0]]
    assert batch.targets.tolist() == [[15, 16, 17, 1], [18, 1, IGNORE, IGNORE]]
    assert batch.source_mask.tolist() == [[True, True, False], [True, True, True]]


def test_length_groups_partition_the_draw_and_cut_padding(scan_task):
    train = scan_task.split("train")
    pool = torch.randint(len(train), (4 * 16,), generator=torch.Generator().manual_seed(0))
    # the parts a batch is chosen from are exactly the drawn pool, 16 each, in length order
    parts = length_sorted_parts(pool, train, 4)
    assert [len(p) for p in parts] == [16] * 4
    assert sorted(torch.cat(parts).tolist()) == sorted(pool.tolist())
    lengths = [train.target_lengths[p] for p in parts]
    assert all(int(a.max()) <= int(b.min()) for a, b in zip(lengths, lengths[1:]))
    assert int(lengths[0].min()) < int(lengths[-1].max())
    # so training batches hold less padding, and every example is drawn equally often
    padded, counts = {}, {}
    for groups in (1, 8):
        task = build_task(_config(f"task.length_groups={groups}").task)
        generator = torch.Generator().manual_seed(0)
        batches = [task.train_batch(64, generator) for _ in range(20)]
        padded[groups] = sum(int((b.targets == IGNORE).sum()) for b in batches)
        task.splits["train"] = task.splits["train"].subset(torch.arange(8))
        counts[groups] = Counter(tuple(row[row > 0].tolist()) for _ in range(4000)
                                 for row in task.train_batch(8, generator).source_ids)
    assert padded[8] < 0.5 * padded[1]
    for groups in (1, 8):  # 32000 draws of 8 examples (4000 each expected)
        frequency = torch.tensor(list(counts[groups].values())) / 4000
        assert len(frequency) == 8 and (frequency - 1).abs().max() < 0.15


def test_exact_match_requires_equal_length():
    hits = sequence_exact_match([[1, 2], [1, 2, 3], [1], [4, 5]], [[1, 2], [1, 2], [1, 2], [4, 6]])
    assert hits.tolist() == [True, False, False, False]


class _Scripted(torch.nn.Module):
    """Emits a fixed script of tokens, then EOS, then more junk tokens."""

    def __init__(self, script, eos):
        super().__init__()
        self.script, self.eos, self.vocab = script, eos, 8

    def with_sos(self, source_ids, source_mask):
        return source_ids, source_mask

    def encode(self, source_ids, source_mask):
        return source_ids

    def decode(self, ids, memory, mask):
        logits = torch.zeros(ids.shape[0], ids.shape[1], self.vocab)
        logits[:, :, 2] = 0.5  # the runner-up everywhere
        for t in range(ids.shape[1]):
            token = self.script[t] if t < len(self.script) else 5
            logits[:, t, token] = 1.0
        return logits


def test_greedy_decoding_stops_at_eos_and_oracle_ignores_it(scan_task):
    from sglab.models.seq2seq import Seq2SeqTransformer

    scripted = _Scripted([3, 4, 1, 6, 6], eos=1)
    source = torch.tensor([[2, 1]])
    out = Seq2SeqTransformer.generate(scripted, source, None, max_steps=5, eos_id=1)
    assert out == [[3, 4]]  # stops at EOS, which is not part of the output
    assert Seq2SeqTransformer.generate(scripted, source, None, 4, 1, suppress_eos=True) == \
        [[3, 4, 2, 6]]  # EOS suppressed: the runner-up is chosen instead
    never_ends = _Scripted([3, 4, 6, 6, 6, 6], eos=1)
    assert Seq2SeqTransformer.generate(never_ends, source, None, 3, 1) == [[3, 4, 6]]  # the cap


def test_one_pass_scorer_agrees_with_token_by_token_greedy_decoding(tmp_path):
    config = _config("train.steps=40", "train.batch_size=32", "train.eval_interval=40",
                     "train.lr=3e-3", "train.warmup_steps=0", "train.eval_max_examples=64",
                     "task.eval_oracle_length=true", "model.pos_encoding=relative",
                     "train.threads=1")
    Trainer(config, tmp_path, printer=None).run()
    from sglab.train.loop import load_trained

    _, task, model = load_trained(tmp_path / config.run_id())
    for name in ("iid_valid", "ood_test"):
        split = task.split(name).subset(scored_examples(len(task.split(name)), 32))
        metrics = evaluate(model, task, name, batch_size=16, max_examples=32)
        for oracle, key in ((False, "exact_match"), (True, "oracle_exact_match")):
            greedy = greedy_exact_match(model, task, name, 32, oracle_length=oracle)
            assert metrics[f"{name}/{key}"] == pytest.approx(float(greedy.float().mean()))
        # per example: greedy decoding follows the target up to the first position where
        # the teacher-forced argmax is wrong, and emits that argmax there
        batch = seq2seq_batch(split, task.eos_id)
        forced = model(batch.input_ids, **batch.model_inputs()).argmax(-1)
        steps = int(split.target_lengths.max()) + 1
        decoded = model.generate(batch.source_ids, batch.source_mask, steps, task.eos_id)
        # the evaluator's decoding stops a row after target length + 1 tokens
        cut = [out[: int(n) + 1] for out, n in zip(decoded, split.target_lengths)]
        assert greedy_decode(model, task, name, 16, 32) == cut
        first_errors = []
        for i, out in enumerate(decoded):
            n = int(split.target_lengths[i]) + 1
            target = batch.targets[i, :n].tolist()
            wrong = [t for t in range(n) if forced[i, t] != target[t]]
            k = wrong[0] if wrong else n
            first_errors.append(k)
            emitted = out + [task.eos_id]
            assert emitted[:k] == target[:k]
            if wrong:
                assert emitted[k] == int(forced[i, k])
        assert len(set(first_errors)) > 1  # the model is right for a varying number of steps


def test_training_lowers_the_loss_and_logs_every_eval_split(tmp_path):
    config = _config("train.steps=40", "train.batch_size=32", "train.eval_interval=20",
                     "train.lr=3e-3", "train.warmup_steps=0", "train.eval_max_examples=100",
                     "train.threads=1")
    summary = Trainer(config, tmp_path, printer=None).run()
    final = summary["final"]
    for key in ("iid_valid/exact_match", "iid_valid/loss", "ood_test/exact_match", "ood_test/loss"):
        assert key in final
    assert final["iid_valid/loss"] < math.log(21)  # below the uniform guess


def test_seq2seq_model_on_a_language_model_task_is_a_clear_error(tmp_path):
    config = build_run_config({"model": {"name": "seq2seq"}}, ["train.steps=1"])
    with pytest.raises(SglabError, match="sequence-to-sequence task"):
        Trainer(config, tmp_path, printer=None).run()
