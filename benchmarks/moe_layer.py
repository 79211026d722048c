"""One MLP layer vs one sigma-MoE layer: forward + backward time, analytic FLOPs and
activation memory (thesis Fig. 7.2 / F.5 / F.6 protocol on CPU or GPU).

    python benchmarks/moe_layer.py                       # CPU sizes, N_E sweep
    python benchmarks/moe_layer.py --tokens 32768 --d-model 512 --device cuda   # thesis sizes

For each N_E (d_ff = N_E G for the dense layer, K and G fixed) it times one warm-up and
then the mean of ``--repeats`` forward+backward passes of a bias-free dense MLP and of the
sigma-MoE layer (``masked`` and ``sorted`` routing), and prints analytic forward FLOPs per
token (dense 2*2*d*d_ff; MoE 2*d*N_E + 2*2*d*G*K) and activations kept per token (dense
d_ff; MoE K*G hidden values plus N_E scores). On a GPU it also reports the peak memory
increase of the forward pass. A CPU has no CVMM kernel: both PyTorch routings are
expected to lose to the dense layer at these sizes.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from common import parse_with_quick

from sglab.models.ffn import MLP
from sglab.models.moe import MoE


def time_layer(layer: torch.nn.Module, x: torch.Tensor, repeats: int) -> tuple[float, float]:
    """(seconds per forward+backward, forward memory increase in MiB; 0 on CPU)."""
    cuda = x.device.type == "cuda"

    def step() -> float:
        if cuda:
            torch.cuda.synchronize()
            before = torch.cuda.memory_allocated()
        out = layer(x)
        memory = (torch.cuda.memory_allocated() - before) / 2**20 if cuda else 0.0
        out.square().mean().backward()
        if cuda:
            torch.cuda.synchronize()
        return memory

    memory = step()  # warm-up
    start = time.perf_counter()
    for _ in range(repeats):
        step()
    return (time.perf_counter() - start) / repeats, memory


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--expert-size", type=int, default=64)
    parser.add_argument("--top-k", type=int, default=2)
    parser.add_argument("--experts", type=int, nargs="+", default=[4, 8, 16, 32])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    args = parse_with_quick(parser, {"tokens": 256, "d_model": 32, "expert_size": 16,
                                     "experts": [4], "repeats": 1})
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    d, g, k = args.d_model, args.expert_size, args.top_k
    x = torch.randn(args.tokens, d, device=args.device, requires_grad=True)
    rows = []
    for n in args.experts:
        d_ff = n * g
        layers = {"dense": MLP(d, d_ff, False, "relu", 0.0),
                  "moe masked": MoE(d, n, g, k, n_layers=4, impl="masked"),
                  "moe sorted": MoE(d, n, g, k, n_layers=4, impl="sorted")}
        row = {"experts": n, "d_ff": d_ff,
               "dense flops/token": layers["dense"].forward_flops_per_token(),
               "moe flops/token": layers["moe sorted"].forward_flops_per_token(),
               "dense activations/token": d_ff, "moe activations/token": k * g + n}
        for name, layer in layers.items():
            seconds, memory = time_layer(layer.to(args.device), x, args.repeats)
            row[f"{name} ms"] = round(1000 * seconds, 2)
            if args.device != "cpu":
                row[f"{name} MiB"] = round(memory, 1)
        rows.append(row)
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
