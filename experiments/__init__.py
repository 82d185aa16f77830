"""Experiments built on dna-video: `python -m experiments.paper` (reproduce the paper's tables)."""
