"""Loaders for published seq2seq data sets that cannot be generated: COGS, PCFG SET, CFQ.

Each loader reads a local directory holding the files in their published layout:

* ``cogs`` (Kim & Linzen 2020, github.com/najoungkim/COGS ``data/``): ``train.tsv``,
  ``dev.tsv``, ``test.tsv``, ``gen.tsv``; lines ``sentence<TAB>logical form<TAB>type``.
  Splits: train, iid_valid (dev), iid_test (test), test (gen: 21 generalization types).
* ``pcfg`` (Hupkes et al. 2020, github.com/i-machine-think/am-i-compositional
  ``data/pcfgset/<productivity|systematicity>/``): ``train.src``, ``train.tgt``,
  ``test.src``, ``test.tgt``; one space-tokenised sequence per line.
* ``cfq`` (Keysers et al. 2020, ``cfq1.1.tar.gz`` unpacked): ``dataset.json`` (a list of
  records) and ``splits/<split>.json`` with ``trainIdxs``, ``devIdxs``, ``testIdxs``;
  the entity-masked fields ``questionPatternModEntities`` -> ``sparqlPatternModEntities``
  are used, tokenised on spaces after separating punctuation and stripping ``ns:``.

Integrity: the directory's ``SHA256SUMS`` (``<sha256>  <file>`` lines, the coreutils
format) is checked on every load, and a mismatch is an error naming the file. A
download writes that file; for files placed by hand, the first load writes it and
says so (trust on first use), so later corruption or edits are caught.

When a file is missing, the loader downloads it if ``download`` is allowed and a
public address is known (COGS and PCFG SET; CFQ needs a login, so it is never
downloaded); otherwise the error lists the expected files and where to get them.
"""

from __future__ import annotations

import hashlib
import json
import re
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import Field

from sglab import registry
from sglab.config import TaskConfig
from sglab.errors import SglabError
from sglab.tasks.seq2seq import Seq2SeqTask
from sglab.train.checkpoints import atomic_write_bytes, atomic_write_text

CHECKSUMS = "SHA256SUMS"
Pairs = list[tuple[str, str]]


@dataclass(frozen=True)
class Source:
    files: tuple[str, ...]
    url: str | None  # base address the files are fetched from (None: manual only)
    where: str  # where a person gets the files


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _read_checksums(directory: Path) -> dict[str, str]:
    path = directory / CHECKSUMS
    if not path.is_file():
        return {}
    sums = {}
    for line in path.read_text().splitlines():
        if line.strip():
            digest, name = line.split(maxsplit=1)
            sums[name.lstrip("*")] = digest
    return sums


def _write_checksums(directory: Path, sums: dict[str, str]) -> None:
    atomic_write_text(directory / CHECKSUMS,
                      "".join(f"{digest}  {name}\n" for name, digest in sorted(sums.items())))


def fetch(directory: str | Path, source: Source, download: bool = False,
          printer: Callable[[str], None] = print) -> Path:
    """Make sure every file of ``source`` is in ``directory`` and matches SHA256SUMS."""
    directory = Path(directory)
    missing = [f for f in source.files if not (directory / f).is_file()]
    if missing and download and source.url:
        for name in missing:
            _download(f"{source.url}/{name}", directory / name, source)
        missing = []
    if missing:
        how = ("pass download=true (task.download=true) to fetch them, or download them from "
               if source.url else "download them from ")
        raise SglabError(
            f"{directory} is missing {', '.join(missing)} (expected files: "
            f"{', '.join(source.files)}); {how}{source.where} into that directory"
        )
    sums = _read_checksums(directory)
    recorded = dict(sums)
    for name in source.files:
        actual = sha256(directory / name)
        if name not in sums:
            sums[name] = actual
        elif sums[name] != actual:
            raise SglabError(
                f"{directory / name} does not match its checksum in {directory / CHECKSUMS} "
                f"(expected {sums[name][:12]}..., got {actual[:12]}...); the file is corrupt or "
                f"was changed: fetch it again from {source.where}, or delete its line from "
                f"{CHECKSUMS} if the change is intended"
            )
    if sums != recorded:
        _write_checksums(directory, sums)
        new = sorted(set(sums) - set(recorded))
        printer(f"recorded SHA-256 checksums of {', '.join(new)} in {directory / CHECKSUMS}")
    return directory


def _download(url: str, path: Path, source: Source) -> None:
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            data = response.read()
    except OSError as exc:
        raise SglabError(f"could not download {url} ({exc}); download the files from "
                         f"{source.where} into {path.parent} by hand") from None
    atomic_write_bytes(path, lambda f: f.write(data))


# ----------------------------------------------------------------------------- COGS

COGS = Source(("train.tsv", "dev.tsv", "test.tsv", "gen.tsv"),
              "https://raw.githubusercontent.com/najoungkim/COGS/main/data",
              "https://github.com/najoungkim/COGS/tree/main/data")


def read_cogs(directory: str | Path, download: bool = False,
              printer: Callable[[str], None] = print) -> dict[str, list[tuple[str, str, str]]]:
    """Split -> (sentence, logical form, type) rows."""
    directory = fetch(directory, COGS, download, printer)
    names = {"train": "train.tsv", "iid_valid": "dev.tsv", "iid_test": "test.tsv",
             "test": "gen.tsv"}
    out = {}
    for split, name in names.items():
        rows = []
        for number, line in enumerate((directory / name).read_text().splitlines(), 1):
            if not line.strip():
                continue
            fields = line.split("\t")
            if len(fields) != 3:
                raise SglabError(f"{directory / name}:{number}: expected 3 tab-separated fields "
                                 f"(sentence, logical form, type), found {len(fields)}")
            rows.append((fields[0], fields[1], fields[2]))
        out[split] = rows
    return out


# ----------------------------------------------------------------------------- PCFG SET

PCFG_FILES = ("train.src", "train.tgt", "test.src", "test.tgt")


def pcfg_source(split: str) -> Source:
    base = "https://raw.githubusercontent.com/i-machine-think/am-i-compositional/master/data/pcfgset"
    return Source(PCFG_FILES, f"{base}/{split}",
                  f"https://github.com/i-machine-think/am-i-compositional/tree/master/data/pcfgset/{split}")


def read_pcfg(directory: str | Path, split: str, download: bool = False,
              printer: Callable[[str], None] = print) -> dict[str, Pairs]:
    """``directory`` holds ``<split>/train.src`` etc.; returns train and test pairs."""
    folder = fetch(Path(directory) / split, pcfg_source(split), download, printer)
    out = {}
    for part in ("train", "test"):
        sources = (folder / f"{part}.src").read_text().splitlines()
        targets = (folder / f"{part}.tgt").read_text().splitlines()
        if len(sources) != len(targets):
            raise SglabError(f"{folder}: {part}.src has {len(sources)} lines but {part}.tgt has "
                             f"{len(targets)}; the files must be line-aligned")
        out[part] = [(s, t) for s, t in zip(sources, targets) if s.strip()]
    return out


# ----------------------------------------------------------------------------- CFQ

def cfq_source(split: str) -> Source:
    return Source(("dataset.json", f"splits/{split}.json"), None,
                  "https://github.com/google-research/google-research/tree/master/cfq "
                  "(cfq1.1.tar.gz, unpacked)")


_PUNCTUATION = re.compile(r"([?!.,'\"])")


def cfq_question(text: str) -> str:
    """Official preprocessing: punctuation separated into tokens."""
    return " ".join(_PUNCTUATION.sub(r" \1 ", text).split())


def cfq_query(text: str) -> str:
    """Official preprocessing: ``ns:`` prefixes removed, tokens split on spaces."""
    return " ".join(text.replace("ns:", "").split())


def read_cfq(directory: str | Path, split: str,
             printer: Callable[[str], None] = print) -> dict[str, Pairs]:
    directory = fetch(directory, cfq_source(split), False, printer)
    records = json.loads((directory / "dataset.json").read_text())
    indices = json.loads((directory / "splits" / f"{split}.json").read_text())
    out = {}
    for part, key in (("train", "trainIdxs"), ("ood_valid", "devIdxs"), ("test", "testIdxs")):
        try:
            out[part] = [(cfq_question(records[i]["questionPatternModEntities"]),
                          cfq_query(records[i]["sparqlPatternModEntities"])) for i in indices[key]]
        except (KeyError, IndexError) as exc:
            raise SglabError(f"{directory}: split {split!r} does not match dataset.json "
                             f"({type(exc).__name__}: {exc})") from None
    return out


# ----------------------------------------------------------------------------- tasks


class PublishedConfig(TaskConfig):
    data_dir: str = Field(..., description="Local directory with the published files.")
    download: bool = Field(False, description="Download missing files (needs a network).")
    eval_oracle_length: bool = False


class CogsConfig(PublishedConfig):
    name: Literal["cogs"] = "cogs"


class PcfgConfig(PublishedConfig):
    name: Literal["pcfg"] = "pcfg"
    split: Literal["productivity", "systematicity"] = "productivity"


class CfqConfig(PublishedConfig):
    name: Literal["cfq"] = "cfq"
    split: str = Field("mcd1", description="Name of a file in splits/ (mcd1, mcd2, mcd3, "
                                           "query_complexity_split, ...).")


class PublishedTask(Seq2SeqTask):
    """A seq2seq task over (source, target) pairs read by a loader."""

    def __init__(self, config: PublishedConfig, load: Callable[[], dict[str, Pairs]]):
        self._load = load
        super().__init__(config)

    def build_examples(self) -> dict[str, Pairs]:
        if not hasattr(self, "_pairs"):
            self._pairs = self._load()
        return self._pairs

    def symbols(self) -> list[str]:
        pairs = self.build_examples()
        return sorted({tok for rows in pairs.values() for s, t in rows
                       for tok in (*s.split(), *t.split())})


@registry.register("task", "cogs", CogsConfig, "COGS sentence -> logical form (local files)")
def make_cogs(config: CogsConfig) -> PublishedTask:
    def load():
        rows = read_cogs(config.data_dir, config.download)
        return {split: [(s, t) for s, t, _ in r] for split, r in rows.items()}
    return PublishedTask(config, load)


@registry.register("task", "pcfg", PcfgConfig, "PCFG SET string edits (local files)")
def make_pcfg(config: PcfgConfig) -> PublishedTask:
    return PublishedTask(config, lambda: read_pcfg(config.data_dir, config.split, config.download))


@registry.register("task", "cfq", CfqConfig, "CFQ question -> SPARQL (local files)")
def make_cfq(config: CfqConfig) -> PublishedTask:
    return PublishedTask(config, lambda: read_cfq(config.data_dir, config.split))
