"""Stage 1 sketch enumeration for SyCCL over the detected dimensions.

A sketch is a sequence of stages; stage k moves data inside the groups of one dimension (every
group of that dimension runs the same sub-demand: mapping-based replication). Candidates are the
sequences over the dimensions of length 1..``max_stages`` (3 for AllToAll, the paper's cap), and
the rules prune them:

* **P2 consistency** (uniform destination:source ratio): every stage uses whole groups of one
  dimension, so every source of a stage has the same number of destinations; a sequence that
  does not visit every dimension cannot meet the demand (some rank pairs never exchange data)
  and is dropped.
* **P3 relay limit**: a stage that delivers nothing new (the same dimension again, after which
  every group member already holds what the stage would move) only relays; such sequences
  exceed the relay limit and are dropped. AllToAll blocks are relayed at most
  ``len(dims) - 1`` times (one hop per dimension).
* **P1 isomorphism dedup**: two sequences that map onto each other by a permutation of
  dimensions with equal group size and equal capacity are the same sketch up to relabelling;
  only the first (in sorted order) is kept.

On a two-dimensional island x rail fabric the survivors are the two orders ``rail>island`` and
``island>rail`` (and none on the second when both dimensions are isomorphic).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from itertools import permutations, product

from ...collective import CollKind


@dataclass(frozen=True)
class Sketch:
    dims: tuple[str, ...]

    def describe(self) -> str:
        return ">".join(self.dims)


def enumerate_sketches(
    sizes: dict[str, int],
    kind: CollKind,
    max_stages: int | None = None,
    caps: Mapping[str, float | Fraction] | None = None,
) -> list[Sketch]:
    """Surviving sketches, in a fixed order (rail-first before island-first)."""
    dims = sorted(sizes, key=lambda d: (d != "rail", d))
    if max_stages is None:
        max_stages = 3 if kind is CollKind.ALLTOALL else len(dims) + 1
    out: list[Sketch] = []
    seen: set[tuple[str, ...]] = set()
    # dimension relabellings that preserve group size and capacity (P1)
    relabel = []
    for perm in permutations(dims):
        mp = dict(zip(dims, perm))
        if all(sizes[d] == sizes[mp[d]] and (caps is None or caps[d] == caps[mp[d]]) for d in dims):
            relabel.append(mp)
    for length in range(1, max_stages + 1):
        for seq in product(dims, repeat=length):
            if set(seq) != set(dims):
                continue  # P2: some pairs never meet
            if len(set(seq)) != len(seq):
                continue  # P3: a stage that only relays
            if any(tuple(mp[d] for d in seq) in seen for mp in relabel):
                continue  # P1: isomorphic to a kept sketch
            seen.add(seq)
            out.append(Sketch(seq))
    return out
