"""The reference rate that the benchmarks compare a model's achieved FLOP/s with.

    python benchmarks/matmul_rate.py                  # float32 on the CPU (bf16 too on a GPU)
    python benchmarks/matmul_rate.py --size 4096 --repeats 20
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch
from common import parse_with_quick


def matmul_flops(device: torch.device, dtype: torch.dtype, size: int, repeats: int) -> float:
    """Median FLOP/s of a size x size x size matmul."""
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    for _ in range(3):
        a @ b
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        a @ b
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return 2 * size**3 / statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=2048)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (CPU)")
    args = parse_with_quick(parser, {"size": 256, "repeats": 2})
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtypes = [torch.float32] + ([torch.bfloat16] if device.type == "cuda" else [])
    for dtype in dtypes:
        rate = matmul_flops(device, dtype, args.size, args.repeats)
        print(f"{device.type} {str(dtype).removeprefix('torch.')} {args.size}^3 matmul: "
              f"{rate / 1e9:.1f} GFLOP/s ({torch.get_num_threads()} threads)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
