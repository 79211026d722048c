"""Topic-model documents for masked language modelling (Li, Li & Risteski, ICML 2023).

Vocabulary: ``<pad>`` = 0, ``[MASK]`` = 1, then T * v words in consecutive disjoint
blocks: word j of topic t has id ``2 + t * v + j`` (named ``t{t}.w{j}``). There are
no start/end tokens.

Documents (``mixture``):
  uniform_subset  the generator of the theory: each document draws tau distinct
                  topics uniformly; each of its N words picks one of them uniformly,
                  then one of that topic's v words uniformly.
  dirichlet       ordinary LDA: topic proportions ~ Dirichlet(alpha, ..., alpha), each
                  word picks a topic from them, then a word of that topic uniformly.
Lengths are uniform in [min_length, max_length].

Masked-LM corruption: each position is selected with probability p_m (at least one
per document if ``at_least_one_selected``); a selected position shows its own word
with probability p_c, a random word with probability p_r and ``[MASK]`` otherwise.
The loss is taken at selected positions only (targets = the original words). With
``hide_selected_keys`` no query may attend to a selected position (the behaviour of
the authors' code; then p_c and p_r cannot reach a one-layer model's output).

Training documents are drawn afresh for every batch (``train_documents: null``, the
population objective of the theory) or sampled from a fixed set; masks are drawn
afresh for every batch. The held-out ``iid_test`` documents and their masks are fixed by
``data_seed``. Generation is vectorised numpy, seeded from the trainer's torch
generator so that a resumed run replays the same batches.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np
import torch
from pydantic import Field, model_validator

from sglab import registry
from sglab.config import TaskConfig, check_switches
from sglab.errors import SglabError
from sglab.tasks.base import IGNORE, Batch, Task, Vocabulary, scored_batches, target_loss

PAD_ID, MASK_ID, FIRST_WORD = 0, 1, 2


class TopicsConfig(TaskConfig):
    name: Literal["topics"] = "topics"
    n_topics: int = Field(10, ge=2, description="T: number of topics.")
    words_per_topic: int = Field(10, ge=1, description="v: words per topic (disjoint topics).")
    mixture: Literal["uniform_subset", "dirichlet"] = Field(
        "uniform_subset", description="uniform_subset: tau distinct topics per document, each word "
                                      "from one of them uniformly (theory); dirichlet: LDA.")
    topics_per_document: int = Field(2, ge=1, description="tau (uniform_subset only).")
    dirichlet_alpha: float = Field(0.1, gt=0, description="Dirichlet parameter (dirichlet only).")
    min_length: int = Field(100, ge=1, description="Shortest document (words).")
    max_length: int = Field(100, ge=1, description="Longest document (words).")
    mask_probability: float = Field(0.15, gt=0, le=1, description="p_m: fraction of positions "
                                                                   "selected for the loss.")
    keep_probability: float = Field(0.1, ge=0, le=1, description="p_c: a selected position keeps "
                                                                  "its word.")
    random_probability: float = Field(0.1, ge=0, le=1, description="p_r: a selected position "
                                                                    "shows a random word.")
    random_replacement: Literal["words", "vocabulary"] = Field(
        "words", description="Random replacements are words, or any non-padding token "
                             "([MASK] included, as in the authors' code).")
    at_least_one_selected: bool = Field(True, description="Select one position in a document "
                                                          "where sampling selected none.")
    hide_selected_keys: bool = Field(False, description="No query attends to a selected position "
                                                        "(the authors' code).")
    train_documents: int | None = Field(
        None, ge=1, description="Size of a fixed training set (null = fresh documents per batch).")
    eval_documents: int = Field(500, ge=1, description="Held-out test documents.")

    @model_validator(mode="after")
    def _check(self):
        if self.min_length > self.max_length:
            raise ValueError(f"min_length={self.min_length} exceeds max_length={self.max_length}")
        if self.mixture == "uniform_subset" and self.topics_per_document > self.n_topics:
            raise ValueError(f"topics_per_document={self.topics_per_document} exceeds "
                             f"n_topics={self.n_topics}")
        if self.keep_probability + self.random_probability > 1 + 1e-12:
            raise ValueError("keep_probability + random_probability must be at most 1 "
                             f"(got {self.keep_probability} + {self.random_probability})")
        return self

    @model_validator(mode="after")
    def _check_switches(self):
        check_switches(self, {
            "topics_per_document": (self.mixture == "uniform_subset", "mixture=uniform_subset"),
            "dirichlet_alpha": (self.mixture == "dirichlet", "mixture=dirichlet"),
        })
        return self

    split_metrics: ClassVar[tuple[str, ...]] = ("loss", "squared_loss", "accuracy", "in_document")

    def evaluation_splits(self) -> list[str]:
        return ["iid_test"]


@dataclass
class Documents:
    """Right-padded documents (``tokens``, 0 = padding), their lengths and topic mixtures."""

    tokens: torch.Tensor
    lengths: torch.Tensor
    mixtures: torch.Tensor  # (n, T) topic proportions each document was drawn from

    def __len__(self) -> int:
        return self.tokens.shape[0]

    @property
    def real(self) -> torch.Tensor:
        return torch.arange(self.tokens.shape[1])[None, :] < self.lengths[:, None]


def sample_documents(config: TopicsConfig, n: int, rng: np.random.Generator) -> Documents:
    """``n`` documents from the topic model (vectorised)."""
    T, v, width = config.n_topics, config.words_per_topic, config.max_length
    lengths = rng.integers(config.min_length, config.max_length + 1, size=n)
    if config.mixture == "uniform_subset":
        tau = config.topics_per_document
        chosen = np.argsort(rng.random((n, T)), axis=1)[:, :tau]  # tau distinct topics
        mixtures = np.zeros((n, T))
        np.put_along_axis(mixtures, chosen, 1.0 / tau, axis=1)
        pick = rng.integers(0, tau, size=(n, width))
        topics = np.take_along_axis(chosen, pick, axis=1)
    else:
        mixtures = rng.dirichlet(np.full(T, config.dirichlet_alpha), size=n)
        cdf = np.cumsum(mixtures, axis=1)
        u = rng.random((n, width)) * cdf[:, -1:]
        topics = np.minimum((u[:, :, None] >= cdf[:, None, :]).sum(-1), T - 1)
    words = rng.integers(0, v, size=(n, width))
    tokens = FIRST_WORD + topics * v + words
    tokens[np.arange(width)[None, :] >= lengths[:, None]] = PAD_ID
    return Documents(torch.from_numpy(tokens.astype(np.int64)), torch.from_numpy(lengths),
                     torch.from_numpy(mixtures).float())


def corrupt(config: TopicsConfig, docs: Documents, rng: np.random.Generator,
            vocab_size: int) -> Batch:
    """Masked-LM inputs and targets for ``docs`` (targets = IGNORE at unselected positions)."""
    tokens = docs.tokens.numpy()
    n, width = tokens.shape
    real = docs.real.numpy()
    selected = (rng.random((n, width)) < config.mask_probability) & real
    if config.at_least_one_selected:
        none = ~selected.any(1)
        position = np.minimum((rng.random(n) * docs.lengths.numpy()).astype(np.int64), width - 1)
        selected[np.flatnonzero(none), position[none]] = True
    action = rng.random((n, width))
    p_c, p_r = config.keep_probability, config.random_probability
    randomize = selected & (action >= p_c) & (action < p_c + p_r)
    masked = selected & (action >= p_c + p_r)
    low = FIRST_WORD if config.random_replacement == "words" else MASK_ID
    random_tokens = rng.integers(low, vocab_size, size=(n, width))
    inputs = np.where(randomize, random_tokens, tokens)
    inputs = np.where(masked, MASK_ID, inputs)
    targets = np.where(selected, tokens, IGNORE)
    keys = real & ~selected if config.hide_selected_keys else real
    return Batch(torch.from_numpy(inputs), torch.from_numpy(targets), torch.from_numpy(keys))


class TopicsTask(Task):
    """Masked language modelling on topic-model documents; scored on held-out documents."""

    eval_splits = ["iid_test"]

    def __init__(self, config: TopicsConfig):
        self.config = config
        T, v = config.n_topics, config.words_per_topic
        words = [f"t{t}.w{j}" for t in range(T) for j in range(v)]
        self.vocab = Vocabulary([Vocabulary.PAD, "[MASK]", *words])
        self.topic_of = torch.full((len(self.vocab),), -1, dtype=torch.long)
        self.topic_of[FIRST_WORD:] = torch.arange(T * v) // v
        self.word_ids = torch.arange(FIRST_WORD, FIRST_WORD + T * v)
        seed = config.data_seed
        self.documents = {"iid_test": sample_documents(config, config.eval_documents,
                                                       np.random.default_rng([seed, 1]))}
        self.masked = {"iid_test": corrupt(config, self.documents["iid_test"],
                                           np.random.default_rng([seed, 2]), len(self.vocab))}
        if config.train_documents is not None:
            self.documents["train"] = sample_documents(config, config.train_documents,
                                                       np.random.default_rng([seed, 0]))

    @property
    def max_length(self) -> int:
        return self.config.max_length

    def check_model(self, model_config) -> None:
        if getattr(model_config, "attention_mask", "bidirectional") != "bidirectional":
            raise SglabError("task topics is masked language modelling: every position sees the "
                             "whole document; set model.attention_mask=bidirectional")

    def theoretical_gap(self) -> float:
        """1 / (v (1 - (1 - p_c) p_m)): the same-topic minus different-topic gap of the
        optimal W_V (or E = W_E^T W_E) with uniform attention (Li et al. 2023, Thms. 1-2)."""
        c = self.config
        return 1.0 / (c.words_per_topic * (1 - (1 - c.keep_probability) * c.mask_probability))

    def train_batch(self, batch_size: int, generator: torch.Generator) -> Batch:
        seed = int(torch.randint(0, 2**62, (1,), generator=generator))
        rng = np.random.default_rng(seed)
        if self.config.train_documents is None:
            docs = sample_documents(self.config, batch_size, rng)
        else:
            train = self.documents["train"]
            index = torch.from_numpy(rng.integers(0, len(train), size=batch_size))
            lengths = train.lengths[index]
            width = int(lengths.max())
            docs = Documents(train.tokens[index, :width], lengths, train.mixtures[index])
        return corrupt(self.config, docs, rng, len(self.vocab))

    def eval_batches(self, split: str, batch_size: int,
                     max_examples: int | None = None) -> Iterator[Batch]:
        """The held-out documents with their fixed masks (``masked``), each with its
        uncorrupted tokens (``examples["documents"]``)."""
        if split not in self.masked:
            raise SglabError(f"task topics has no evaluation split {split!r}; splits: iid_test")
        data, docs = self.masked[split], self.documents[split]
        for rows in scored_batches(len(docs), batch_size, max_examples, spread=False):
            yield Batch(data.input_ids[rows], data.targets[rows], data.key_padding_mask[rows],
                        examples={"documents": docs.tokens[rows]})

    def score(self, logits: torch.Tensor, batch: Batch) -> dict:
        """Loss (cross-entropy and squared) and accuracy summed over the selected positions;
        ``in_document``: the predicted word occurs in the (uncorrupted) document."""
        targets = batch.targets
        scored = targets != IGNORE
        predicted = logits.argmax(-1)
        present = torch.zeros(logits.shape[0], logits.shape[-1], dtype=torch.bool,
                              device=logits.device)
        present.scatter_(1, batch.examples["documents"], True)
        present[:, PAD_ID] = False
        return {"loss": float(target_loss(logits, targets, reduction="sum")),
                "squared_loss": float(target_loss(logits, targets, "squared", reduction="sum")),
                "accuracy": float((predicted == targets)[scored].sum()),
                "in_document": float(present.gather(1, predicted)[scored].sum()),
                "count": int(scored.sum())}

    def finalize(self, split: str, totals: dict) -> dict[str, float]:
        """The sums of :meth:`score` per selected position."""
        count = max(totals["count"], 1)
        return {f"{split}/{k}": totals[k] / count
                for k in ("loss", "squared_loss", "accuracy", "in_document")}


@registry.register("task", "topics", TopicsConfig,
                   "masked LM on topic-model (LDA) documents (Li, Li & Risteski 2023)")
def make_topics(config: TopicsConfig) -> TopicsTask:
    return TopicsTask(config)


def fresh_masked_batch(task: TopicsTask, n_documents: int, seed: int) -> Batch:
    """``n_documents`` new documents, corrupted as in training (a probe for fits that
    need many more documents than a run's evaluation split)."""
    rng = np.random.default_rng(seed)
    docs = sample_documents(task.config, n_documents, rng)
    return corrupt(task.config, docs, rng, len(task.vocab))


def word_topics(task: TopicsTask) -> np.ndarray:
    """The topic of each word, in the order of ``task.word_ids``."""
    return task.topic_of[task.word_ids].numpy()
