"""The schedule IR (operations on chunks), its tree form and its JSON format."""

from .ir import OpKind, Schedule, ScheduleBuilder
from .trees import Tree, TreeForm, lower

__all__ = ["OpKind", "Schedule", "ScheduleBuilder", "Tree", "TreeForm", "lower"]
