"""Training step time of the SCAN encoder-decoder with and without length-grouped batches.

    python benchmarks/seq2seq_batching.py                  # scan-length default model
    python benchmarks/seq2seq_batching.py --groups 1 2 4 8 --steps 60

For each ``task.length_groups`` value, builds the scan-length default run config
(d=64, 3+3 layers, batch 64, cutoff 26), and times optimizer steps of the absolute and
the relative Transformer on one thread. Settings are measured in interleaved rounds in
one process, so machine noise hits them alike; the report is the median step time,
the ratio to plain random batches, and the share of computed target and source
positions that are padding.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from common import parse_with_quick

from sglab import registry
from sglab.config import build_run_config
from sglab.models import build_model
from sglab.tasks import build_task
from sglab.tasks.base import IGNORE, target_loss


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--steps", type=int, default=40, help="timed steps per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parse_with_quick(parser, {"groups": [1, 2], "steps": 2, "rounds": 1})
    torch.set_num_threads(args.threads)
    base = registry.experiment("scan-length").presets["default"]["base"]

    setups = {}
    for pos in ("sinusoidal", "relative"):
        for groups in args.groups:
            config = build_run_config(base, [f"task.length_groups={groups}",
                                             f"model.pos_encoding={pos}"])
            task = build_task(config.task)
            torch.manual_seed(0)
            model = build_model(config.model, len(task.vocab), task.max_length).train()
            optimizer = torch.optim.Adam(model.parameters(), config.train.lr)
            setups[(pos, groups)] = dict(task=task, model=model, optimizer=optimizer,
                                         batch=config.train.batch_size,
                                         generator=torch.Generator().manual_seed(0),
                                         times=[], padding=[])

    def step(s) -> None:
        batch = s["task"].train_batch(s["batch"], s["generator"])
        start = time.perf_counter()
        logits = s["model"](batch.input_ids, **batch.model_inputs())
        loss = target_loss(logits, batch.targets)
        s["optimizer"].zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(s["model"].parameters(), 5.0)
        s["optimizer"].step()
        s["times"].append(time.perf_counter() - start)
        positions = batch.targets.numel() + batch.source_mask.numel()
        real = int((batch.targets != IGNORE).sum()) + int(batch.source_mask.sum())
        s["padding"].append(1 - real / positions)

    for s in setups.values():  # warm-up, untimed
        for _ in range(5):
            step(s)
        s["times"].clear()
        s["padding"].clear()
    for round_ in range(args.rounds):
        for s in setups.values():
            for _ in range(args.steps):
                step(s)
        print(f"round {round_ + 1}/{args.rounds} done", flush=True)

    results = []
    for (pos, groups), s in setups.items():
        median = statistics.median(s["times"])
        plain = statistics.median(setups[(pos, 1)]["times"]) if (pos, 1) in setups else None
        results.append({"pos_encoding": pos, "length_groups": groups,
                        "median_step_ms": round(1000 * median, 2),
                        "speedup_vs_plain": round(plain / median, 2) if plain else None,
                        "padding_share": round(statistics.mean(s["padding"]), 3)})
        print(f"{pos:>10}  length_groups={groups:<2}  {1000 * median:6.1f} ms/step  "
              f"padding {statistics.mean(s['padding']):5.1%}"
              + (f"  x{plain / median:.2f} vs plain" if plain else ""))
    print(json.dumps({"threads": args.threads, "torch": torch.__version__, "results": results}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
