"""LDA on real text and the topic words the pretrained-model statistics are measured on.

:func:`fit_lda` fits gensim's ``LdaModel`` on passages (alphabetic tokens, gensim's
``STOPWORDS`` removed, ``filter_extremes(no_below=5, no_above=0.3)``; word counts and 6
passes by default, tf-idf weights and ``passes=1`` -- the authors' code -- as options)
and caches the topic-word matrix. :func:`select_topic_words` keeps, per topic, the
``int(V * f) + 1`` words of highest P(word | topic) (the seed's "0.05%, 0.1%, 0.2% of all
words") and resolves words listed under several topics:

* ``none``: such words are dropped (no overlap, closest to the theory);
* ``first_topic``: kept under the first such topic by index (the authors' code);
* ``most_probable``: kept under the topic where P(word | topic) is highest;
* ``allowed``: kept under every such topic (two words are then same-topic when they share
  a topic, different-topic when they share none).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sglab.analysis.corpus import require_gensim
from sglab.errors import SglabError

OVERLAP_MODES = ("none", "first_topic", "most_probable", "allowed")


@dataclass
class TopicModel:
    """P(word | topic) (topics x V) over the dictionary ``words``."""

    topic_word: np.ndarray
    words: list[str]
    seconds: float
    cached: bool

    @property
    def vocabulary_size(self) -> int:
        return len(self.words)


@dataclass
class TopicWords:
    """Selected words and their topic membership (words x topics, boolean)."""

    words: list[str]
    membership: np.ndarray
    per_topic: int
    dropped_overlap: int = 0
    dropped_split: int = 0

    def labels(self) -> np.ndarray:
        """One topic per word (the first it belongs to), for ordering and colouring."""
        return self.membership.argmax(1)

    def topics_with_pairs(self) -> int:
        """How many topics have at least two words (a same-topic pair)."""
        return int((self.membership.sum(0) >= 2).sum())

    def subset(self, keep: list[bool] | np.ndarray) -> TopicWords:
        keep = np.asarray(keep, dtype=bool)
        return TopicWords([w for w, k in zip(self.words, keep) if k], self.membership[keep],
                          self.per_topic, self.dropped_overlap,
                          self.dropped_split + int((~keep).sum()))


def _cache_key(passages: list[list[str]], settings: dict) -> str:
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode())
    for passage in passages:
        digest.update(" ".join(passage).encode())
        digest.update(b"\n")
    return digest.hexdigest()[:20]


def fit_lda(passages: list[list[str]], n_topics: int, passes: int = 6, weighting: str = "counts",
            seed: int = 0, no_below: int = 5, no_above: float = 0.3, keep_n: int | None = 100_000,
            cache_dir: str | Path | None = None) -> TopicModel:
    """gensim ``LdaModel`` on the passages (each passage one LDA document); the topic-word
    matrix is cached under ``cache_dir`` (keyed by the passages and the settings)."""
    import time

    require_gensim()
    settings = {"n_topics": n_topics, "passes": passes, "weighting": weighting, "seed": seed,
                "no_below": no_below, "no_above": no_above, "keep_n": keep_n}
    target = Path(cache_dir) / f"lda-{_cache_key(passages, settings)}" if cache_dir else None
    if target is not None and (target / "words.json").is_file():
        words = json.loads((target / "words.json").read_text())
        return TopicModel(np.load(target / "topic_word.npy"), words["words"], words["seconds"],
                          True)
    from gensim.corpora import Dictionary
    from gensim.models import LdaModel, TfidfModel
    from gensim.parsing.preprocessing import STOPWORDS

    started = time.perf_counter()
    texts = [[t for t in p if t.isalpha() and t not in STOPWORDS] for p in passages]
    dictionary = Dictionary(texts)
    dictionary.filter_extremes(no_below=no_below, no_above=no_above, keep_n=keep_n)
    if len(dictionary) < n_topics:
        raise SglabError(f"the corpus leaves {len(dictionary)} words after filtering (no_below="
                         f"{no_below}, no_above={no_above}), fewer than lda.n_topics={n_topics}; "
                         "use a larger corpus or fewer topics")
    bows = [dictionary.doc2bow(t) for t in texts]
    if weighting == "tfidf":
        bows = list(TfidfModel(bows)[bows])
    lda = LdaModel(bows, num_topics=n_topics, id2word=dictionary, passes=passes,
                   random_state=seed)
    topic_word = lda.get_topics()
    words = [dictionary[i] for i in range(len(dictionary))]
    seconds = time.perf_counter() - started
    if target is not None:  # atomic: a complete directory or none
        target.parent.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(dir=target.parent, prefix=".lda-"))
        np.save(scratch / "topic_word.npy", topic_word)
        (scratch / "words.json").write_text(json.dumps({"words": words, "seconds": seconds}))
        try:
            os.rename(scratch, target)
        except OSError:  # another process wrote it first
            shutil.rmtree(scratch, ignore_errors=True)
    return TopicModel(topic_word, words, seconds, False)


def words_per_topic(vocabulary_size: int, fraction: float) -> int:
    """int(V * f) + 1: the seed's "f of all words" per topic, at least one."""
    return int(vocabulary_size * fraction) + 1


def select_topic_words(topic_word: np.ndarray, words: list[str], fraction: float,
                       overlap: str = "none") -> TopicWords:
    """The top ``int(V * f) + 1`` words of every topic, overlaps resolved by ``overlap``."""
    if overlap not in OVERLAP_MODES:
        raise ValueError(f"overlap must be one of {OVERLAP_MODES}, not {overlap!r}")
    topic_word = np.asarray(topic_word)
    n_topics, size = topic_word.shape
    k = words_per_topic(size, fraction)
    # a stable sort: equal probabilities keep dictionary order
    top = np.argsort(-topic_word, axis=1, kind="stable")[:, :k]
    listed = np.zeros((size, n_topics), dtype=bool)
    for topic in range(n_topics):
        listed[top[topic], topic] = True
    chosen = np.flatnonzero(listed.any(1))
    shared = listed[chosen].sum(1) > 1
    membership = listed[chosen].copy()
    if overlap == "none":
        membership, chosen = membership[~shared], chosen[~shared]
    elif overlap == "first_topic":
        first = membership.argmax(1)
        membership[:] = False
        membership[np.arange(len(chosen)), first] = True
    elif overlap == "most_probable":
        scores = np.where(membership, topic_word[:, chosen].T, -np.inf)
        best = scores.argmax(1)
        membership[:] = False
        membership[np.arange(len(chosen)), best] = True
    # words in topic order (first topic, then probability), for topic-ordered figures
    first = membership.argmax(1)
    order = np.lexsort((-topic_word[first, chosen], first))
    return TopicWords([words[i] for i in chosen[order]], membership[order], k,
                      dropped_overlap=int(shared.sum()) if overlap == "none" else 0)
