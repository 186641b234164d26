"""AVG, MIN, MAX, COUNT(DISTINCT) and HAVING over the other engines' results: one folder per engine (issue 38).

:mod:`~ivm.engines.aggregates.engine` holds :class:`~ivm.engines.aggregates.engine.GroupAggregates`.
"""

from ivm.engines.aggregates.engine import GroupAggregates

__all__ = ["GroupAggregates"]
