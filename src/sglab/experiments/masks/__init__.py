"""Differentiable weight masks (thesis ch. 3): modularity and weight sharing in trained nets."""
