"""The conjunctive-query model, its parsers and its structural analysis.

Structural tests (each returns a :class:`Verdict` with its witness) live one per
module: :mod:`acyclic`, :mod:`free_connex`, :mod:`hierarchical`,
:mod:`q_hierarchical`, :mod:`weak_q_hierarchical`, :mod:`mixdetect`,
:mod:`core`, :mod:`three_relations`, :mod:`triangle`; orders and trees in
:mod:`qtree`, :mod:`variable_order`, :mod:`join_tree`; planning in :mod:`plan`
and :mod:`explain`.  Submodules are imported on use, so engines can import the
model without pulling in the planner.
"""

from ivm.query.model import Aggregate, Atom, Query
from ivm.query.parse import QuerySyntaxError, parse
from ivm.query.verdict import Verdict

__all__ = ["Aggregate", "Atom", "Query", "QuerySyntaxError", "Verdict", "parse"]
