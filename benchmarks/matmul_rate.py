"""The reference rate that the benchmarks compare a model's achieved FLOP/s with."""

from __future__ import annotations

import statistics
import time

import torch


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
