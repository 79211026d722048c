"""Breaking symmetry when training transformers (Zuo & Guerzhoy 2024)."""
