"""Readers for the real language-modelling corpora of thesis Ch. 7: Enwik8 and WikiText-103.

Neither is bundled or downloaded: both are read from local files, and :func:`require_corpus`
names the missing ones before anything is trained or written.

* ``enwik8``: the first 10^8 bytes of an English Wikipedia XML dump (Hutter Prize), read as
  bytes. ``task.path`` is the file or a directory holding a file named ``enwik8``. Its size
  must be exactly 100,000,000 bytes unless ``task.sha256`` is given (then the checksum
  decides). Standard split by exact byte counts (:func:`enwik8_bounds`): the first 90M bytes
  ``train``, the next 5M ``iid_valid``, the last 5M ``iid_test``.
* ``wikitext103``: the word-level WikiText-103 release, ``wiki.{train,valid,test}.tokens`` in
  ``task.data_dir``; the three files are the three splits. Tokens are the pieces of a
  SentencePiece unigram model with ``task.vocab_size`` pieces trained on the train file
  (thesis Ch. 7: 8,000), on at most ``task.tokenizer_sentences`` (500,000) of its lines drawn
  at random: time and memory grow with the lines read (a synthetic file of 200,000 lines,
  106 MB, took 40 s on one core and 2 GB of memory). Every line becomes its pieces followed
  by the end-of-line piece ``</s>``. The sglab id of piece ``i`` is ``i + 1`` (id 0 stays
  padding). ``SHA256SUMS`` in the data directory is checked as for the other published data
  sets (written on first load).

The trained tokenizer and the encoded splits are cached under ``task.cache_dir`` (default
``$SGLAB_CACHE_DIR`` or ``~/.cache/sglab``) in ``wikitext103/<key>/``; the key hashes the
three files' sizes and modification times and the tokenizer settings. Every file there is
written atomically and the build holds a lock, so a killed run leaves no half file and
concurrent runs build it once.
"""

from __future__ import annotations

import fcntl
import importlib
import io
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from sglab.errors import SglabError
from sglab.io import atomic_write_bytes, atomic_write_json, sha256_hex
from sglab.tasks.published import Source, fetch, missing_files

ENWIK8_BYTES = 100_000_000
ENWIK8_WHERE = ("the Hutter Prize file enwik8 (unzip enwik8.zip from "
                "mattmahoney.net/dc/textdata.html)")
WIKITEXT_FILES = {"train": "wiki.train.tokens", "iid_valid": "wiki.valid.tokens",
                  "iid_test": "wiki.test.tokens"}
WIKITEXT_WHERE = ("the WikiText-103 word-level archive wikitext-103-v1.zip (Merity et al. "
                  "2016; the 'wikitext-103-v1' configuration of the WikiText data set)")
CACHE_FORMAT = 1  # bump when the cached files change meaning
UNK_ID, EOS_ID = 0, 1  # SentencePiece ids; no BOS or padding piece


# ----------------------------------------------------------------------------- enwik8


def enwik8_file(path: str | Path, sha256: str | None = None) -> Path:
    """The enwik8 file that ``task.path`` names, its size checked (not its content): an
    error naming the file unless it exists and, without ``sha256``, has 10^8 bytes."""
    file = Path(path)
    if file.is_dir():
        file = file / "enwik8"
    if not file.is_file():
        raise SglabError(f"task.path={path}: no enwik8 file there (give the file, or a directory "
                         f"holding a file named enwik8); get {ENWIK8_WHERE}")
    size = file.stat().st_size
    if sha256 is None and size != ENWIK8_BYTES:
        raise SglabError(f"{file} has {size:,} bytes, but enwik8 has {ENWIK8_BYTES:,}: point "
                         f"task.path at {ENWIK8_WHERE}, or set task.sha256 to the file's "
                         "SHA-256 to use another file")
    return file


def enwik8_bounds(n: int) -> tuple[int, int]:
    """Ends of ``train`` and ``iid_valid`` in a corpus of ``n`` bytes: the last two
    twentieths (``n // 20`` bytes each) are ``iid_valid`` and ``iid_test``; for enwik8
    exactly 90,000,000 and 95,000,000."""
    held_out = n // 20
    return n - 2 * held_out, n - held_out


# ----------------------------------------------------------------------------- WikiText-103


def require_wikitext(data_dir: str | Path) -> Path:
    """``data_dir`` as a path; an error naming every missing WikiText-103 file."""
    missing = missing_files(data_dir, list(WIKITEXT_FILES.values()))
    if missing:
        raise SglabError(
            f"task.data_dir {str(data_dir)!r} lacks {len(missing)} WikiText-103 file(s): "
            f"{', '.join(missing)}. Unpack {WIKITEXT_WHERE} and point task.data_dir at the "
            "directory holding wiki.train.tokens, wiki.valid.tokens and wiki.test.tokens "
            "(--set task.data_dir=PATH)")
    return Path(data_dir)


def require_sentencepiece():
    try:
        return importlib.import_module("sentencepiece")
    except ImportError:
        raise SglabError("task.corpus=wikitext103 needs the package sentencepiece: install the "
                         "extra with `pip install sglab[text]`") from None


def cache_root(cache_dir: str | Path | None = None) -> Path:
    """``cache_dir``, else ``$SGLAB_CACHE_DIR``, else ``~/.cache/sglab``."""
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    return Path(os.environ.get("SGLAB_CACHE_DIR") or Path.home() / ".cache" / "sglab").expanduser()


def file_stats(directory: Path) -> tuple[tuple[str, int, int], ...]:
    """(name, size, modification time in ns) of each WikiText-103 file."""
    stats = []
    for name in WIKITEXT_FILES.values():
        stat = (directory / name).stat()
        stats.append((name, stat.st_size, stat.st_mtime_ns))
    return tuple(stats)


def cache_key(stats: tuple[tuple[str, int, int], ...], vocab_size: int, sentences: int) -> str:
    """Names the cache entry: the input files' sizes and mtimes plus every tokenizer setting."""
    settings = {"format": CACHE_FORMAT, "files": [list(s) for s in stats], "model": "unigram",
                "vocab_size": vocab_size, "sentences": sentences}
    return sha256_hex(json.dumps(settings, sort_keys=True).encode())[:16]


def train_tokenizer(train_file: Path, vocab_size: int, sentences: int) -> bytes:
    """A SentencePiece unigram model (serialised) of ``vocab_size`` pieces trained on at most
    ``sentences`` lines of ``train_file``, drawn at random with a fixed seed."""
    spm = require_sentencepiece()
    spm.set_random_generator_seed(0)
    model = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            input=str(train_file), model_writer=model, model_type="unigram",
            vocab_size=vocab_size, input_sentence_size=sentences, shuffle_input_sentence=True,
            unk_id=UNK_ID, eos_id=EOS_ID, bos_id=-1, pad_id=-1, num_threads=os.cpu_count() or 1,
            minloglevel=2)
    except RuntimeError as error:
        # "INTERNAL: src/trainer_interface.cc(744) [...] Vocabulary size too high (...)."
        message = (str(error).splitlines() or [type(error).__name__])[0]
        message = message.rsplit("] ", 1)[-1].strip().rstrip(".")
        raise SglabError(f"SentencePiece could not train on {train_file} with "
                         f"task.vocab_size={vocab_size}: {message}; check the file, or lower "
                         "task.vocab_size") from None
    return model.getvalue()


def encode_file(processor, path: Path, chunk_lines: int = 20_000) -> np.ndarray:
    """Every line of ``path`` as its pieces and ``</s>``, shifted to sglab ids (piece + 1)."""
    dtype = np.int16 if processor.get_piece_size() < np.iinfo(np.int16).max else np.int32
    parts, lines = [], []

    def flush():
        for ids in processor.encode(lines, add_eos=True):
            parts.append(np.asarray(ids, dtype=np.int32))
        lines.clear()

    with path.open(encoding="utf-8") as handle:
        for line in handle:
            lines.append(line.strip())
            if len(lines) == chunk_lines:
                flush()
    flush()
    return (np.concatenate(parts) + 1 if parts else np.zeros(0, np.int32)).astype(dtype)


def _write_array(path: Path, array: np.ndarray) -> None:
    atomic_write_bytes(path, lambda handle: np.save(handle, array, allow_pickle=False))


@dataclass
class WikiText:
    """The tokenizer and the three splits as sglab ids (``processor`` is SentencePiece's)."""

    processor: Any
    splits: dict[str, torch.Tensor]
    directory: Path  # the cache entry
    trained: bool  # whether this load trained the tokenizer (False: read from the cache)

    @property
    def pieces(self) -> list[str]:
        return [self.processor.id_to_piece(i) for i in range(self.processor.get_piece_size())]

    def encode(self, text: str) -> list[int]:
        return [i + 1 for i in self.processor.encode(text)]

    def decode(self, ids) -> str:
        return self.processor.decode([int(i) - 1 for i in ids if int(i) > 0])


def load_wikitext103(data_dir: str | Path, vocab_size: int = 8000, sentences: int = 500_000,
                     cache_dir: str | Path | None = None) -> WikiText:
    """The tokenizer and encoded splits, from the cache or built (and cached) now."""
    directory = require_wikitext(data_dir)
    spm = require_sentencepiece()
    fetch(directory, Source(tuple(WIKITEXT_FILES.values()), None, WIKITEXT_WHERE),
          printer=lambda _: None)
    stats = file_stats(directory)
    entry = cache_root(cache_dir) / "wikitext103" / cache_key(stats, vocab_size, sentences)
    model_file = entry / "tokenizer.model"
    arrays = {split: entry / f"{split}.npy" for split in WIKITEXT_FILES}
    trained = False
    entry.parent.mkdir(parents=True, exist_ok=True)  # the entry appears with its first file
    with (entry.parent / f"{entry.name}.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a second run waits here, then finds the cache
        if not model_file.is_file():
            started = time.perf_counter()
            model = train_tokenizer(directory / WIKITEXT_FILES["train"], vocab_size, sentences)
            atomic_write_bytes(model_file, lambda handle: handle.write(model))
            atomic_write_json(entry / "tokenizer.json", {
                "data_dir": str(directory.resolve()), "files": stats,
                "vocab_size": vocab_size, "sentences": sentences,
                "seconds": round(time.perf_counter() - started, 1)})
            trained = True
        processor = spm.SentencePieceProcessor(model_proto=model_file.read_bytes())
        for split, path in arrays.items():
            if not path.is_file():
                _write_array(path, encode_file(processor, directory / WIKITEXT_FILES[split]))
    splits = {split: torch.from_numpy(np.load(path, allow_pickle=False))
              for split, path in arrays.items()}
    return WikiText(processor, splits, entry, trained)


# ----------------------------------------------------------------------------- experiments


def require_corpus(corpus: str, path: str | None = None, sha256: str | None = None,
                   data_dir: str | None = None) -> None:
    """An error naming the missing files of a local corpus (nothing is read or written)."""
    if corpus == "enwik8":
        enwik8_file(path, sha256)
    elif corpus == "wikitext103":
        require_wikitext(data_dir)


__all__ = ["ENWIK8_BYTES", "WIKITEXT_FILES", "WikiText", "cache_key", "cache_root",
           "encode_file", "enwik8_bounds", "enwik8_file", "file_stats", "load_wikitext103",
           "require_corpus", "require_sentencepiece", "require_wikitext", "train_tokenizer"]
