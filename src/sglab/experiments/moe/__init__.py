"""Approximating two-layer feedforward networks (thesis ch. 7): Top-K, PKM, sigma-MoE."""
