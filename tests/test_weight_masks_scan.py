"""Weight masks on an encoder-decoder (SCAN, thesis Sec. 3.3): a masked seq2seq run trains
and decodes under its masks; the per-token output-layer measure; the masks-scan experiment
(its quick preset end to end, its parameters, its claims on constructed measures)."""

import copy

import pytest
import torch
import yaml

from sglab.analysis import mask_measures as mm
from sglab.analysis import weight_masks as wm
from sglab.config import build_run_config
from sglab.errors import SglabError
from sglab.experiments.base import run_experiment
from sglab.experiments.claims import Verdict, judge_all
from sglab.models import build_model
from sglab.registry import experiment
from sglab.tasks import build_task
from sglab.tasks.scan import ACTIONS
from sglab.tasks.seq2seq import seq2seq_batch
from sglab.train.evaluate import evaluate
from sglab.train.loop import train
from tests.test_seq2seq import greedy_exact_match


def settings(steps, lr=1e-3, batch=16):
    return {"steps": steps, "batch_size": batch, "lr": lr, "lr_schedule": "constant",
            "warmup_steps": 0, "eval_interval": steps, "log_interval": steps,
            "checkpoint_interval": steps, "eval_max_examples": 50}


SEQ2SEQ = {"name": "seq2seq", "d_model": 16, "d_ff": 32, "n_heads": 2, "n_layers": 1,
           "dropout": 0.0, "tie_embeddings": False}
# the Lake-Baroni LSTM (the thesis's Fig. 3.5 net), with dropout between its layers: the
# frozen base stays in eval mode under the mask
LSTM_SEQ2SEQ = {"name": "lstm_seq2seq", "d_model": 16, "n_layers": 2, "embedding_width": 8,
                "dropout": 0.5}


@pytest.fixture(scope="module", params=[SEQ2SEQ, LSTM_SEQ2SEQ], ids=["transformer", "lstm"])
def base_run(request, tmp_path_factory):
    runs = tmp_path_factory.mktemp("runs")
    config = build_run_config({"task": {"name": "scan", "split": "simple"},
                               "model": request.param, "train": settings(30)})
    return runs, train(config, runs, printer=None)["run_id"]


def masked_config(run_id, split="addprim_jump", steps=4, **model):
    return build_run_config({"task": {"name": "scan", "split": split},
                             "model": {"name": "masked", "base_run": run_id, **model},
                             "train": settings(steps, 1e-2)})


@pytest.fixture(scope="module")
def masked(base_run):
    runs, run_id = base_run
    config = masked_config(run_id)
    task = build_task(config.task)
    model = build_model(config.model, len(task.vocab), task.max_length, runs_dir=runs)
    return model.eval(), task


def zeroed_copy(net, masks):
    """A copy of ``net`` whose weights are w * mask (the reference for masked decoding)."""
    copied = copy.deepcopy(net)
    with torch.no_grad():
        for name, parameter in copied.named_parameters():
            if name in masks:
                parameter.mul_(masks[name])
    return copied


def test_separate_output_layer_is_masked_embeddings_are_not(masked):
    model, _ = masked
    assert "output.weight" in model.masked_names
    assert not any("embedding" in n for n in model.masked_names)
    assert not hasattr(model.base, "output_bias")


def test_generate_decodes_under_the_masks(masked):
    model, task = masked
    batch = seq2seq_batch(task.split("ood_test").subset(torch.arange(40)), task.eos_id)
    args = (batch.source_ids, batch.source_mask, 12, task.eos_id)
    ones = {n: torch.ones_like(m) for n, m in model.final_masks().items()}
    with model.use_masks(ones):
        assert model.generate(*args) == model.base.generate(*args)
    torch.manual_seed(0)
    random = {n: (torch.rand_like(m) < 0.5).float() for n, m in ones.items()}
    for chosen in (random, wm.invert(random)):
        reference = zeroed_copy(model.base, chosen)
        with model.use_masks(chosen):
            decoded = model.generate(*args)
            logits = model(batch.input_ids, **batch.model_inputs())
        assert decoded == reference.generate(*args)
        assert torch.allclose(logits, reference(batch.input_ids, **batch.model_inputs()),
                              atol=1e-5)
        assert not torch.allclose(logits, model.base(batch.input_ids, **batch.model_inputs()),
                                  atol=1e-3)
    # without use_masks: the final masks 1[l > 0]
    final = model.final_masks()
    assert model.generate(*args) == zeroed_copy(model.base, final).generate(*args)


def test_greedy_decoding_agrees_with_the_scorer_under_a_mask(masked):
    model, task = masked
    torch.manual_seed(1)
    random = {n: (torch.rand_like(m) < 0.8).float() for n, m in model.final_masks().items()}
    with model.use_masks(random):
        decoded = greedy_exact_match(model, task, "ood_test", 60).float().mean()
        scored = evaluate(model, task, "ood_test", 64, max_examples=60)["ood_test/exact_match"]
    assert float(decoded) == pytest.approx(scored)


def test_mask_samples_slice_encoder_and_decoder_inputs_alike(masked):
    model, task = masked
    batch = task.train_batch(8, torch.Generator().manual_seed(2))
    torch.manual_seed(3)
    masks = {n: (torch.rand(4, *m.shape) < 0.7).float() for n, m in model.final_masks().items()}
    together = model.forward_masked(batch.input_ids, masks, **batch.model_inputs())
    for k in range(4):
        rows = slice(2 * k, 2 * k + 2)
        inputs = {n: v[rows] for n, v in batch.model_inputs().items() if v is not None}
        alone = model.forward_masked(batch.input_ids[rows], {n: m[k] for n, m in masks.items()},
                                     **inputs)
        assert torch.allclose(together[rows], alone, atol=1e-5)


def test_masked_seq2seq_run_trains_on_another_split(base_run):
    runs, run_id = base_run
    summary = train(masked_config(run_id, steps=4), runs, printer=None)
    assert summary["status"] == "finished" and "ood_test/exact_match" in summary["final"]
    state = torch.load(runs / summary["run_id"] / "checkpoints" / "last.pt",
                       weights_only=True)["model"]
    assert "logits.output__weight" in state
    assert not torch.equal(state["logits.output__weight"],
                           torch.full_like(state["logits.output__weight"], 2.0))


def test_a_mask_on_a_net_that_is_no_encoder_decoder_is_refused(tmp_path):
    fnn = build_run_config({"task": {"name": "add_mul", "valid_size": 100},
                            "model": {"name": "fnn", "hidden": [8]}, "train": settings(2)})
    run_id = train(fnn, tmp_path, printer=None)["run_id"]
    with pytest.raises(SglabError, match="needs an encoder-decoder model"):
        train(masked_config(run_id, steps=2), tmp_path, printer=None)
    mask = build_run_config({"task": {"name": "add_mul", "valid_size": 100},
                             "model": {"name": "masked", "base_run": run_id},
                             "train": settings(2)})
    model = build_model(mask.model, 13, 5, runs_dir=tmp_path)
    with pytest.raises(SglabError, match="has no generate"):
        model.generate(torch.ones(2, 5, dtype=torch.long), None, 3, 1)
    with pytest.raises(SglabError, match="no such run"):
        train(masked_config("missing-run", steps=2), tmp_path, printer=None)


def test_removed_per_row_counts_against_the_reference():
    reference = torch.tensor([[1.0, 1, 1, 1], [1, 1, 0, 0], [0, 0, 0, 0]])
    mask = torch.tensor([[1.0, 0, 1, 0], [1, 1, 1, 1], [1, 1, 1, 1]])
    # row 0: 2 of 4 kept removed; row 1: none; row 2: nothing kept to remove
    assert wm.removed_per_row(reference, mask).tolist() == [0.5, 0.0, 0.0]
    assert wm.removed_per_row(reference, 1 - reference).tolist() == [1.0, 1.0, 0.0]


def test_output_rows_per_token_against_the_reference():
    reference = torch.tensor([[1.0, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]])
    split = torch.tensor([[1.0, 0, 1, 0], [1, 1, 1, 1], [0, 0, 0, 0]])
    rows = mm.output_rows(reference, {"full": reference, "split": split}, [0, 2], ["a", "c"])
    assert rows["kept"] == {"full": {"a": 1.0, "c": 0.25}, "split": {"a": 0.5, "c": 0.0}}
    assert rows["removed"] == {"full": {"a": 0.0, "c": 0.0}, "split": {"a": 0.5, "c": 1.0}}


@pytest.mark.parametrize("network", ["transformer", "lstm"])
def test_masks_scan_quick_preset_end_to_end(network, tmp_path):
    results = run_experiment(experiment("masks-scan"), "quick", tmp_path / "out",
                             tmp_path / "runs", workers=1, threads=1, printer=lambda line: None,
                             params=[f"network={network}"])
    splits = results["params"]["splits"]
    base = [x["run_id"] for x in results["labels"] if x["role"] == "base"]
    masks = {x["split"]: x["run_id"] for x in results["labels"] if x["role"] == "mask"}
    assert len(base) == 1 and set(masks) == set(splits) == {"simple", "addprim_jump"}
    for split, run_id in masks.items():  # each mask trains on its split, on the one base net
        config = (tmp_path / "runs" / run_id / "config.yaml").read_text()
        assert f"base_run: {base[0]}" in config and f"split: {split}" in config
    # Fig. B.8: a net like the base, trained directly on each split other than simple
    direct = {x["split"]: x["run_id"] for x in results["labels"] if x["role"] == "direct"}
    assert set(direct) == {"addprim_jump"}
    config = (tmp_path / "runs" / direct["addprim_jump"] / "config.yaml").read_text()
    model = {"transformer": "seq2seq", "lstm": "lstm_seq2seq"}[network]
    assert "split: addprim_jump" in config and f"name: {model}" in config
    beta = results["params"]["beta" if network == "transformer" else "lstm_beta"]
    mask = yaml.safe_load((tmp_path / "runs" / masks["simple"] / "config.yaml").read_text())
    assert mask["model"]["beta"] == beta
    claims = {c["id"]: c for c in results["claims"]}
    assert list(claims) == ["full-mask-keeps-accuracy", "split-mask-loses-accuracy",
                            "jump-output-weights-removed", "pretraining-beats-direct-training"]
    for claim in claims.values():  # the quick net learns nothing: no claim is judged on it
        assert claim["verdict"] == "NOT MEASURED", claim["evidence"]
        assert "exact match on the simple test set" in claim["evidence"]
        assert claim["source"].startswith("001_76659a6d281e669d.txt, ")
    accuracy, output = results["sections"][0]["tables"][:2]
    assert [row[0] for row in accuracy["rows"]] == splits
    assert [row[0] for row in output["rows"]][:4] == ["I_WALK", "I_LOOK", "I_RUN", "I_JUMP"]
    assert output["columns"][-1] == "removed by addprim_jump mask"
    assert accuracy["columns"][-1] == "trained on the split"
    assert accuracy["rows"][0][-1] == "(= no mask)"
    assert 0 <= float(accuracy["rows"][1][-1].split()[0]) <= 100  # exact match [%], add jump
    assert len(results["sections"][0]["figures"]) == 2


def test_masks_scan_splits_must_be_known_and_include_the_full_data_split():
    scan = experiment("masks-scan")
    for splits in ("[addprim_jump]", "[simple, jump]", "[simple, simple]"):
        with pytest.raises(SglabError, match="include 'simple'"):
            scan.preset("quick", changes=[f"splits={splits}"])
    with pytest.raises(SglabError, match="network = 'gru'"):
        scan.preset("quick", changes=["network=gru"])


def scan_seed(full_keeps: float, jump_full: float, jump_split: float,
              unmasked: float = 0.99) -> dict:
    """Measures of one seed (the unmasked net at ``unmasked`` everywhere): the full-data
    mask keeps ``full_keeps`` of it on simple; on the add-jump test set the full-data mask
    scores ``jump_full``, the add-jump mask ``jump_split``, a net trained on the split 0.01;
    the add-jump mask removes 45% of I_JUMP's output weights and none of the others'."""
    removed = {a: 0.0 for a in ACTIONS} | {"I_JUMP": 0.45}
    return {"accuracy": {"simple": {"none": unmasked, "full": unmasked * full_keeps},
                         "addprim_jump": {"none": unmasked, "full": jump_full,
                                          "split": jump_split, "direct": 0.01}},
            "output_removed": {"addprim_jump": removed}}


def scan_verdicts(seeds) -> dict:
    scan = experiment("masks-scan")
    params = scan.preset("default", changes=["splits=[simple,addprim_jump]"])
    return {c.id: c for c in judge_all(scan.spec.claims, scan.measured(params, seeds))}


@pytest.mark.parametrize(("seeds", "gap"), [
    ([scan_seed(0.99, 0.98, 0.3)], Verdict.REPRODUCES),  # Fig. 3.5a: a valid mask, a gap
    ([scan_seed(0.99, 0.98, 0.9)], Verdict.FAILS),  # a valid full-data mask, no gap
    # the gap of a full-data mask that has broken the task (58% kept) is no evidence
    ([scan_seed(0.58, 0.66, 0.24)], Verdict.NOT_MEASURED),
    ([scan_seed(0.99, 0.98, 0.3), scan_seed(0.90, 0.9, 0.3)], Verdict.NOT_MEASURED),
])
def test_masks_scan_compares_split_masks_only_with_a_valid_full_data_mask(seeds, gap):
    claims = scan_verdicts(seeds)
    assert claims["split-mask-loses-accuracy"].verdict == gap
    valid = gap != Verdict.NOT_MEASURED
    assert claims["full-mask-keeps-accuracy"].verdict == (
        Verdict.REPRODUCES if valid else Verdict.FAILS)
    if not valid:
        assert "B.3.3" in claims["split-mask-loses-accuracy"].evidence
    # judged whatever the masks' accuracy
    assert claims["jump-output-weights-removed"].verdict == Verdict.REPRODUCES
    assert claims["pretraining-beats-direct-training"].verdict == Verdict.REPRODUCES


def test_masks_scan_claims_wait_for_a_net_that_solves_simple():
    claims = scan_verdicts([scan_seed(0.99, 0.98, 0.3), scan_seed(0.99, 0.98, 0.3, 0.5)])
    assert all(c.verdict == Verdict.NOT_MEASURED for c in claims.values())
    assert "0.500 exact match on the simple test set" in claims["full-mask-keeps-accuracy"].evidence
