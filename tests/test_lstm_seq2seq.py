"""The Lake-Baroni LSTM encoder-decoder (thesis Fig. 3.5): teacher-forced and step-by-step
decoding agree, padding is skipped, free-running training reads the decoder's own argmax,
the weight-mask code's init, and runs that never join an ensemble."""

import math

import pytest
import torch

from sglab.config import build_run_config
from sglab.models import build_model
from sglab.tasks import build_task
from sglab.tasks.seq2seq import seq2seq_batch
from sglab.train.ensemble import ensemble_key
from sglab.train.evaluate import evaluate
from sglab.train.extend import extend_run
from sglab.train.loop import load_model, train
from tests.test_seq2seq import greedy_exact_match

MODEL = {"name": "lstm_seq2seq", "d_model": 24, "n_layers": 2, "embedding_width": 8,
         "dropout": 0.0}


def build(**fields):
    config = build_run_config({"task": {"name": "scan", "split": "simple"},
                               "model": {**MODEL, **fields},
                               "train": {"steps": 20, "batch_size": 16, "lr_schedule": "constant",
                                         "warmup_steps": 0, "eval_interval": 20,
                                         "log_interval": 20, "checkpoint_interval": 20,
                                         "eval_max_examples": 40}})
    task = build_task(config.task)
    torch.manual_seed(0)
    return config, task, build_model(config.model, len(task.vocab), task.max_length)


@pytest.fixture(scope="module")
def net():
    _, task, model = build()
    return model.eval(), task


def test_teacher_forced_logits_equal_step_by_step_decoding(net):
    model, task = net
    batch = seq2seq_batch(task.split("iid_test").subset(torch.arange(12)), task.eos_id)
    inputs = batch.model_inputs()
    with torch.no_grad():
        together = model(batch.input_ids, **inputs)
        state = model.encode(inputs["source_ids"], inputs["source_mask"])
        steps = []
        for t in range(batch.input_ids.shape[1]):
            logits, state = model.decode_step(batch.input_ids[:, t:t + 1], state)
            steps.append(logits)
    assert torch.allclose(together, torch.cat(steps, 1), atol=1e-5)


def test_padded_source_rows_give_the_state_of_their_own_last_token(net):
    model, task = net
    batch = seq2seq_batch(task.split("iid_test").subset(torch.arange(16)), task.eos_id)
    lengths = batch.source_mask.sum(1)
    short = int(lengths.argmin())
    assert lengths[short] < batch.source_ids.shape[1]  # this row is padded
    with torch.no_grad():
        padded = model.encode(batch.source_ids, batch.source_mask)
        alone = model.encode(batch.source_ids[short:short + 1, : lengths[short]], None)
        # padding with a real token instead of 0 would change an unpacked encoder's state
        wrong = model.encode(batch.source_ids[short:short + 1], None)
    for got, want, other in zip(padded, alone, wrong):
        assert torch.allclose(got[:, short], want[:, 0], atol=1e-6)
        assert not torch.allclose(got[:, short], other[:, 0], atol=1e-4)


def test_greedy_generate_matches_the_one_pass_scorer(net):
    model, task = net
    data = task.split("iid_test").subset(torch.arange(30))
    batch = seq2seq_batch(data, task.eos_id)
    # greedy = the argmax given its own prefix: teacher-force the decoded tokens back in
    steps = int(data.target_lengths.max())
    decoded = torch.tensor(model.generate(batch.source_ids, batch.source_mask, steps,
                                          task.eos_id, suppress_eos=True))
    assert decoded.shape == (30, steps)
    own = torch.cat([torch.full((30, 1), task.eos_id), decoded[:, :-1]], 1)
    with torch.no_grad():
        logits = model(own, **batch.model_inputs())
    logits[..., task.eos_id] = float("-inf")
    assert torch.equal(logits.argmax(-1), decoded)
    exact = greedy_exact_match(model, task, "iid_test", 30).float().mean()
    scored = evaluate(model, task, "iid_test", 64, max_examples=30)["iid_test/exact_match"]
    assert float(exact) == pytest.approx(scored)


def test_free_running_training_reads_its_own_argmax():
    _, task, model = build(teacher_forcing=0.0)
    model.train()  # dropout 0: training and eval compute the same, but the inputs differ
    batch = task.train_batch(8, torch.Generator().manual_seed(1))
    inputs = batch.model_inputs()
    with torch.no_grad():
        free = model(batch.input_ids, **inputs)
        own = torch.cat([batch.input_ids[:, :1], free.argmax(-1)[:, :-1]], 1)
        model.eval()
        on_own = model(own, **inputs)
        on_targets = model(batch.input_ids, **inputs)
    assert torch.allclose(free, on_own, atol=1e-5)
    assert not torch.allclose(free, on_targets, atol=1e-3)
    assert torch.equal(free[:, 0], on_targets[:, 0])  # the first input, <eos>, is given


def test_teacher_forcing_is_drawn_once_per_training_batch():
    _, task, model = build(teacher_forcing=0.5)
    model.train()
    batch = task.train_batch(8, torch.Generator().manual_seed(1))
    inputs = batch.model_inputs()
    with torch.no_grad():
        model.eval()
        forced = model(batch.input_ids, **inputs)
        model.train()
        torch.manual_seed(5)
        draws = torch.rand(40) < 0.5
        torch.manual_seed(5)
        outcomes = [torch.allclose(model(batch.input_ids, **inputs), forced, atol=1e-6)
                    for _ in range(40)]
    assert outcomes == draws.tolist()  # teacher-forced exactly when the draw says so
    assert 0 < sum(outcomes) < 40


def test_init_follows_the_weight_mask_code():
    _, _, model = build(d_model=32)
    hidden = 32
    for lstm in (model.encoder, model.decoder):
        for layer in range(2):
            bias_ih = getattr(lstm, f"bias_ih_l{layer}")
            assert torch.equal(bias_ih[hidden: 2 * hidden], torch.ones(hidden))
            assert not bias_ih[:hidden].any() and not bias_ih[2 * hidden:].any()
            assert not getattr(lstm, f"bias_hh_l{layer}").any()
            cell = getattr(lstm, f"weight_hh_l{layer}")[2 * hidden: 3 * hidden]
            gain = 5 / 3 / math.sqrt(2)
            assert torch.allclose(cell @ cell.T, gain ** 2 * torch.eye(hidden), atol=1e-5)


def test_runs_train_alone_and_resume_to_the_same_weights(tmp_path):
    """Dropout and teacher forcing draw from torch's generator, which the checkpoints keep:
    10 steps extended to 20 equal 20 in one go."""
    config, _, _ = build(dropout=0.5)
    config = build_run_config(config.to_dict(), ["train.eval_max_examples=null",
                                                "train.eval_interval=10", "train.log_interval=10",
                                                "train.checkpoint_interval=10"])
    assert ensemble_key(config) is None  # aten::lstm has no vmap rule
    summary = train(config, tmp_path / "once", printer=None)
    assert summary["status"] == "finished" and "iid_test/exact_match" in summary["final"]
    half = build_run_config(config.to_dict(), ["train.steps=10"])
    first = train(half, tmp_path / "twice", printer=None)
    extended = extend_run(tmp_path / "twice", first["run_id"], 20)
    resumed = train(extended, tmp_path / "twice", printer=None)
    assert resumed["run_id"] == summary["run_id"]
    once = load_model(tmp_path / "once" / summary["run_id"], "last")[1].state_dict()
    twice = load_model(tmp_path / "twice" / resumed["run_id"], "last")[1].state_dict()
    assert all(torch.equal(once[k], twice[k]) for k in once)
