"""Time of one weight-mask training step (thesis Ch. 3) on an FNN of the given widths.

    python benchmarks/mask_step.py                          # 400-400-200, add_mul
    python benchmarks/mask_step.py --hidden 800 800 800 800 --steps 10

Builds an untrained FNN base run (its weights do not change the cost), then times the
masked model's step as the Trainer takes it: K = 4 mask samples vmapped over batch
slices, forward, penalty, backward, gradient clipping, AdamW on the logits. Prints the
median over ``--steps`` timed steps after two warm-up steps, with the thread count.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch
from common import parse_with_quick

from sglab.config import build_run_config
from sglab.models import build_model
from sglab.tasks import build_task
from sglab.tasks.base import target_loss
from sglab.train.loop import train


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, nargs="+", default=[400, 400, 200])
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--threads", type=int, default=1)
    args = parse_with_quick(parser, {"hidden": [32, 32], "batch": 16, "steps": 3})
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as runs:
        base = build_run_config({"task": {"name": "add_mul", "valid_size": 100},
                                 "model": {"name": "fnn", "hidden": args.hidden},
                                 "train": {"steps": 1, "batch_size": args.batch}})
        run_id = train(base, runs, printer=None)["run_id"]
        config = build_run_config({"task": {"name": "add_mul", "valid_size": 100},
                                   "model": {"name": "masked", "base_run": run_id,
                                             "mask_samples": args.samples},
                                   "train": {"batch_size": args.batch}})
        task = build_task(config.task)
        model = build_model(config.model, len(task.vocab), task.max_length, runs_dir=runs)
        model.train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.0)
        generator = torch.Generator().manual_seed(0)
        times = []
        for step in range(args.steps + 2):
            start = time.perf_counter()
            batch = task.train_batch(args.batch, generator)
            loss = target_loss(model(batch.input_ids), batch.targets) + model.aux_loss
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            if step >= 2:
                times.append(time.perf_counter() - start)
        masked = sum(p.numel() for p in model.parameters())
        print(f"FNN {args.hidden}: {masked:,} masked weights, batch {args.batch}, "
              f"K={args.samples}, {torch.get_num_threads()} thread(s): "
              f"{1000 * statistics.median(times):.1f} ms a mask step (median of {len(times)})")


if __name__ == "__main__":
    main()
