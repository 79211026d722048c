"""The improved Differentiable Neural Computer (thesis ch. 2)."""
