"""Enwik8 and WikiText-103 for task text, on small fixtures written here: exact byte splits and
the size rule, the SentencePiece tokenizer and its cache, missing-file errors, perplexity as
the headline metric, and the paper presets' data check."""

import hashlib
import math
import os
import random
import sys

import pytest
import torch

from sglab import registry
from sglab.cli import main
from sglab.config import build_run_config
from sglab.errors import SglabError
from sglab.experiments import run_experiment
from sglab.tasks import build_task, text_corpora
from sglab.tasks.text import TextConfig, lm_metric, load_corpus
from sglab.tasks.text_corpora import (
    ENWIK8_BYTES,
    WIKITEXT_FILES,
    cache_key,
    cache_root,
    enwik8_bounds,
    enwik8_file,
    load_wikitext103,
)
from sglab.train import Trainer
from sglab.train.evaluate import evaluate

SYLLABLES = ("ba be bi bo ca co de di fa fe ga go ha he la le li lo ma me mi mo na ne no pa pe "
             "ra re ri ro sa se si so ta te ti to va ve za").split()
COMMON = "the of and to in a is was for on that with by as at from his her it an were".split()
PAPER = {"moe-lm": "enwik8", "moe-variants": "wikitext103", "ffn-approx": "wikitext103"}


@pytest.fixture(autouse=True)
def _cache_in_tmp(tmp_path, monkeypatch):
    """Nothing is cached outside the test's directory."""
    monkeypatch.setenv("SGLAB_CACHE_DIR", str(tmp_path / "cache"))


def wikitext_lines(count: int, seed: int) -> list[str]:
    """WikiText-103-like lines: ' = Title = ' headings, blank ' ' lines, paragraphs of words."""
    rng = random.Random(seed)
    words = ["".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, 3))) for _ in range(200)]
    words += COMMON * 8
    lines = []
    while len(lines) < count:
        if len(lines) % 12 == 0:
            lines += [" ", f" = The {rng.choice(words)} {rng.choice(words)} = ", " "]
        lines.append(" " + rng.choice(["The", "In", "A", "It"]) + " "
                     + " ".join(rng.choice(words) for _ in range(rng.randint(4, 30)))
                     + rng.choice([" . ", " , and so on . ", " @-@ " + rng.choice(words) + " . "]))
    return lines[:count]


def write_wikitext(directory, lines=(400, 60, 60)):
    directory.mkdir(parents=True, exist_ok=True)
    for seed, (name, count) in enumerate(zip(WIKITEXT_FILES.values(), lines)):
        (directory / name).write_text("\n".join(wikitext_lines(count, seed)) + "\n")
    return directory


def normalized(line: str) -> str:
    return " ".join(line.split())


# ----------------------------------------------------------------------------- enwik8


def test_enwik8_splits_at_exact_byte_counts(tmp_path):
    assert enwik8_bounds(ENWIK8_BYTES) == (90_000_000, 95_000_000)
    data = bytes(random.Random(0).choice(b"abc def\n<page>") for _ in range(2019))
    file = tmp_path / "enwik8"
    file.write_bytes(data)
    digest = hashlib.sha256(data).hexdigest()
    for path in (file, tmp_path):  # the file or the directory holding it
        task = build_task(TextConfig(corpus="enwik8", path=str(path), sha256=digest, context=16))
        sizes = [len(task.splits[s]) for s in ("train", "iid_valid", "iid_test")]
        assert sizes == [2019 - 200, 100, 100]  # n // 20 = 100 bytes each held out
        joined = torch.cat([task.splits[s] for s in ("train", "iid_valid", "iid_test")])
        assert torch.equal(joined.long() - 1, torch.tensor(list(data)))
        assert task.splits["iid_valid"][0] == data[1819] + 1 and len(task.vocab) == 257
    metrics = evaluate(lambda ids, **inputs: torch.zeros(*ids.shape, 257), task, "iid_test",
                       batch_size=4)
    assert metrics["iid_test/bpb"] == pytest.approx(math.log2(257))


def test_enwik8_size_rule_names_the_file(tmp_path):
    small = tmp_path / "enwik8"
    small.write_bytes(b"x" * 1234)
    with pytest.raises(SglabError, match="1,234 bytes") as error:
        load_corpus("enwik8", str(small))
    message = str(error.value)
    assert str(small) in message and "100,000,000" in message and "task.sha256" in message
    assert "\n" not in message
    with pytest.raises(SglabError, match="expected " + "ab" * 32):  # the checksum decides
        load_corpus("enwik8", str(small), "ab" * 32)
    with pytest.raises(SglabError, match="no enwik8 file") as error:
        enwik8_file(tmp_path / "elsewhere")
    assert "elsewhere" in str(error.value)
    exact = tmp_path / "real" / "enwik8"  # sparse: the size rule reads no byte
    exact.parent.mkdir()
    with exact.open("wb") as handle:
        handle.truncate(ENWIK8_BYTES)
    assert enwik8_file(exact.parent) == exact
    with pytest.raises(ValueError, match="corpus=enwik8 needs path"):
        TextConfig(corpus="enwik8")


# ----------------------------------------------------------------------------- WikiText-103


def test_wikitext_tokenizer_splits_and_round_trip(tmp_path):
    pytest.importorskip("sentencepiece")
    data = write_wikitext(tmp_path / "wikitext-103")
    corpus = load_wikitext103(data, vocab_size=100, sentences=1000, cache_dir=tmp_path / "c")
    assert corpus.trained and len(corpus.pieces) == 100
    eos = corpus.processor.eos_id() + 1
    for split, name in WIKITEXT_FILES.items():  # the three files are the three splits
        ids = corpus.splits[split]
        lines = (data / name).read_text().splitlines()
        assert int((ids == eos).sum()) == len(lines)  # one end-of-line piece per line
        assert 1 <= int(ids.min()) and int(ids.max()) <= 100  # 0 stays padding
    valid = (data / WIKITEXT_FILES["iid_valid"]).read_text().splitlines()
    ends = (corpus.splits["iid_valid"] == eos).nonzero()[:, 0].tolist()
    assert corpus.decode(corpus.splits["iid_valid"][ends[0] + 1: ends[1]]) == normalized(valid[1])
    for line in valid[:30]:
        assert corpus.decode(corpus.encode(line)) == normalized(line)
    task = build_task(TextConfig(corpus="wikitext103", data_dir=str(data), vocab_size=100,
                                 context=16))
    assert len(task.vocab) == 101 and task.vocab.tokens[0] == "<pad>"
    assert task.decode(task.encode(valid[3])) == normalized(valid[3])
    batch = task.train_batch(4, torch.Generator().manual_seed(0))
    assert batch.input_ids.dtype == torch.long and torch.equal(batch.input_ids[:, 1:],
                                                               batch.targets[:, :-1])


def test_wikitext_cache_is_reused_without_training(tmp_path, monkeypatch):
    pytest.importorskip("sentencepiece")
    data = write_wikitext(tmp_path / "wt")
    first = load_wikitext103(data, vocab_size=100, sentences=1000)
    assert first.directory.parent.parent == tmp_path / "cache" == cache_root()
    files = sorted(first.directory.iterdir())
    assert {f.name for f in files} >= {"tokenizer.model", "train.npy", "iid_valid.npy",
                                       "iid_test.npy"}
    assert not [f for f in first.directory.parent.rglob("*.tmp")]  # no temp file left
    mtimes = [f.stat().st_mtime_ns for f in files]

    def no_training(*args):
        raise AssertionError("the tokenizer was trained again")

    monkeypatch.setattr(text_corpora, "train_tokenizer", no_training)
    second = load_wikitext103(data, vocab_size=100, sentences=1000)
    assert not second.trained and second.directory == first.directory
    assert [f.stat().st_mtime_ns for f in files] == mtimes
    assert all(torch.equal(first.splits[s], second.splits[s]) for s in WIKITEXT_FILES)


def test_wikitext_cache_key_follows_the_files_and_settings(tmp_path):
    pytest.importorskip("sentencepiece")
    data = write_wikitext(tmp_path / "wt")
    first = load_wikitext103(data, vocab_size=100, sentences=1000)
    stats = text_corpora.file_stats(data)
    assert cache_key(stats, 100, 1000) == first.directory.name
    assert len({cache_key(stats, 100, 1000), cache_key(stats, 120, 1000),
                cache_key(stats, 100, 500)}) == 3
    valid = data / WIKITEXT_FILES["iid_valid"]
    with valid.open("a") as handle:
        handle.write(" the end of it . \n")
    with pytest.raises(SglabError, match="wiki.valid.tokens does not match its checksum"):
        load_wikitext103(data, vocab_size=100, sentences=1000)
    (data / "SHA256SUMS").unlink()  # the change is intended
    changed = load_wikitext103(data, vocab_size=100, sentences=1000)
    assert changed.directory != first.directory and changed.trained
    assert len(changed.splits["iid_valid"]) > len(first.splits["iid_valid"])


def test_wikitext_missing_files_are_named(tmp_path, monkeypatch):
    data = tmp_path / "wt"
    data.mkdir()
    (data / "wiki.train.tokens").write_text(" a b c \n")
    with pytest.raises(SglabError) as error:
        build_task(TextConfig(corpus="wikitext103", data_dir=str(data)))
    message = str(error.value)
    assert "wiki.valid.tokens, wiki.test.tokens" in message and "2 WikiText-103 file" in message
    assert "wikitext-103-v1.zip" in message and "task.data_dir" in message
    assert "\n" not in message
    write_wikitext(data)
    monkeypatch.setitem(sys.modules, "sentencepiece", None)
    with pytest.raises(SglabError, match=r"pip install sglab\[text\]"):
        load_wikitext103(data, vocab_size=100)
    with pytest.raises(ValueError, match="corpus=wikitext103 needs data_dir"):
        TextConfig(corpus="wikitext103")
    with pytest.raises(ValueError, match="vocab_size=100 has no effect without corpus=wikitext103"):
        TextConfig(corpus="kjv", vocab_size=100)


def test_sentencepiece_errors_become_one_line(tmp_path):
    pytest.importorskip("sentencepiece")
    data = write_wikitext(tmp_path / "wt", lines=(20, 5, 5))
    with pytest.raises(SglabError, match="lower task.vocab_size") as error:
        load_wikitext103(data, vocab_size=5000, sentences=1000)
    assert "\n" not in str(error.value)
    assert not [p for p in (tmp_path / "cache" / "wikitext103").iterdir() if p.is_dir()]


def test_training_on_wikitext_reports_perplexity_not_bpb(tmp_path):
    pytest.importorskip("sentencepiece")
    data = write_wikitext(tmp_path / "wt")
    settings = [
        "task.name=text", "task.corpus=wikitext103", f"task.data_dir={data}",
        "task.vocab_size=100", "task.context=16", "model.n_layers=1", "model.n_heads=2",
        "model.d_model=32", "train.steps=40", "train.batch_size=16", "train.lr=3e-3",
        "train.eval_interval=40", "train.checkpoint_interval=40", "train.log_interval=40",
        "train.warmup_steps=4", "train.threads=1", "train.target_metric=iid_valid/ppl",
        "train.target_threshold=0"]
    config = build_run_config({}, settings)
    assert config.logs_metric("iid_test/ppl") and not config.logs_metric("iid_test/bpb")
    summary = Trainer(config, tmp_path / "run", printer=None).run()
    final = summary["final"]
    assert "iid_test/bpb" not in final and final["iid_test/ppl"] < 101  # below uniform
    assert final["iid_test/ppl"] == pytest.approx(math.exp(final["iid_test/loss"]))
    assert lm_metric("wikitext103") == "iid_test/ppl" and lm_metric("enwik8") == "iid_test/bpb"
    assert lm_metric("kjv", "iid_valid") == "iid_valid/bpb"


def test_ffn_approx_on_wikitext_reports_perplexity(tmp_path):
    pytest.importorskip("sentencepiece")
    data = write_wikitext(tmp_path / "wt")
    results = run_experiment(registry.experiment("ffn-approx"), "quick", tmp_path / "out",
                             tmp_path / "runs", workers=1, printer=lambda _: None,
                             overrides=["task.corpus=wikitext103", f"task.data_dir={data}",
                                        "task.vocab_size=100"])
    claims = {c["id"]: c for c in results["claims"]}
    assert "iid_test/ppl" in claims["topk-moderate-k-matches-dense"]["evidence"]
    table = results["sections"][0]["tables"][0]
    assert "iid_test ppl" in table["columns"] and table["title"].startswith("Perplexity")


# ----------------------------------------------------------------------------- paper presets


@pytest.mark.parametrize("name", sorted(PAPER))
def test_paper_presets_read_the_real_corpora_and_check_them(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    experiment = registry.experiment(name)
    configs = experiment.configs(experiment.preset("paper"), [])
    assert {c.task.corpus for c in configs} == {PAPER[name]}
    for preset in ("quick", "default"):
        assert {c.task.corpus for c in experiment.configs(experiment.preset(preset), [])} == {"kjv"}
    with pytest.raises(SglabError) as error:
        experiment.check_data(configs)
    if PAPER[name] == "enwik8":
        assert "task.path=data/enwik8" in str(error.value)
        (tmp_path / "data").mkdir()
        with (tmp_path / "data" / "enwik8").open("wb") as handle:
            handle.truncate(ENWIK8_BYTES)
    else:
        assert all(f in str(error.value) for f in WIKITEXT_FILES.values())
        assert "data/wikitext-103" in str(error.value)
        write_wikitext(tmp_path / "data" / "wikitext-103", lines=(3, 3, 3))
    experiment.check_data(configs)  # the files are there: nothing to say


def test_missing_corpus_exits_2_before_anything_is_written(tmp_path, capsys):
    out, runs = tmp_path / "out", tmp_path / "runs"
    code = main(["run", "ffn-approx", "--preset", "paper", "--out", str(out), "--runs-dir",
                 str(runs), "--set", f"task.data_dir={tmp_path / 'nowhere'}"])
    assert code == 2
    error = capsys.readouterr().err
    assert "wiki.train.tokens" in error and "wiki.test.tokens" in error
    assert not out.exists() and not runs.exists()
    assert not os.path.exists(tmp_path / "cache")
