"""Initialization scale decides reasoning vs memorizing (Zhang et al. 2024)."""
