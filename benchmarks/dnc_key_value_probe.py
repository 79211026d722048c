"""Small controlled key-value runs of the DNC outside the trainer (one process, one thread),
to separate the model from the run machinery when DNC-M does or does not leave the ~0.69
bit-accuracy plateau.

    python benchmarks/dnc_key_value_probe.py --variant DNC-M --mask-min 0.1 --mask-bias 1
    python benchmarks/dnc_key_value_probe.py --variant DNC --data-seed 0   # trainer's stream

Same model, task, loss (BCE summed / batch rows), RMSProp (alpha 0.99, eps 1e-10, momentum,
L2 1e-5 on matrices) and global-norm clip 10 as ``dnc-key-value``; the weights are drawn
after ``torch.manual_seed(--seed)``, the training batches from a generator seeded with
``--data-seed`` (the trainer uses the run seed for both; default here 1000 + seed). Prints
one JSON line: validation bit accuracy and exact match every ``--every`` iterations.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from common import parse_with_quick

from sglab.models.dnc import DNC, DNCConfig
from sglab.tasks.base import target_loss
from sglab.tasks.dnc_bits import KeyValueConfig, KeyValueTask
from sglab.train.evaluate import evaluate


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--variant", default="DNC-M")
    p.add_argument("--steps", type=int, default=1500)
    p.add_argument("--every", type=int, default=250)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data-seed", type=int, default=None)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--optimizer", choices=["rmsprop", "adam"], default="rmsprop")
    p.add_argument("--half-bits", type=int, default=4)
    p.add_argument("--words", type=int, nargs=2, default=[2, 4])
    p.add_argument("--cells", type=int, default=8)
    p.add_argument("--width", type=int, default=16)
    p.add_argument("--controller", type=int, default=32)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--mask-min", type=float, default=0.0)
    p.add_argument("--mask-bias", type=float, default=0.0)
    a = parse_with_quick(p, {"steps": 20, "every": 10})
    torch.set_num_threads(1)
    torch.manual_seed(a.seed)
    task = KeyValueTask(KeyValueConfig(half_bits=a.half_bits, words=tuple(a.words),
                                       valid_batches=4, valid_batch_size=32))
    extra = ({"mask_min": a.mask_min, "mask_bias_init": a.mask_bias}
             if "M" in a.variant.removeprefix("DNC") else {})
    model = DNC(DNCConfig(variant=a.variant, memory_cells=a.cells, cell_width=a.width,
                          controller_size=a.controller, **extra), 1, **task.model_kwargs())
    groups = [{"params": [q for q in model.parameters() if q.dim() >= 2], "weight_decay": 1e-5},
              {"params": [q for q in model.parameters() if q.dim() < 2], "weight_decay": 0.0}]
    if a.optimizer == "rmsprop":
        opt = torch.optim.RMSprop(groups, lr=a.lr, alpha=0.99, eps=1e-10, momentum=a.momentum)
    else:
        opt = torch.optim.Adam(groups, lr=a.lr)
    data_seed = 1000 + a.seed if a.data_seed is None else a.data_seed
    g = torch.Generator().manual_seed(data_seed)
    start, curve = time.time(), []
    for step in range(1, a.steps + 1):
        batch = task.sample(g, a.batch)
        loss = target_loss(model(batch.inputs), batch.targets, "bits")
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
        opt.step()
        if step % a.every == 0 or step == a.steps:
            r = evaluate(model, task, "iid_valid", 0)
            curve.append([step, round(r["iid_valid/bit_accuracy"], 3),
                          round(r["iid_valid/exact_match"], 3)])
    print(json.dumps({"args": vars(a), "data_seed": data_seed, "curve": curve,
                      "seconds": round(time.time() - start, 1)}))


if __name__ == "__main__":
    main()
