"""CTL++ (thesis ch. 6): composing functions never seen together."""
