"""Transformer generalization (thesis ch. 4): SCAN length cutoffs and the Mathematics Dataset."""
