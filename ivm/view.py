"""A maintained view: a query, the engine maintaining it, and the input policy."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from operator import itemgetter
from typing import Any

import numpy as np

from ivm.engines.base import Engine
from ivm.policy import Policy
from ivm.query.lifted import Lifted, is_finite, is_number, lifted_positions, order_family, ordered_positions
from ivm.query.model import Query
from ivm.updates import Row, Update, from_columns, mult_of, relation_of, row_of

_PLAIN_NUMBERS = frozenset({int, float})


def _where(relation: str, x: Lifted) -> str:
    return f"{relation} position {x.position} ({x.variable})"


def _kind_name(kind: Any) -> str:
    return kind if isinstance(kind, str) else "no order" if kind is None else kind.__name__


@dataclass(frozen=True)
class Rejected:
    """An update the view refused, with the reason; the state did not change.

    ``index`` is the update's position in the batch given to :meth:`View.apply`.
    """

    index: int
    update: Update
    kind: str  # a stable label: unknown_relation, arity, unhashable, not_a_number, not_finite, absent_delete, ...
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

    def __init__(
        self, query: Query, engine: Engine, policy: Policy | None = None, patterns: Any = None, planned: bool = False
    ) -> None:
        self.query = query
        self.engine = engine
        #: the engine was chosen by the planner (``engine="auto"``), not named by the user
        self.planned = planned
        self.policy = policy or Policy()
        self._patterns = patterns
        self._arity = dict(query.relations)
        #: the positions whose values the aggregate lifts into its ring (they must be numbers)
        self._lifted = lifted_positions(query, engine.lifted_variables)
        #: the positions MIN and MAX compare, and the kind of value each such variable holds (the first
        #: value's: :func:`order_family`); a value of another kind would not compare with the others
        self._ordered = ordered_positions(query)
        self._families: dict[str, Any] = {}

    def apply(self, updates: Iterable[Update | tuple[str, Row, int]]) -> Outcome:
        """Validate each update against the state as the batch's earlier updates leave it; hand
        the valid ones to the engine as one batch.  O(1) per update on top of the engine's work.

        The state is looked up only where the policy can refuse: for deletes (``negative =
        "reject"``) and for inserts under set semantics (``duplicate = "reject"``); a batch of
        inserts under the default policy is checked for shape alone.
        """
        items = updates if isinstance(updates, list) else list(updates)
        fast = self._apply_batch(items)
        if fast is not None:
            return fast
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
            wrong = self._value_violation(relation, row)
            if wrong is not None:
                outcome.rejected.append(Rejected(index, update, *wrong))
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

    def _apply_batch(self, items: list[Any]) -> Outcome | None:
        """:meth:`apply` in C-level passes over the batch, or ``None`` when the batch needs the loop.

        Taken when every update is a well-formed ``(relation, row, mult)`` of a known relation
        (rows tuples of the right arity, multiplicities non-zero ints), no relation is declared
        delete-only and, where the policy looks at the state, no tuple occurs twice in the batch:
        then each update is checked against the engine's state alone, one
        :meth:`~ivm.engines.base.Engine.multiplicities` call per relation.  The same outcome as
        the loop, which handles everything else (and says what is wrong).
        """
        if not items or self.policy.delete_only or type(self)._current is not View._current:
            return None
        if not set(map(type, items)) <= {tuple, Update} or set(map(len, items)) != {3}:
            return None
        relations, rows, mults = list(map(relation_of, items)), list(map(row_of, items)), list(map(mult_of, items))
        if set(map(type, rows)) != {tuple} or set(map(type, mults)) != {int} or 0 in mults:
            return None
        names = set(relations)
        arity = self._arity
        if not names <= arity.keys():
            return None
        if len(names) == 1:
            if set(map(len, rows)) != {arity[relations[0]]}:
                return None
        elif not all(map(int.__eq__, map(len, rows), map(arity.__getitem__, relations))):
            return None
        if not self._all_values_admissible(names, relations, rows):
            return None  # some value would be refused: the loop says which
        valid = items  # engines take (relation, row, mult) triples; a subclass's state may want Updates
        if type(self)._apply_valid is not View._apply_valid and set(map(type, items)) != {Update}:
            valid = list(map(tuple.__new__, repeat(Update), items))
        reject_negative = self.policy.negative == "reject"
        reject_duplicate = self.policy.duplicate == "reject"
        if reject_duplicate or (reject_negative and min(mults) < 0):
            if len(set(zip(relations, rows, strict=True))) < len(items):
                return None  # a tuple twice: each is checked against the state the earlier one leaves
            current = [0] * len(items)
            for name in names:
                at = [i for i, r in enumerate(relations) if r == name] if len(names) > 1 else range(len(items))
                found = self.engine.multiplicities(name, [rows[i] for i in at])
                for i, c in zip(at, found, strict=True):
                    current[i] = c
            bad = [
                i
                for i, (c, m) in enumerate(zip(current, mults, strict=True))
                if (reject_negative and c + m < 0) or (reject_duplicate and m > 0 and c + m > 1)
            ]
            if bad:
                outcome = Outcome()
                check = self.policy.check
                for i in bad:
                    update = valid[i] if type(valid[i]) is Update else Update(*valid[i])
                    outcome.rejected.append(Rejected(i, update, *check(current[i], mults[i])))  # type: ignore[misc]
                skip = set(bad)
                valid = [u for i, u in enumerate(valid) if i not in skip]
                if valid:
                    self._apply_valid(valid)
                outcome.applied = len(valid)
                return outcome
        self._apply_valid(valid)
        return Outcome(applied=len(valid))

    def apply_columns(self, relation: str, columns: Sequence[Any], multiplicities: Any = 1) -> Outcome:
        """:meth:`apply` of a batch of one relation given as columns: row ``i`` is the ``i``-th value
        of every column (:func:`ivm.updates.from_columns`; numpy or pyarrow arrays, lists), with
        multiplicity ``multiplicities`` (one int) or ``multiplicities[i]``.  The outcome indexes rows.

        When no update can be refused by its shape or the policy (a relation of the query, one
        column per attribute, multiplicities non-zero ints, positive where deletes are checked
        against the state, no set semantics or delete-only relation), the columns go to the engine
        as they are (:meth:`~ivm.engines.base.Engine.apply_columns`: typed-array engines read them
        without a Python tuple per row); otherwise the rows are made and take :meth:`apply`, which
        says what is refused.  The same outcome and state either way.
        """
        fast = self._columns_admissible(relation, columns, multiplicities)
        if fast is None:
            return self.apply(from_columns(relation, columns, multiplicities))
        self.engine.apply_columns(relation, columns, multiplicities)
        return Outcome(applied=fast)

    def _columns_admissible(self, relation: str, columns: Sequence[Any], multiplicities: Any) -> int | None:
        """The number of rows when :meth:`apply_columns` can hand the columns over as they are, else ``None``."""
        policy = self.policy
        if self._arity.get(relation) != len(columns) or not columns or policy.delete_only:
            return None
        if policy.duplicate == "reject" or type(self)._apply_valid is not View._apply_valid:
            return None
        if type(self)._current is not View._current:
            return None
        lengths = {len(column) for column in columns}
        if len(lengths) != 1:
            return None
        if relation in self._ordered:
            return None  # MIN and MAX fix their values' kind: the rows path checks each
        for lifted in self._lifted.get(relation, ()):  # numbers by their dtype; else the rows path checks each
            column = np.asarray(columns[lifted.position])
            if column.dtype.kind not in "iufb":
                return None
            if column.dtype.kind == "f" and not np.isfinite(column).all():
                return None  # a NaN or an infinity: the rows path refuses it by name (not_finite)
        (n,) = lengths
        low = 1 if policy.negative == "reject" else None  # deletes are checked against the state
        if isinstance(multiplicities, int) and not isinstance(multiplicities, bool):
            if multiplicities == 0 or (low is not None and multiplicities < low):
                return None
            return n
        mults = np.asarray(multiplicities)
        if mults.ndim != 1 or len(mults) != n or mults.dtype.kind not in "iu" or not n:
            return None
        if not mults.all() or (low is not None and int(mults.min()) < low):
            return None
        return n

    def _all_values_admissible(self, names: set[str], relations: list[str], rows: list[Row]) -> bool:
        """:meth:`_value_violation` of a whole batch in C-level passes: every row hashes, every lifted
        column holds numbers (``int`` and ``float`` by type alone, others by :func:`is_number`) and every
        column MIN or MAX compares holds values of its variable's kind (fixed by the first)."""
        try:
            deque(map(hash, rows), maxlen=0)
        except TypeError:
            return False
        for name in names & (self._lifted.keys() | self._ordered.keys()):
            mine = rows if len(names) == 1 else [row for r, row in zip(relations, rows, strict=True) if r == name]
            for x in self._lifted.get(name, ()):
                values = list(map(itemgetter(x.position), mine))
                types = set(map(type, values))
                if not types <= _PLAIN_NUMBERS and not all(map(is_number, values)):
                    return False
                if types != {int} and not all(map(is_finite, values)):
                    return False  # a NaN or an infinity: the rows path refuses it by name (not_finite)
            for x in self._ordered.get(name, ()):
                kinds = set(map(order_family, map(itemgetter(x.position), mine)))
                want = self._families.get(x.variable, next(iter(kinds)) if len(kinds) == 1 else None)
                if kinds != {want} or want is None:
                    return False
                self._families[x.variable] = want
        return True

    def _lifted_finite(self, updates: list[Any]) -> bool:
        """Whether every value the aggregate lifts in ``updates`` is finite (no NaN, no infinity): one
        ``math.fsum`` per lifted position in C (a NaN or an infinity makes it non-finite; a sum that
        overflows from finite values raises, and then they are all finite)."""
        for relation, positions in self._lifted.items():
            rows = [u[1] for u in updates if u[0] == relation]
            for x in positions:
                try:
                    total = math.fsum(map(itemgetter(x.position), rows))
                except OverflowError:
                    continue
                except TypeError:
                    return False  # not a number at all: apply() says which
                if not math.isfinite(total):
                    return False
        return True

    def _value_violation(self, relation: str, row: Row) -> tuple[str, str] | None:
        """``(kind, reason)`` if ``row`` of ``relation`` cannot be applied for its values, else ``None``:
        ``unhashable`` (a list or dict: no key of the relation), ``not_comparable`` (a value MIN or MAX
        compares that is not of its variable's kind, which the first value fixes, or has no order),
        ``not_a_number`` (a value the aggregate lifts), ``not_finite`` (a NaN or an infinity the aggregate
        lifts: SQL's sums have neither, and the exact sums of :mod:`ivm.rings.exact` have no value for them)."""
        try:
            hash(row)
        except TypeError as err:
            return "unhashable", f"{relation} row {row!r} cannot be a key of the relation: {err}"
        for x in self._ordered.get(relation, ()):
            value = row[x.position]
            kind = order_family(value)
            want = self._families.setdefault(x.variable, kind)
            if kind is None or kind != want:
                why = "has no order" if kind is None else f"does not compare with its other values ({_kind_name(want)})"
                return "not_comparable", f"{_where(relation, x)} is compared by {x.aggregate}: {value!r} {why}"
        for x in self._lifted.get(relation, ()):
            value = row[x.position]
            if not is_number(value):
                return "not_a_number", f"{_where(relation, x)} is lifted by {x.aggregate}: {value!r} is not a number"
            if not is_finite(value):
                return (
                    "not_finite",
                    f"{_where(relation, x)} is lifted by {x.aggregate}: {value!r} is not finite "
                    "(a sum has no NaN or infinity; the update is refused)",
                )
        return None

    def apply_admitted(self, updates: list[Update | tuple[str, Row, int]], *, finite: bool = False) -> Outcome:
        """Hand a batch that was validated and admitted upstream to the state: :meth:`apply` without
        the per-update checks, O(1) besides the engine's work.

        The caller vouches that every update is a ``(relation, row, mult)`` of one of the query's
        relations, ``row`` a tuple of the relation's arity and ``mult`` a non-zero ``int``, and that
        it was admitted by an input policy (the runtime's relation contents, ``ivm/processor/state/relations.py``,
        which decodes updates by the relations' schemas).  When this view's own policy can refuse
        an update (deletes checked against the state, set semantics, delete-only relations) the
        batch takes :meth:`apply`, so the outcome is always what :meth:`apply` would give.  A batch
        with a NaN or an infinity where the aggregate lifts takes :meth:`apply` too (``not_finite``), unless
        the caller vouches with ``finite=True`` that it has none (the runtime's codecs refuse them when
        they decode), which saves a pass over the lifted values.
        """
        policy = self.policy
        if policy.negative == "reject" or policy.duplicate == "reject" or policy.delete_only:
            return self.apply(updates)
        if not finite and self._lifted and updates and not self._lifted_finite(updates):
            return self.apply(updates)  # a NaN or an infinity to lift: refused by name (not_finite), the rest applied
        if updates:
            if type(self)._apply_valid is not View._apply_valid and set(map(type, updates)) != {Update}:
                updates = list(map(tuple.__new__, repeat(Update), updates))  # a subclass's state wants Updates
            self._apply_valid(updates)  # type: ignore[arg-type]
        return Outcome(applied=len(updates))

    def apply_factorized(self, relation: str, factors: Sequence[Sequence[tuple[Any, Any]]]) -> Outcome:
        """Apply a factorizable update ``δR = ⊎_t ⊗_f factor_{t,f}`` (F-IVM §6), kept factorized by the engine.

        ``factors`` is a union (list) of products; a product is a list of
        factors ``(variables, {tuple: multiplicity})`` over a partition of R's
        columns, named by the variables of R's atom (a str or a sequence of
        them; a factor may cover several) or by column positions (ints); a bare
        value stands for a 1-tuple.  Example 11: the block
        ``{(a_i, b_j) → 1}`` is ``[[("A", {a: 1 ...}), ("B", {b: 1 ...})]]``,
        n + m values for nm tuples; a union of products with negative
        multiplicities corrects an over-approximation.

        >>> import ivm
        >>> v = ivm.maintain("Q() :- R(A,B), S(A,C,E), T(C,D)", engine="fivm")
        >>> _ = v.apply([("R", (1, 1), 1), ("R", (2, 1), 1), ("T", (1, 1), 1)])
        >>> block = [("A", {1: 1, 2: 1}), ("C", {1: 1}), ("E", {7: 1, 8: 1, 9: 1})]
        >>> v.apply_factorized("S", [block]).applied, v.result()
        (6, 6)
        >>> fix = [[("A", {2: 1}), ("C", {1: 1}), ("E", {9: -1})]]  # a correction term of the union
        >>> v.apply_factorized("S", fix).applied, v.result()
        (1, 5)

        Returns what :meth:`apply` returns, an :class:`Outcome`; ``applied``
        counts the tuples of the expanded update whose multiplicity changes.
        The state ends as after :meth:`apply` of the expanded tuples (net
        multiplicity per tuple).  The update is all or nothing: if the policy
        refuses some expanded tuple (a delete below zero, a duplicate under set
        semantics, an insert into a delete-only relation), nothing is applied
        and ``rejected`` lists each refused tuple with its net multiplicity and
        ``index``, the first product that contains it.  Malformed input (an
        unknown relation, factors that do not partition the columns, tuples of
        the wrong width, non-int multiplicities) raises ``ValueError`` or
        ``TypeError``.  Only the F-IVM engine propagates factorized updates:
        other engines, and sharded views, raise ``TypeError``.

        Cost: for a product over disjoint variables, O(Σ min(|V_sibling|,
        |factor|)) per view on the path (F-IVM Example 12), plus the change of
        each stored view on the path, versus O(Π |factor|) for the expanded
        update; the base relation's per-tuple multiplicities are kept by
        O(Π |factor|) dictionary updates (see :meth:`FIVM.apply_factorized
        <ivm.engines.fivm.engine.FIVM.apply_factorized>`).  The policy check
        expands the products only when the policy can refuse: with the default
        policy, only if some multiplicity is negative (then O(Π |factor|)
        lookups).
        """
        engine_apply = getattr(self.engine, "apply_factorized", None)
        if getattr(self, "shards", None) is not None:
            raise TypeError("apply_factorized is not supported on a sharded view (the update would need routing)")
        if not callable(engine_apply):
            raise TypeError(
                f"apply_factorized needs the F-IVM engine (F-IVM §6); this view is maintained by "
                f"{getattr(self.engine, 'name', type(self.engine).__name__)!r}"
            )
        from ivm.engines.fivm.factorizable import contains, expand_net, normalize

        products = normalize(self.query, relation, factors, integers=True)
        delete_only = self.policy.delete_only
        if delete_only and not getattr(self, "_sealed", False):
            self._seal()
        negative = any(m < 0 for prod in products for _, data in prod for m in data.values())
        stateful = (
            (self.policy.negative == "reject" and negative)
            or self.policy.duplicate == "reject"
            or relation in delete_only
        )
        outcome = Outcome()
        if stateful:
            for row, mult in expand_net(products, self._arity[relation]).items():
                why = self.policy.check(self.engine.multiplicity(relation, row), mult, relation)
                if why is not None:
                    index = next(i for i, prod in enumerate(products) if contains(prod, row))
                    outcome.rejected.append(Rejected(index, Update(relation, row, mult), *why))
            if outcome.rejected:
                return outcome
        outcome.applied = engine_apply(relation, factors)
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

    def exact_result(self) -> Any:
        """:meth:`result` with sums of floats exact (:meth:`ivm.engines.base.Engine.exact_result`)."""
        return self.engine.exact_result()

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

        eps, name = getattr(self.engine, "eps", None), self.engine.name
        out = explain(self.query, self.patterns, eps=eps, engine=None) if getattr(self, "planned", False) else None
        if out is None or out["engine"] != name:  # named by the user, or the plan changed since (live patterns)
            out = explain(self.query, self.patterns, eps=eps, engine=name)
        choice = getattr(self.engine, "choice", None)
        if callable(choice):
            out["choice"] = choice()  # a data-dependent choice made at run time (e.g. eps per relation)
        memory = getattr(self.engine, "view_memory", None)
        if callable(memory):  # per stored view: keys, bytes, bytes per payload, payload support (F-IVM §6.2)
            out["memory"] = {
                name: {"keys": keys, "bytes": total, "bytes_per_payload": round(per, 1), "support": support}
                for name, (keys, total, per, support) in memory().items()
            }
        return out

    def stats(self) -> dict[str, int | float]:
        return self.engine.stats()
