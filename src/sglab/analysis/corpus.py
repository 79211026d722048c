"""Real-text corpora for the pretrained-model topic analysis: readers and passages.

A corpus is read from ``path``:

* a directory of ``.txt`` files (one document each),
* a ``.txt`` file whose documents are separated by blank lines,
* a ``.jsonl`` file (one JSON object per line, its ``text`` field),
* a MediaWiki dump (``.xml`` or ``.xml.bz2``): gensim ``extract_pages`` on namespace 0,
  redirects dropped, markup removed with ``filter_wiki``, articles of at least 50 tokens
  kept (the rule of gensim's ``WikiCorpus``).

Every document is tokenized with gensim's ``wikicorpus.tokenize`` (lower case, alphabetic
tokens of 2-15 characters) and cut into passages of 120 consecutive tokens; a last part
is kept when it has at least 20. ``wiki-excerpt`` names the shortened English Wikipedia
dump that ships with gensim's test data (no download).
"""

from __future__ import annotations

import bz2
import json
from dataclasses import dataclass
from pathlib import Path

from sglab.errors import SglabError

WIKI_EXCERPT = "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
EXTRA_HINT = 'install the optional extra: pip install "sglab[pretrained]"'


def require_gensim():
    """The gensim module, or an SglabError saying how to install it."""
    try:
        import gensim
    except ImportError:
        raise SglabError(f"reading a text corpus and fitting LDA need gensim; {EXTRA_HINT}") from None
    return gensim


@dataclass
class Corpus:
    """Passages of a corpus (lists of tokens) and where they came from."""

    source: str
    documents: int
    tokens: int
    passages: list[list[str]]

    def describe(self) -> str:
        return (f"{self.source}: {self.documents:,} documents, {self.tokens:,} tokens, "
                f"{len(self.passages):,} passages")


def wiki_excerpt_path() -> Path:
    """The Wikipedia excerpt shipped with gensim (``gensim.test.utils.datapath``)."""
    require_gensim()
    from gensim.test.utils import datapath

    path = Path(datapath(WIKI_EXCERPT))
    if not path.is_file():
        raise SglabError(f"gensim's test data has no {WIKI_EXCERPT}; reinstall gensim>=4.4 "
                         "or set corpus.path to a local corpus")
    return path


def tokenize(text: str) -> list[str]:
    """gensim's Wikipedia tokenizer: lower-case alphabetic tokens of 2-15 characters."""
    require_gensim()
    from gensim.corpora.wikicorpus import tokenize as wiki_tokenize

    return wiki_tokenize(text)


def read_wiki_dump(path: Path, min_tokens: int = 50) -> list[list[str]]:
    """Tokenized articles of a MediaWiki dump: namespace 0, no redirects, markup removed,
    at least ``min_tokens`` tokens (as gensim's ``WikiCorpus``)."""
    require_gensim()
    from gensim.corpora.wikicorpus import IGNORED_NAMESPACES, extract_pages, filter_wiki

    opener = bz2.open if path.name.endswith(".bz2") else open
    articles = []
    try:
        with opener(path, "rb") as handle:
            for title, text, _ in extract_pages(handle, filter_namespaces=("0",)):
                if text.lstrip().lower().startswith("#redirect"):
                    continue
                if any(title.startswith(namespace + ":") for namespace in IGNORED_NAMESPACES):
                    continue
                tokens = tokenize(filter_wiki(text))
                if len(tokens) >= min_tokens:
                    articles.append(tokens)
    except (OSError, EOFError, SyntaxError) as exc:  # bad bz2 data, XML ParseError
        raise SglabError(f"corpus {str(path)!r} is not a readable MediaWiki dump ({exc})") from None
    return articles


def read_texts(path: Path) -> list[str]:
    """The raw documents of a text directory, blank-line ``.txt`` or ``.jsonl`` file."""
    if path.is_dir():
        files = sorted(path.glob("*.txt"))
        if not files:
            raise SglabError(f"corpus directory {str(path)!r} has no .txt files; put one document "
                             "per .txt file there")
        return [f.read_text(encoding="utf-8", errors="replace") for f in files]
    if path.suffix == ".txt":
        text = path.read_text(encoding="utf-8", errors="replace")
        blocks, current = [], []
        for line in text.splitlines():
            if line.strip():
                current.append(line)
            elif current:
                blocks.append("\n".join(current))
                current = []
        return blocks + (["\n".join(current)] if current else [])
    if path.suffix == ".jsonl":
        texts = []
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError:
                raise SglabError(f"corpus {str(path)!r} line {number} is not JSON") from None
            if not isinstance(record, dict) or not isinstance(record.get("text"), str):
                raise SglabError(f"corpus {str(path)!r} line {number} has no string 'text' field")
            texts.append(record["text"])
        return texts
    raise SglabError(f"corpus {str(path)!r}: unknown format; use a directory of .txt files, a .txt "
                     "file with blank-line-separated documents, a .jsonl file with a 'text' field "
                     "or a MediaWiki dump (.xml or .bz2)")


def split_passages(documents: list[list[str]], length: int = 120,
                   min_last: int = 20) -> list[list[str]]:
    """Consecutive ``length``-token passages of every document; a shorter last part is
    kept when it has at least ``min_last`` tokens."""
    passages = []
    for tokens in documents:
        for start in range(0, len(tokens), length):
            part = tokens[start:start + length]
            if len(part) == length or len(part) >= min_last:
                passages.append(part)
    return passages


def read_corpus(path: str | Path | None = None, name: str | None = None,
                passage_tokens: int = 120, min_passage_tokens: int = 20,
                min_article_tokens: int = 50, max_passages: int | None = None) -> Corpus:
    """Read a corpus (``path``, or ``name="wiki-excerpt"``) and cut it into passages."""
    if name is not None:
        if name != "wiki-excerpt":
            raise SglabError(f"unknown corpus name {name!r}; known: wiki-excerpt (or set corpus.path)")
        path = wiki_excerpt_path()
    if path is None:
        raise SglabError("no corpus: set corpus.path to a local corpus or corpus.name=wiki-excerpt")
    path = Path(path)
    if not path.exists():
        raise SglabError(f"corpus {str(path)!r} does not exist; set corpus.path to a directory of "
                         ".txt files, a .txt, .jsonl or MediaWiki .xml[.bz2] file")
    if path.name.endswith((".xml", ".bz2")):  # the excerpt is named ...-shortened.bz2
        documents = read_wiki_dump(path, min_article_tokens)
    else:
        documents = [tokenize(text) for text in read_texts(path)]
        documents = [d for d in documents if d]
    passages = split_passages(documents, passage_tokens, min_passage_tokens)
    if not passages:
        raise SglabError(f"corpus {str(path)!r} has no passage of at least {min_passage_tokens} "
                         "tokens (alphabetic words of 2-15 letters); give it more text")
    if max_passages is not None and max_passages < len(passages):  # evenly spread over the corpus
        step = len(passages) / max_passages
        passages = [passages[int(i * step)] for i in range(max_passages)]
    return Corpus(name or str(path), len(documents), sum(map(len, documents)), passages)
