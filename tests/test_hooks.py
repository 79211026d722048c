"""sglab.analysis.hooks: capture takes the evaluator's batch (so it works for an encoder-decoder
and the DNC), the old call with token ids still works, and edits replace activations."""

import pytest
import torch

from sglab.analysis.hooks import capture, hook_names, run
from sglab.config import build_run_config
from sglab.errors import SglabError
from sglab.models import build_model
from sglab.tasks import build_task
from sglab.train.evaluate import forward_batch
from tests.conftest import tiny_model


def _built(task: dict, model: dict, **train):
    config = build_run_config({"task": task, "model": model, "train": train})
    built = build_task(config.task)
    torch.manual_seed(0)
    network = build_model(config.model, len(built.vocab), built.max_length,
                          **built.model_kwargs()).eval()
    return built, network


def test_capture_on_an_encoder_decoder_reads_the_source_from_the_batch():
    task, model = _built({"name": "scan", "split": "simple"},
                         {"name": "seq2seq", "d_model": 16, "n_heads": 2, "d_ff": 16,
                          "n_layers": 1})
    batch = next(task.eval_batches("iid_test", 5))
    found = capture(model, ["encoder.0.resid_post", "decoder.0.resid_post", "final"], batch)
    with torch.no_grad():
        memory = model.encode(batch.source_ids, batch.source_mask)
    assert torch.equal(found["encoder.0.resid_post"], memory)  # one layer: the encoder output
    assert found["decoder.0.resid_post"].shape[:2] == batch.input_ids.shape
    assert found["final"].shape[:2] == batch.input_ids.shape
    with torch.no_grad():
        plain = forward_batch(model, batch)
    assert torch.equal(run(model, batch), plain)


def test_capture_on_the_dnc_reads_the_bit_rows_of_the_batch():
    task, model = _built({"name": "dnc_repeat_copy", "valid_batches": 1},
                         {"name": "dnc", "memory_cells": 6, "cell_width": 4,
                          "controller_size": 8},
                         loss="bits", target_metric="iid_valid/exact_match")
    batch = next(task.eval_batches("iid_valid", 0))
    found = capture(model, ["dnc.memory", "dnc.usage"], batch)
    rows, steps = batch.input_ids.shape
    assert found["dnc.memory"].shape == (rows, steps, 6, 4)
    assert found["dnc.usage"].shape == (rows, steps, 6)
    # the same pass as the evaluator's; memory is only traced while watched
    with torch.no_grad():
        assert torch.equal(run(model, batch), forward_batch(model, batch))


def test_the_old_call_with_token_ids_and_a_padding_mask_still_works():
    _, model = tiny_model("model.attention_mask=bidirectional")
    model.eval()
    ids = torch.randint(1, 10, (3, 6))
    mask = torch.ones_like(ids, dtype=torch.bool)
    mask[0, 4:] = False
    old = capture(model, ["blocks.*.resid_post"], ids, mask)
    assert sorted(old) == ["blocks.0.resid_post", "blocks.1.resid_post"]
    from sglab.tasks.base import Batch

    new = capture(model, ["blocks.*.resid_post"], Batch(ids, None, mask))
    assert all(torch.equal(old[k], new[k]) for k in old)
    with pytest.raises(SglabError, match="inside the batch"):
        capture(model, ["final"], Batch(ids, None, mask), mask)


def test_zeroing_a_residual_stream_changes_the_output_as_computed_by_hand():
    _, model = tiny_model()  # two causal blocks, tied embeddings
    model.eval()
    ids = torch.randint(1, 10, (4, 7))
    zero = {"blocks.0.resid_post": lambda x: torch.zeros_like(x)}
    edited = run(model, ids, edit=zero)
    with torch.no_grad():
        plain = model(ids)
        x = model.blocks[1](torch.zeros(4, 7, model.config.d_model), None)
        by_hand = model.final(model.ln_f(x))
        by_hand = (by_hand @ model.tok_emb.weight.T if model.head is None
                   else model.head(by_hand))
        if model.output_bias is not None:
            by_hand = by_hand + model.output_bias
    assert not torch.allclose(edited, plain, atol=1e-3)
    torch.testing.assert_close(edited, by_hand)
    # the captured activation is the edited one; the hooks are gone afterwards
    found = capture(model, ["blocks.0.resid_post", "blocks.1.resid_post"], ids, edit=zero)
    assert not found["blocks.0.resid_post"].any()
    torch.testing.assert_close(found["blocks.1.resid_post"], x)
    assert torch.equal(run(model, ids), plain)
    assert not any(point._forward_hooks for point in model.modules()
                   if type(point).__name__ == "HookPoint")


def test_an_edit_may_patch_in_place_and_patterns_select_several_points():
    _, model = tiny_model()
    model.eval()
    ids = torch.randint(1, 10, (2, 5))
    clean = capture(model, ["blocks.*.resid_post"], ids)
    seen = []

    def record_and_scale(x):
        seen.append(x.shape)
        x.mul_(0.5)  # in place: None keeps the (edited) activation

    patched = capture(model, ["blocks.*.resid_post"], ids,
                      edit={"blocks.*.resid_post": record_and_scale})
    assert len(seen) == 2
    torch.testing.assert_close(patched["blocks.0.resid_post"], clean["blocks.0.resid_post"] / 2)
    assert "blocks.0.resid_post" in hook_names(model)
    with pytest.raises(SglabError):
        run(model, ids, edit={"blocks.9.nothing": lambda x: x})
