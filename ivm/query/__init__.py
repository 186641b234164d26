"""The conjunctive-query model, its parsers and its structural analysis."""

from ivm.query.model import Atom, Query
from ivm.query.parse import parse

__all__ = ["Atom", "Query", "parse"]
