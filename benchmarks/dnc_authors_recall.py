"""Train the authors' DNC on their associative recall task, for comparison with sglab's.

Needs a checkout of the thesis code (github.com/RobertCsordas/dnc) at ``--code-dir``; it
imports that checkout's ``Models/DNC.py`` and ``Dataset/Bitmap/AssociativeRecall.py`` and
runs the optimisation of its ``main.py``: inputs as 2x - 1, RMSProp (momentum 0.9, eps
1e-10, L2 1e-5 on weights only), gradient norm clipped to 10 per parameter group, the
loss summed over steps and bits and divided by the batch, one block count per batch.
Every 100 iterations it logs the mean training loss and scores a fixed validation set
(8 batches of 32; bit accuracy and exact match on the 8 data bits of the answer rows), as
sglab's ``dnc_associative_recall`` task does, and writes the log as JSON.

    python benchmarks/dnc_authors_recall.py --code-dir DNC_CHECKOUT --variant DNC-M \\
        --seed 0 --out dnc-m-s0.json

Defaults are the ``dnc-associative-recall`` ``default`` preset's task and sizes (B in
[2, 4], 16 x 16 memory, LSTM 32, lr 3e-4, 3,000 iterations, mask floor 0.1).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
import types

import numpy as np
import torch
import torch.nn.functional as F
from common import parse_with_quick

VARIANTS = ("DNC", "DNC-M", "DNC-D", "DNC-S", "DNC-MD", "DNC-MS", "DNC-DS", "DNC-MDS")


def load_code(code_dir: str):
    """The checkout's model and task. Its plotting module imports visdom and starts a
    server when a task is made; a stand-in module takes visdom's place and the server is
    marked as having failed three times, after which the code no longer starts it."""
    stand_in = types.ModuleType("visdom")
    stand_in.Visdom = type("Visdom", (), {"__init__": lambda self, *a, **k: None,
                                          "__getattr__": lambda self, n: lambda *a, **k: None})
    sys.modules.setdefault("visdom", stand_in)
    sys.path.insert(0, code_dir)
    from Dataset.Bitmap.AssociativeRecall import AssociativeRecall
    from Models.DNC import DNC, LSTMController
    from Utils import Visdom
    Visdom.visdom_fail_count = 3
    return DNC, LSTMController, AssociativeRecall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--code-dir", required=True, help="checkout of RobertCsordas/dnc")
    parser.add_argument("--variant", default="DNC", choices=VARIANTS)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--blocks", type=int, nargs=2, default=(2, 4), metavar=("MIN", "MAX"))
    parser.add_argument("--cells", type=int, default=16)
    parser.add_argument("--cell-width", type=int, default=16)
    parser.add_argument("--controller", type=int, default=32)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--mask-min", type=float, default=0.1)
    parser.add_argument("--out", required=True, help="JSON log to write")
    args = parse_with_quick(parser, {"steps": 100})
    DNC, LSTMController, AssociativeRecall = load_code(args.code_dir)
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    switches = args.variant.removeprefix("DNC").removeprefix("-")
    bits, words, batch_size = 8, 3, 16
    width = bits + 2  # data bits, delimiter, end of input (the code's output is as wide)
    model = DNC(width, width, args.cell_width, args.cells, 1,
                LSTMController([args.controller], out_from_all_layers=True), batch_first=True,
                mask="M" in switches, dealloc_content="D" in switches,
                link_sharpness_control="S" in switches, mask_min=args.mask_min,
                clip_controller=20)
    model.reset_parameters()
    groups = [{"params": [p for n, p in model.named_parameters() if not n.endswith(".bias")]},
              {"params": [p for n, p in model.named_parameters() if n.endswith(".bias")],
               "weight_decay": 0}]
    optimizer = torch.optim.RMSprop(groups, lr=args.lr, weight_decay=1e-5, momentum=0.9,
                                    eps=1e-10)

    def stream(seed: int):
        task = AssociativeRecall(bit_w=bits, block_w=words)
        task.seed = np.random.RandomState(seed)
        lengths = random.Random(seed)

        def batch(size: int):
            blocks = lengths.randint(*args.blocks)
            items = [task[blocks] for _ in range(size)]
            return (torch.tensor(np.stack([i["input"] for i in items])),
                    torch.tensor(np.stack([i["output"] for i in items])))
        return batch

    valid_batch = stream(12345)
    valid = [valid_batch(32) for _ in range(8)]
    train_batch = stream(args.seed)

    @torch.no_grad()
    def evaluate() -> dict[str, float]:
        loss, right, total, exact, rows = 0.0, 0, 0, 0, 0
        for x, y in valid:
            out = model(x * 2 - 1)
            loss += F.binary_cross_entropy_with_logits(out, y, reduction="sum").item() / len(x)
            hit = (out[:, -words:, :bits] > 0).float() == y[:, -words:, :bits]
            right, total = right + int(hit.sum()), total + hit.numel()
            exact, rows = exact + int(hit.flatten(1).all(1).sum()), rows + len(x)
        return {"valid_loss": loss / len(valid), "bit_accuracy": right / total,
                "exact_match": exact / rows}

    log, running, start = [], 0.0, time.time()
    for step in range(1, args.steps + 1):
        x, y = train_batch(batch_size)
        optimizer.zero_grad()
        loss = F.binary_cross_entropy_with_logits(model(x * 2 - 1), y, reduction="sum") / len(x)
        loss.backward()
        for group in groups:
            torch.nn.utils.clip_grad_norm_(group["params"], 10.0)
        optimizer.step()
        running += loss.item()
        if step % 100 == 0:
            log.append({"step": step, "train_loss": running / 100, **evaluate()})
            running = 0.0
            print(json.dumps(log[-1]), f"{time.time() - start:.0f} s", flush=True)
    with open(args.out, "w") as f:
        json.dump({"args": vars(args), "log": log, "seconds": time.time() - start}, f)


if __name__ == "__main__":
    main()
