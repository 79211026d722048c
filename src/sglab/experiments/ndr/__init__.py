"""The Neural Data Router (thesis ch. 5): CTL, simple arithmetic and ListOps."""
