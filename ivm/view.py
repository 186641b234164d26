"""A maintained view: a query, the engine maintaining it, and the input policy."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ivm.engines.base import Engine
from ivm.policy import Policy
from ivm.query.model import Query
from ivm.updates import Row, Update


@dataclass(frozen=True)
class Rejected:
    """An update the view refused, with the reason; the state did not change.

    ``index`` is the update's position in the batch given to :meth:`View.apply`.
    """

    index: int
    update: Update
    kind: str  # a stable label: unknown_relation, arity, absent_delete, ...
    reason: str


@dataclass
class Outcome:
    """What one call to :meth:`View.apply` did."""

    applied: int = 0
    rejected: list[Rejected] = field(default_factory=list)


class View:
    """The result of a query kept up to date under updates.

    Built by :func:`ivm.maintain`.  ``apply`` validates each update (known
    relation, right arity, the input :class:`Policy`) and hands the valid ones
    to the engine as one batch; invalid ones come back in the
    :class:`Outcome` and change nothing.
    """

    def __init__(self, query: Query, engine: Engine, policy: Policy | None = None, patterns: Any = None) -> None:
        self.query = query
        self.engine = engine
        self.policy = policy or Policy()
        self._patterns = patterns
        self._arity = dict(query.relations)

    def apply(self, updates: Iterable[Update | tuple[str, Row, int]]) -> Outcome:
        """Validate each update against the state as the batch's earlier updates leave it; hand
        the valid ones to the engine as one batch.  O(1) per update on top of the engine's work.

        The state is looked up only where the policy can refuse: for deletes (``negative =
        "reject"``) and for inserts under set semantics (``duplicate = "reject"``); a batch of
        inserts under the default policy is checked for shape alone.
        """
        outcome = Outcome()
        valid: list[Update] = []
        pending: dict[tuple[str, Row], int] = {}
        arity = self._arity
        check = self.policy.check
        reject_negative = self.policy.negative == "reject"
        reject_duplicate = self.policy.duplicate == "reject"
        delete_only = self.policy.delete_only
        if delete_only and not getattr(self, "_sealed", False):
            self._seal()
        # the engine's own lookup unless a subclass (ShardedView) says where a tuple lives
        direct = type(self)._current is View._current
        multiplicity = self.engine.multiplicity
        new = tuple.__new__  # Update(...) without the NamedTuple constructor's overhead
        items = updates if isinstance(updates, list) else list(updates)
        try:
            deletes = any(item[2] < 0 for item in items)
        except TypeError:  # a multiplicity that is no number: the loop says which
            deletes = True
        stateful = reject_duplicate or (reject_negative and deletes)
        for index, item in enumerate(items):
            relation, row, mult = item
            if type(row) is not tuple:
                row = tuple(row)
            if type(mult) is not int:
                raise TypeError(f"multiplicity must be an int, got {mult!r}")
            update = item if type(item) is Update and row is item[1] else new(Update, (relation, row, mult))
            n = arity.get(relation)
            if n is None or len(row) != n:
                outcome.rejected.append(Rejected(index, update, *self._shape_violation(update)))
                continue
            if delete_only and mult > 0 and relation in delete_only:  # declared delete-only (003 App. C)
                current = multiplicity(relation, row) if direct else self._current(update)
                current += pending.get((relation, row), 0)
                outcome.rejected.append(Rejected(index, update, *check(current, mult, relation)))  # type: ignore[misc]
                continue
            if not stateful and mult:
                valid.append(update)
                continue
            key = (relation, row)
            before = pending.get(key, 0)
            current = (multiplicity(relation, row) if direct else self._current(update)) + before
            after = current + mult
            # the policy's conditions inlined; Policy.check says why
            if not mult or (reject_negative and after < 0) or (reject_duplicate and mult > 0 and after > 1):
                outcome.rejected.append(Rejected(index, update, *check(current, mult)))  # type: ignore[misc]
                continue
            pending[key] = before + mult
            valid.append(update)
        if valid:
            self._apply_valid(valid)
        outcome.applied = len(valid)
        return outcome

    def load(self, updates: Iterable[Update | tuple[str, Row, int]]) -> Outcome:
        """Load the initial database (the prefix of Hu & Wang §1.2): :meth:`apply` with the inserts of
        relations declared delete-only admitted.  Only before the first :meth:`apply`, which ends the
        prefix (from then on such inserts are refused)."""
        if getattr(self, "_sealed", False):
            raise ValueError("the initial database is loaded before the first apply(); the prefix has ended")
        policy, self.policy = self.policy, self.policy.initial()
        try:
            return self.apply(updates)
        finally:
            self.policy = policy

    def _seal(self) -> None:
        """End the prefix: deletion-only relations only lose tuples from now on (the engine's
        monitors are told, so its plan may become the deletion-only one, 003 App. C)."""
        self._sealed = True
        for view in getattr(self, "shards", [self]):
            end = getattr(view.engine, "end_prefix", None)
            if callable(end):
                end()

    def _current(self, update: Update) -> int:
        """The multiplicity ``update``'s tuple has now (its relation and arity are valid)."""
        return self.engine.multiplicity(update.relation, update.row)

    def _apply_valid(self, valid: list[Update]) -> None:
        """Hand the validated updates of one batch to the state."""
        self.engine.apply(valid)

    def _shape_violation(self, update: Update) -> tuple[str, str]:
        """Why an update of an unknown relation or of the wrong arity is refused."""
        arity = self._arity.get(update.relation)
        if arity is None:
            return (
                "unknown_relation",
                f"unknown relation {update.relation!r} (query uses {sorted(self._arity)})",
            )
        return (
            "arity",
            f"relation {update.relation} has arity {arity}, tuple {update.row!r} has {len(update.row)}",
        )

    def result(self) -> Any:
        return self.engine.result()

    def enumerate(self) -> Iterator[tuple[Row, int]]:
        return self.engine.enumerate()

    @property
    def patterns(self) -> Any:
        """The update patterns in force: the engine's live ones (declared, minus what its
        monitors downgraded) when it monitors patterns, else the declared ones."""
        live = getattr(self.engine, "patterns", None)
        return live if live is not None else self._patterns

    def explain(self) -> dict[str, Any]:
        """The classification, plan and guarantee (the dict of ``ivm explain --json``)."""
        from ivm.query.explain import explain

        out = explain(self.query, self.patterns, eps=getattr(self.engine, "eps", None), engine=self.engine.name)
        choice = getattr(self.engine, "choice", None)
        if callable(choice):
            out["choice"] = choice()  # a data-dependent choice made at run time (e.g. eps per relation)
        return out

    def stats(self) -> dict[str, int | float]:
        return self.engine.stats()
