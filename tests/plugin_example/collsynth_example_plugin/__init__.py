"""An example collsynth plugin: an algorithm, a bound and an exporter."""
