"""``python -m bench SUITE``: the collsynth benchmark runner (see collsynth.benchmark)."""
