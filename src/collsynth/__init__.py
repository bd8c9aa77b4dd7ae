"""collsynth: design, bound, verify, simulate and export collective-communication schedules."""

__version__ = "0.1.0"
