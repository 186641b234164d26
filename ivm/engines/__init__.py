"""The engines: one folder per algorithm with its compiled kernels beside it, all behind :class:`Engine`.

Shared below them: :mod:`~ivm.engines.base` (the protocol), :mod:`~ivm.engines.keys` (key values as
int64 codes) and :mod:`~ivm.engines.memory` (the bytes of a Python state, for ``stats()``).

Each engine computes some aggregates (:data:`COMPUTES`, by ``Aggregate.kind``)
and no HAVING; every other query it refuses by name, through its own
``refuses`` (wrapped here, so the planner, :func:`ivm.maintain` and the
engine's constructor all say so) instead of computing something else.  AVG,
MIN, MAX, COUNT(DISTINCT) and HAVING are the ``aggregates`` engine's
(:mod:`ivm.engines.aggregates.engine`), which computes them from these engines'
results.
"""

from collections.abc import Callable

from ivm.engines.aggregates.engine import GroupAggregates
from ivm.engines.base import Engine, EngineRefused
from ivm.engines.first_order.engine import FirstOrderIVM
from ivm.engines.first_order.general import FirstOrderDelta
from ivm.engines.fivm import FIVM
from ivm.engines.ivm_eps import IVMEps
from ivm.engines.ivm_eps.adaptive import IVMEpsAdaptive
from ivm.engines.ivm_eps.four_path import IVMEps4Path
from ivm.engines.ivm_eps.hybrid import SkewHybrid
from ivm.engines.ivm_eps.loomis_whitney import IVMEpsLW
from ivm.engines.ivm_eps.three_relations import IVMEps3R
from ivm.engines.propagation import PropagationEngine
from ivm.engines.qhier.engine import QHierEngine
from ivm.query.model import RING_KINDS, Query

ENGINES: dict[str, type[Engine]] = {
    FirstOrderIVM.name: FirstOrderIVM,
    FIVM.name: FIVM,
    FirstOrderDelta.name: FirstOrderDelta,
    IVMEps.name: IVMEps,
    IVMEpsAdaptive.name: IVMEpsAdaptive,
    IVMEps3R.name: IVMEps3R,
    IVMEpsLW.name: IVMEpsLW,
    IVMEps4Path.name: IVMEps4Path,
    SkewHybrid.name: SkewHybrid,
    QHierEngine.name: QHierEngine,
    PropagationEngine.name: PropagationEngine,
    GroupAggregates.name: GroupAggregates,
}

_COUNT = frozenset({"count"})
#: the aggregate kinds each engine computes in its ring; the ``aggregates`` engine computes every kind, and HAVING
COMPUTES: dict[str, frozenset[str]] = {
    FirstOrderIVM.name: _COUNT,
    FIVM.name: RING_KINDS,
    FirstOrderDelta.name: RING_KINDS,
    IVMEps.name: _COUNT,
    IVMEpsAdaptive.name: _COUNT,
    IVMEps3R.name: _COUNT,
    IVMEpsLW.name: _COUNT,
    IVMEps4Path.name: _COUNT,
    SkewHybrid.name: _COUNT,
    QHierEngine.name: _COUNT,
    PropagationEngine.name: _COUNT,
}

_NAMES = {"count": "COUNT(*)", "sum": "SUM", "covariance": "COVAR"}


def aggregate_refusal(name: str, query: Query) -> str | None:
    """Why engine ``name`` cannot compute ``query``'s aggregate or HAVING, or ``None``.

    >>> from ivm.query.model import Aggregate
    >>> aggregate_refusal("fivm", Query("Q", ("a",), (), Aggregate("min", ("b",))))
    "it computes COUNT(*), SUM and COVAR, not MIN(b) (the 'aggregates' engine does, from the COUNT grouped by a, b)"
    """
    kinds = COMPUTES.get(name)
    if kinds is None:
        return None
    aggregate = query.aggregate
    if aggregate.kind not in kinds:
        names = [_NAMES[k] for k in sorted(kinds, key=list(_NAMES).index)]
        computed = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
        source = (
            f"the COUNT grouped by {', '.join(dict.fromkeys((*query.free, *aggregate.variables)))}"
            if aggregate.kind in ("min", "max", "count_distinct")
            else "the count and sum of each group"
        )
        if aggregate.kind in RING_KINDS:  # e.g. a SUM over a triangle on first_order
            return f"it computes {computed}, not {aggregate} (fivm does, in its ring)"
        return f"it computes {computed}, not {aggregate} (the 'aggregates' engine does, from {source})"
    if query.having:
        having = ", ".join(str(c) for c in query.having)
        return f"it has no HAVING ({having}; the 'aggregates' engine filters the groups)"
    return None


def _computing_only(cls: type[Engine]) -> None:
    """Make ``cls.refuses`` refuse, by name, the aggregates ``cls`` does not compute and HAVING."""
    own: Callable[[type[Engine], Query], str | None] = cls.refuses.__func__  # type: ignore[attr-defined]

    def refuses(klass: type[Engine], query: Query) -> str | None:
        reason = aggregate_refusal(klass.name, query) if isinstance(query, Query) else None
        return reason if reason is not None else own(klass, query)

    refuses.__doc__ = own.__doc__
    cls.refuses = classmethod(refuses)  # type: ignore[method-assign,assignment]


for _cls in ENGINES.values():
    if _cls.name in COMPUTES:
        _computing_only(_cls)

__all__ = ["COMPUTES", "ENGINES", "Engine", "EngineRefused", "FirstOrderIVM", "GroupAggregates", "aggregate_refusal"]
