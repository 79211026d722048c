"""Dropout masks inside an ensemble step, member by member.

The ensemble's vmapped step (``StackedStep.step``) must key every member's dropout masks
by that member's own seed and step (:mod:`sglab.models.dropout`). Here the logits each
member computed inside the step are compared with the member's own model run alone under
the same keyed generator (``member_masks(seed, step)``): they are equal, and they differ
from the logits under another member's masks. A step that hands every member member 0's
seed (or a key that ignores the seed) fails.
"""

import torch

from sglab.models.dropout import member_masks
from sglab.train import ensemble
from sglab.train.ensemble import StackedStep
from sglab.train.loop import Trainer
from tests.conftest import tiny_config

SEEDS = (3, 4, 5)
STEP = 7


def _lone_logits(run, batch, seed: int, step: int) -> torch.Tensor:
    run.model.train()
    with torch.no_grad(), member_masks(torch.tensor(seed), torch.tensor(step)):
        return run.model(batch.input_ids, **batch.model_inputs())


def test_each_member_draws_the_masks_of_its_own_seed_in_the_stacked_step(tmp_path, monkeypatch):
    configs = [tiny_config(f"seed={seed}", "model.dropout=0.3", "train.steps=20")
               for seed in SEEDS]
    device = torch.device("cpu")
    tasks: dict = {}
    runs = [Trainer(c, tmp_path, printer=None, execution="ensemble").prepare(device, tasks)
            for c in configs]
    for run in runs:
        run.step = STEP  # the masks are keyed by the step as well
    stepper = StackedStep(runs)
    seen: list[torch.Tensor] = []
    batches: list = []
    real_loss, real_stack = ensemble.training_loss, ensemble._pad_and_stack

    def recording_loss(logits, targets, cfg):  # called per member, outside vmap
        seen.append(logits.detach().clone())
        return real_loss(logits, targets, cfg)

    def recording_stack(member_batches):  # the members' batches, as the step drew them
        batches.extend(member_batches)
        return real_stack(member_batches)

    monkeypatch.setattr(ensemble, "training_loss", recording_loss)
    monkeypatch.setattr(ensemble, "_pad_and_stack", recording_stack)
    stepper.step(runs, [1e-3] * len(runs))
    assert len(seen) == len(batches) == len(runs)

    for k, run in enumerate(runs):
        batch = batches[k]
        rows, width = batch.input_ids.shape
        together = seen[k][:rows, :width]
        own = _lone_logits(run, batch, SEEDS[k], STEP)
        torch.testing.assert_close(together, own, rtol=1e-4, atol=1e-5)
        for j, other_seed in enumerate(SEEDS):  # another member's masks: other logits
            if j != k:
                assert not torch.allclose(own, _lone_logits(run, batch, other_seed, STEP),
                                          atol=1e-3)
        # and the step is part of the key: the same seed one step later masks otherwise
        assert not torch.allclose(own, _lone_logits(run, batch, SEEDS[k], STEP + 1), atol=1e-3)
