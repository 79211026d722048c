"""The topic-model document generator and its masked-LM corruption."""

import math

import numpy as np
import pytest
import torch

from sglab.config import build_run_config
from sglab.errors import SglabError
from sglab.tasks import build_task
from sglab.tasks.base import IGNORE
from sglab.tasks.topics import FIRST_WORD, MASK_ID, PAD_ID, corrupt, sample_documents


def topics_config(*overrides):
    return build_run_config({"task": {"name": "topics"}, "model": {
        "attention_mask": "bidirectional"}}, list(overrides))


def test_vocabulary_words_belong_to_exactly_one_topic():
    task = build_task(topics_config("task.n_topics=7", "task.words_per_topic=5").task)
    assert len(task.vocab) == 7 * 5 + 2
    assert task.vocab.tokens[PAD_ID] == "<pad>" and task.vocab.tokens[MASK_ID] == "[MASK]"
    assert task.topic_of[PAD_ID] == -1 and task.topic_of[MASK_ID] == -1
    words = task.word_ids
    assert len(words) == 35 and len(set(words.tolist())) == 35
    for topic in range(7):
        members = words[task.topic_of[words] == topic]
        assert len(members) == 5
        # the word's name says its topic, and topics are consecutive disjoint blocks
        assert all(task.vocab.tokens[int(w)].startswith(f"t{topic}.") for w in members)
        assert members.tolist() == list(range(FIRST_WORD + 5 * topic, FIRST_WORD + 5 * topic + 5))


def test_documents_use_exactly_tau_topics_uniformly():
    cfg = topics_config("task.topics_per_document=3", "task.min_length=150",
                        "task.max_length=150").task
    task = build_task(cfg)
    docs = sample_documents(cfg, 2000, np.random.default_rng(0))
    topics = task.topic_of[docs.tokens]
    for i in range(len(docs)):
        used = set(topics[i].tolist())
        chosen = set(torch.nonzero(docs.mixtures[i]).flatten().tolist())
        assert len(chosen) == 3 and used == chosen  # P(a chosen topic unused) = (2/3)^150
    # each chosen topic gets 1/3 of the words; words of a topic are equally likely
    counts = torch.zeros(2000, 10)
    counts.scatter_add_(1, topics, torch.ones_like(topics, dtype=torch.float))
    shares = counts[docs.mixtures > 0] / 150
    assert shares.mean().item() == pytest.approx(1 / 3, abs=3 * math.sqrt(2 / 9 / 150 / 6000))
    word_counts = torch.bincount(docs.tokens.flatten(), minlength=len(task.vocab))[FIRST_WORD:]
    per_topic = word_counts.view(10, 10).float()
    within = per_topic / per_topic.sum(1, keepdim=True)  # share of each word in its topic
    assert (within - 0.1).abs().max() < 5 * math.sqrt(0.09 / per_topic.sum(1).min())
    # every topic is chosen equally often
    chosen_counts = (docs.mixtures > 0).sum(0).float()
    assert (chosen_counts - 600).abs().max() < 5 * math.sqrt(600 * 0.7)


def test_dirichlet_mixtures_and_lengths():
    cfg = topics_config("task.mixture=dirichlet", "task.dirichlet_alpha=0.1",
                        "task.min_length=100", "task.max_length=150").task
    task = build_task(cfg)
    docs = sample_documents(cfg, 3000, np.random.default_rng(1))
    assert torch.allclose(docs.mixtures.sum(1), torch.ones(3000), atol=1e-5)
    assert docs.lengths.min() >= 100 and docs.lengths.max() <= 150
    assert set(docs.lengths.tolist()) == set(range(100, 151))
    real = docs.real
    assert (docs.tokens[~real] == PAD_ID).all() and (docs.tokens[real] >= FIRST_WORD).all()
    # words follow the document's mixture: empirical topic shares track the mixture
    topics = task.topic_of[docs.tokens].clamp(min=0)
    counts = torch.zeros(3000, 10).scatter_add_(1, topics, real.float())
    shares = counts / docs.lengths[:, None]
    assert (shares - docs.mixtures).abs().mean() < 0.02
    # Dirichlet(0.1): sparse mixtures; on average 1/T each
    assert docs.mixtures.mean(0).sub(0.1).abs().max() < 0.02
    assert (docs.mixtures.max(1).values > 0.5).float().mean() > 0.6


def test_masking_rates_are_within_sampling_error():
    cfg = topics_config("task.min_length=100", "task.max_length=100",
                        "task.mask_probability=0.2", "task.keep_probability=0.1",
                        "task.random_probability=0.15").task
    task = build_task(cfg)
    docs = sample_documents(cfg, 4000, np.random.default_rng(2))
    batch = corrupt(cfg, docs, np.random.default_rng(3), len(task.vocab))
    selected = batch.targets != IGNORE
    n, k = selected.numel(), int(selected.sum())
    assert abs(k / n - 0.2) < 4 * math.sqrt(0.2 * 0.8 / n)
    # loss targets are the original words, and only at selected positions
    assert torch.equal(batch.targets[selected], docs.tokens[selected])
    assert torch.equal(batch.input_ids[~selected], docs.tokens[~selected])
    shown = batch.input_ids[selected]
    original = docs.tokens[selected]
    masked = (shown == MASK_ID).float().mean().item()
    kept = (shown == original).float().mean().item()
    replaced = ((shown != original) & (shown != MASK_ID)).float().mean().item()
    n_words = 100
    tol = lambda p: 4 * math.sqrt(p * (1 - p) / k)
    assert abs(masked - 0.75) < tol(0.75)
    # a random word equals the original one time in n_words
    assert abs(kept - (0.1 + 0.15 / n_words)) < tol(0.1)
    assert abs(replaced - 0.15 * (1 - 1 / n_words)) < tol(0.15)
    assert (shown >= MASK_ID).all()  # padding never appears as a replacement
    assert torch.equal(batch.key_padding_mask, docs.real)


def test_hidden_keys_random_vocabulary_and_at_least_one_selected():
    cfg = topics_config("task.min_length=1", "task.max_length=3", "task.mask_probability=0.01",
                        "task.hide_selected_keys=true").task
    task = build_task(cfg)
    docs = sample_documents(cfg, 500, np.random.default_rng(4))
    batch = corrupt(cfg, docs, np.random.default_rng(5), len(task.vocab))
    selected = batch.targets != IGNORE
    assert (selected.sum(1) >= 1).all()
    assert not (selected & ~docs.real).any()
    assert torch.equal(batch.key_padding_mask, docs.real & ~selected)
    cfg = topics_config("task.random_probability=0.9", "task.keep_probability=0.0",
                        "task.random_replacement=vocabulary").task
    docs = sample_documents(cfg, 400, np.random.default_rng(6))
    batch = corrupt(cfg, docs, np.random.default_rng(7), len(task.vocab))
    shown = batch.input_ids[batch.targets != IGNORE]
    assert (shown == MASK_ID).float().mean() > 0.1  # 10% [MASK] + random draws of [MASK]
    assert (shown != PAD_ID).all()


def test_batches_are_deterministic_and_held_out_documents_fixed():
    cfg = topics_config("task.min_length=20", "task.max_length=30").task
    a, b = build_task(cfg), build_task(cfg)
    assert torch.equal(a.documents["iid_test"].tokens, b.documents["iid_test"].tokens)
    assert torch.equal(a.masked["iid_test"].input_ids, b.masked["iid_test"].input_ids)
    x = a.train_batch(8, torch.Generator().manual_seed(3))
    y = b.train_batch(8, torch.Generator().manual_seed(3))
    assert torch.equal(x.input_ids, y.input_ids) and torch.equal(x.targets, y.targets)
    other = build_task(topics_config("task.min_length=20", "task.max_length=30",
                                     "task.data_seed=1").task)
    assert not torch.equal(other.documents["iid_test"].tokens, a.documents["iid_test"].tokens)
    fixed = build_task(topics_config("task.train_documents=50").task)
    batch = fixed.train_batch(64, torch.Generator().manual_seed(0))
    train_rows = {tuple(r.tolist()) for r in fixed.documents["train"].tokens}
    assert all(tuple(r.tolist()) in train_rows for r in
               torch.where(batch.targets != IGNORE, batch.targets, batch.input_ids))


def test_config_errors_are_clear():
    with pytest.raises(SglabError, match="topics_per_document=11 exceeds n_topics=10"):
        topics_config("task.topics_per_document=11")
    with pytest.raises(SglabError, match="min_length=50 exceeds max_length=40"):
        topics_config("task.min_length=50", "task.max_length=40")
    with pytest.raises(SglabError, match="must be at most 1"):
        topics_config("task.keep_probability=0.6", "task.random_probability=0.6")
    task = build_task(topics_config().task)
    with pytest.raises(SglabError, match="attention_mask=bidirectional"):
        task.check_model(build_run_config({}, []).model)
