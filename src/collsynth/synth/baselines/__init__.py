"""Classic baselines: ring, double binary tree, hierarchical ring, recursive doubling/halving,
Bruck and direct AllToAll, and the shortest-path heuristic of seed 000 §5."""
