"""What a lower bound is and where providers register: :class:`Bound` (one certified time and
what binds it), :class:`BoundResult` (all of them for one size; ``.best`` binds),
:data:`PROVIDERS` and :func:`register` (the registry, in registration order)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ..collective import Collective
from ..topology.model import Topology


@dataclass
class Bound:
    kind: str
    time_s: float
    witness: str = ""  # the rank, pair or cut that binds
    detail: dict = field(default_factory=dict)


@dataclass
class BoundResult:
    size: float
    bounds: list[Bound]

    @property
    def best(self) -> Bound:
        return max(self.bounds, key=lambda b: b.time_s)

    @property
    def time_s(self) -> float:
        return self.best.time_s

    @property
    def kind(self) -> str:
        return self.best.kind

    def algbw(self) -> float:
        return self.size / self.time_s if self.time_s > 0 else float("inf")

    def to_dict(self) -> dict:
        b = self.best
        return {
            "size_bytes": self.size,
            "time_s": b.time_s,
            "algbw_Bps": self.algbw(),
            "kind": b.kind,
            "witness": b.witness,
            "bounds": [
                {"kind": x.kind, "time_s": x.time_s, "witness": x.witness, **x.detail}
                for x in self.bounds
            ],
        }


Provider = Callable[[Topology, Collective, float], list[Bound]]
PROVIDERS: dict[str, Provider] = {}


def register(name: str):
    """Decorator: register ``func(topology, collective, size) -> [Bound, ...]`` as provider
    ``name``."""

    def deco(func: Provider) -> Provider:
        PROVIDERS[name] = func
        return func

    return deco
