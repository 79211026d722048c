"""Loaders for published seq2seq data sets that cannot be generated: COGS, PCFG SET, CFQ.

Each loader reads a local directory holding the files in their published layout:

* ``cogs`` (Kim & Linzen 2020, github.com/najoungkim/COGS ``data/``): ``train.tsv``,
  ``dev.tsv``, ``test.tsv``, ``gen.tsv``; lines ``sentence<TAB>logical form<TAB>type``.
  Splits: train, iid_valid (dev), iid_test (test), ood_test (gen: 21 generalization types).
* ``pcfg`` (Hupkes et al. 2020, github.com/i-machine-think/am-i-compositional
  ``data/pcfgset/<productivity|systematicity>/``): ``train.src``, ``train.tgt``,
  ``test.src``, ``test.tgt``; one space-tokenised sequence per line.
* ``cfq`` (Keysers et al. 2020, ``cfq1.1.tar.gz`` unpacked): ``dataset.json`` (a list of
  records) and ``splits/<split>.json`` with ``trainIdxs``, ``devIdxs``, ``testIdxs``;
  the entity-masked fields ``questionPatternModEntities`` -> ``sparqlPatternModEntities``
  are used, tokenised on spaces after separating punctuation and stripping ``ns:``.

Integrity, in two layers:

* *Published version.* COGS and PCFG SET are pinned to one commit of their
  repositories; each file must have the git blob id that commit lists for it (SHA-1 of
  ``"blob <size>\0" + content``, what ``git hash-object`` prints), so a copy from
  another revision, a truncated download or an edited file is an error naming the
  file and the commit. Downloads fetch that same commit. ``verify_published=false``
  skips this check, for deliberately modified copies. A release outside git with fixed
  files (MNIST, :mod:`sglab.tasks.digits`) is pinned by each file's SHA-256 instead. CFQ
  is published as an archive outside git and has no pin.
* *Local record.* The directory's ``SHA256SUMS`` (``<sha256>  <file>`` lines, the
  coreutils format) is checked on every load, and a mismatch is an error naming the
  file. The first load writes it and says so (for CFQ: trust on first use), so later
  corruption or edits are caught. Files checked against a SHA-256 pin are not recorded
  (the pin is the stronger check), and a directory that cannot be written (a read-only
  copy) only loses the record, with a note.

When a file is missing, the loader downloads it if ``download`` is allowed and a
public address is known (COGS and PCFG SET; CFQ needs a login, so it is never
downloaded); otherwise the error lists the expected files and where to get them.
"""

from __future__ import annotations

import hashlib
import json
import re
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import Field

from sglab import registry
from sglab.errors import SglabError
from sglab.io import atomic_write_bytes, atomic_write_text
from sglab.tasks.seq2seq import Seq2SeqTask, Seq2SeqTaskConfig

CHECKSUMS = "SHA256SUMS"
Pairs = list[tuple[str, str]]


@dataclass(frozen=True)
class Source:
    files: tuple[str, ...]
    url: str | None  # base address the files are fetched from (None: manual only)
    where: str  # where a person gets the files
    commit: str | None = None  # the published revision the pins below belong to
    published: dict[str, str] = field(default_factory=dict)  # file -> git blob id
    sha256: dict[str, str] = field(default_factory=dict)  # file -> SHA-256 (releases outside git)


def _hex_digest(digest, path: Path) -> str:
    """``digest`` (a hashlib object) updated with the file's bytes, as hex."""
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def git_blob_id(path: Path) -> str:
    """The id git gives the file's content: SHA-1 of ``b"blob <size>\0" + content``."""
    return _hex_digest(hashlib.sha1(f"blob {path.stat().st_size}\0".encode()), path)


def sha256(path: Path) -> str:
    return _hex_digest(hashlib.sha256(), path)


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


def missing_files(directory: str | Path, files: Sequence[str]) -> list[str]:
    """The names in ``files`` that ``directory`` lacks (nothing is read or written)."""
    return [name for name in files if not (Path(directory) / name).is_file()]


def fetch(directory: str | Path, source: Source, download: bool = False,
          printer: Callable[[str], None] = print, verify_published: bool = True) -> Path:
    """Make sure every file of ``source`` is in ``directory``, is the published version
    (where ``source`` pins one) and matches SHA256SUMS."""
    directory = Path(directory)
    missing = missing_files(directory, source.files)
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
    if verify_published:
        for name, blob in source.published.items():
            actual = git_blob_id(directory / name)
            if actual != blob:
                raise SglabError(
                    f"{directory / name} is not the published file (git blob {actual[:12]}..., "
                    f"expected {blob[:12]}... at commit {source.commit[:12]} of {source.where}); "
                    f"fetch it again from that commit, or set task.verify_published=false to "
                    f"use a modified copy on purpose"
                )
    sums = _read_checksums(directory)
    recorded = dict(sums)
    for name in source.files:
        actual = sha256(directory / name)
        pinned = source.sha256.get(name)
        if verify_published and pinned is not None and actual != pinned:
            raise SglabError(
                f"{directory / name} is not the published file (SHA-256 {actual[:12]}..., "
                f"expected {pinned[:12]}...); fetch it again from {source.where}"
            )
        if name not in sums:
            if not (verify_published and pinned is not None):  # a pin outranks a record
                sums[name] = actual
        elif sums[name] != actual:
            raise SglabError(
                f"{directory / name} does not match its checksum in {directory / CHECKSUMS} "
                f"(expected {sums[name][:12]}..., got {actual[:12]}...); the file is corrupt or "
                f"was changed: fetch it again from {source.where}, or delete its line from "
                f"{CHECKSUMS} if the change is intended"
            )
    if sums != recorded:
        new = sorted(set(sums) - set(recorded))
        try:
            _write_checksums(directory, sums)
        except OSError as error:  # e.g. a read-only copy: the files were read all the same
            printer(f"note: could not record the SHA-256 checksums of {', '.join(new)} in "
                    f"{directory / CHECKSUMS} ({error.strerror or error}); later changes to "
                    "them will not be detected")
        else:
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

COGS_COMMIT = "165a7b669eade971fa47bf568a2e51925360fed8"  # 2022-09-13, the latest data fix
COGS = Source(("train.tsv", "dev.tsv", "test.tsv", "gen.tsv"),
              f"https://raw.githubusercontent.com/najoungkim/COGS/{COGS_COMMIT}/data",
              f"https://github.com/najoungkim/COGS/tree/{COGS_COMMIT}/data",
              COGS_COMMIT,
              {"train.tsv": "eb101d5755415c4eea7071fb37d32ed56e610ef8",
               "dev.tsv": "a1b43fa194defad85fe8e3bbcfbae2f6d10e56ee",
               "test.tsv": "0a954e9bde5089a186241f5cbf627bb7b2faef7b",
               "gen.tsv": "a54a3c9b5f46464daf9b10fc6df7133796f1f293"})


def read_cogs(directory: str | Path, download: bool = False,
              printer: Callable[[str], None] = print,
              verify_published: bool = True) -> dict[str, list[tuple[str, str, str]]]:
    """Split -> (sentence, logical form, type) rows."""
    directory = fetch(directory, COGS, download, printer, verify_published)
    names = {"train": "train.tsv", "iid_valid": "dev.tsv", "iid_test": "test.tsv",
             "ood_test": "gen.tsv"}
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


PCFG_COMMIT = "4f75bdd78889150dd78e90bbb7ddec840204c159"  # 2023-07-04
PCFG_PUBLISHED = {
    "productivity": {"train.src": "299b8b8b6cbaf9381ee5a8b5bb58ade3dfbaa5d1",
                     "train.tgt": "7fa6c4001e2ec67631a475fa0052c276740be90e",
                     "test.src": "1d467c344cc571e0ab3563646a57f5259617a647",
                     "test.tgt": "e934c5c2a5a5e9c5085b780c8202e418bb308964"},
    "systematicity": {"train.src": "77f60c1bb8b583cfef6144f1de04d3d62b6b57f4",
                      "train.tgt": "1829f901cf7f63e69f770cef76dcbe44411542fd",
                      "test.src": "08c3ba9f8b71c76920462a5210dc94c6bff6e8a7",
                      "test.tgt": "1e70ba1fbafc796fae5f45000b288a46ffd89174"},
}


def pcfg_source(split: str) -> Source:
    repo = "i-machine-think/am-i-compositional"
    return Source(PCFG_FILES,
                  f"https://raw.githubusercontent.com/{repo}/{PCFG_COMMIT}/data/pcfgset/{split}",
                  f"https://github.com/{repo}/tree/{PCFG_COMMIT}/data/pcfgset/{split}",
                  PCFG_COMMIT, PCFG_PUBLISHED[split])


def read_pcfg(directory: str | Path, split: str, download: bool = False,
              printer: Callable[[str], None] = print,
              verify_published: bool = True) -> dict[str, Pairs]:
    """``directory`` holds ``<split>/train.src`` etc.; returns the train and ood_test pairs."""
    folder = fetch(Path(directory) / split, pcfg_source(split), download, printer,
                   verify_published)
    out = {}
    for part, split_name in (("train", "train"), ("test", "ood_test")):
        sources = (folder / f"{part}.src").read_text().splitlines()
        targets = (folder / f"{part}.tgt").read_text().splitlines()
        if len(sources) != len(targets):
            raise SglabError(f"{folder}: {part}.src has {len(sources)} lines but {part}.tgt has "
                             f"{len(targets)}; the files must be line-aligned")
        out[split_name] = [(s, t) for s, t in zip(sources, targets) if s.strip()]
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
    for part, key in (("train", "trainIdxs"), ("ood_valid", "devIdxs"), ("ood_test", "testIdxs")):
        try:
            out[part] = [(cfq_question(records[i]["questionPatternModEntities"]),
                          cfq_query(records[i]["sparqlPatternModEntities"])) for i in indices[key]]
        except (KeyError, IndexError) as exc:
            raise SglabError(f"{directory}: split {split!r} does not match dataset.json "
                             f"({type(exc).__name__}: {exc})") from None
    return out


# ----------------------------------------------------------------------------- tasks


class PublishedConfig(Seq2SeqTaskConfig):
    data_dir: str = Field(..., description="Local directory with the published files.")
    download: bool = Field(False, description="Download missing files (needs a network).")
    verify_published: bool = Field(
        True, description="Check that COGS / PCFG SET files are the pinned published "
                          "version; false for a deliberately modified copy.")


class CogsConfig(PublishedConfig):
    name: Literal["cogs"] = "cogs"

    def evaluation_splits(self) -> list[str]:
        return ["iid_valid", "iid_test", "ood_test"]


class PcfgConfig(PublishedConfig):
    name: Literal["pcfg"] = "pcfg"
    split: Literal["productivity", "systematicity"] = "productivity"

    def evaluation_splits(self) -> list[str]:
        return ["ood_test"]


class CfqConfig(PublishedConfig):
    name: Literal["cfq"] = "cfq"
    split: str = Field("mcd1", description="Name of a file in splits/ (mcd1, mcd2, mcd3, "
                                           "query_complexity_split, ...).")

    def evaluation_splits(self) -> list[str]:
        return ["ood_valid", "ood_test"]


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
        rows = read_cogs(config.data_dir, config.download,
                         verify_published=config.verify_published)
        return {split: [(s, t) for s, t, _ in r] for split, r in rows.items()}
    return PublishedTask(config, load)


@registry.register("task", "pcfg", PcfgConfig, "PCFG SET string edits (local files)")
def make_pcfg(config: PcfgConfig) -> PublishedTask:
    return PublishedTask(config, lambda: read_pcfg(config.data_dir, config.split, config.download,
                                                   verify_published=config.verify_published))


@registry.register("task", "cfq", CfqConfig, "CFQ question -> SPARQL (local files)")
def make_cfq(config: CfqConfig) -> PublishedTask:
    return PublishedTask(config, lambda: read_cfq(config.data_dir, config.split))
