"""Analyses: pure functions on models and tensors (no training code)."""
