"""Topology model, zoo, file formats and spec strings."""

from .model import Link, Node, NodeKind, Topology, TopologyBuilder
from .spec import load_topology, parse_spec

__all__ = ["Link", "Node", "NodeKind", "Topology", "TopologyBuilder", "load_topology", "parse_spec"]
