"""The engine protocol: the one narrow interface the runtime talks to.

Every maintenance algorithm of the library is a subclass of :class:`Engine`:
it is built from a :class:`~ivm.query.Query`, consumes batches of
:class:`~ivm.updates.Update` values, and answers the result at any time.  The
runtime (``ivm/processor/``) never knows which algorithm runs behind it.

Contract (tests in ``tests/unit/test_engine_protocol.py`` check every engine):

- ``apply(batch)`` leaves the same state and result as applying the batch's
  updates one at a time, in order.  Its precondition: every update names a
  relation of the query, has a row of that relation's arity, and holds a
  number wherever the aggregate lifts the value (SUM, AVG, COVAR:
  :func:`ivm.query.lifted.lifted_positions`).  :meth:`ivm.view.View.apply`
  keeps it (it refuses other updates by name, ``unknown_relation`` /
  ``arity`` / ``not_a_number``, before any engine sees them), so the
  engines' hot loops do not test it again; handed such an update directly,
  an engine may raise midway through a batch;
- ``apply_columns(relation, columns, mults)`` is ``apply`` of the rows the
  columns hold (:func:`ivm.updates.from_columns`), for callers that have arrays;
- ``result()`` is the aggregate: an exact ``int`` for counts;
- ``enumerate()`` yields ``(answer tuple, multiplicity)`` pairs with non-zero
  multiplicity, each answer once;
- ``multiplicity(relation, row)`` is the current multiplicity of a base tuple
  (the runtime's input policies need it);
- ``stats()`` reports internals as flat numbers, the same the metrics export;
- ``snapshot()``/``restore()`` round-trip the whole state through bytes.
"""

from __future__ import annotations

import pickle
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar

from ivm.query.lifted import lifted_positions
from ivm.query.model import Query
from ivm.updates import Row, Update, from_columns


class EngineRefused(ValueError):
    """The engine cannot serve this query; the message says why (a witness)."""


class Engine(ABC):
    """An incremental view maintenance algorithm for one query."""

    name: ClassVar[str]

    def __init__(self, query: Query) -> None:
        reason = self.refuses(query)
        if reason:
            raise EngineRefused(f"engine {self.name!r} cannot maintain {query}: {reason}")
        self.query = query

    @classmethod
    @abstractmethod
    def refuses(cls, query: Query) -> str | None:
        """``None`` if this engine can maintain ``query``, else the reason it cannot."""

    @abstractmethod
    def apply(self, updates: Sequence[Update]) -> None:
        """Apply a batch of updates (same effect as one at a time, in order).

        Precondition: each update's relation is in the query, its row has that relation's arity
        and numbers where the aggregate lifts values (:meth:`ivm.view.View.apply` refuses the
        others before calling this).
        """

    def apply_columns(self, relation: str, columns: Sequence[Any], multiplicities: Any = 1) -> None:
        """Apply a batch of one relation's updates given as columns: the same as :meth:`apply` of
        :func:`ivm.updates.from_columns` (row ``i`` is the ``i``-th value of every column, numpy
        scalars made Python values; ``multiplicities`` one int or one per row).

        Same precondition as :meth:`apply` (a relation of the query, one column per attribute).
        Engines whose state is typed arrays override it to read the columns without making a Python
        tuple per row (:meth:`ivm.engines.fivm.engine.FIVM.apply_columns`); this default makes them.
        """
        self.apply(from_columns(relation, columns, multiplicities))

    @property
    def lifted_variables(self) -> frozenset[str]:
        """The variables whose values this engine lifts into a numeric ring (their values must be
        numbers): by default every variable of the query's SUM, AVG and COVAR aggregates
        (:func:`ivm.query.lifted.lifted_positions`); an engine that lifts fewer says so (F-IVM's
        categorical covariance lifts its categorical variables as values, not numbers)."""
        return frozenset(x.variable for found in lifted_positions(self.query).values() for x in found)

    @abstractmethod
    def result(self) -> Any:
        """The current aggregate value (sums of floats rounded once, correctly: :mod:`ivm.rings.exact`)."""

    def exact_result(self) -> Any:
        """:meth:`result` before the read-out: sums of floats as exact :class:`~ivm.rings.exact.Dyadic`
        values, for callers that combine results (shards, AVG) and round once at the end.  Engines that
        keep no float sums return :meth:`result`."""
        return self.result()

    @abstractmethod
    def enumerate(self) -> Iterator[tuple[Row, int]]:
        """The current answers with their multiplicities."""

    @abstractmethod
    def multiplicity(self, relation: str, row: Row) -> int:
        """The current multiplicity of ``row`` in base relation ``relation``."""

    def multiplicities(self, relation: str, rows: Sequence[Row]) -> list[int]:
        """:meth:`multiplicity` of each row of ``relation`` (rows are tuples), in one call.

        Engines that keep the base relation as a dict answer in one C-level pass; this default
        asks :meth:`multiplicity` per row.
        """
        multiplicity = self.multiplicity
        return [multiplicity(relation, row) for row in rows]

    @classmethod
    def runtime_choices(cls, query: Query) -> list[dict[str, str]]:
        """The choices this engine makes at run time from the data, for ``ivm explain``.

        Each is a dict with ``choice`` (what is decided), ``statistic`` (the data
        statistic that decides it) and ``rule`` (how); engines that make one also
        report the live decision through a ``choice()`` method, which
        ``View.explain()["choice"]`` shows.  Default: none.
        """
        return []

    def stats(self) -> dict[str, int | float]:
        """Engine internals as flat numbers (exported as metrics)."""
        return {}

    def snapshot(self) -> bytes:
        """The whole state as bytes; :meth:`restore` reads it back."""
        return pickle.dumps(self, protocol=pickle.HIGHEST_PROTOCOL)

    @classmethod
    def restore(cls, blob: bytes) -> Engine:
        engine = pickle.loads(blob)
        if not isinstance(engine, cls):
            raise TypeError(f"snapshot holds a {type(engine).__name__}, not a {cls.__name__}")
        return engine
