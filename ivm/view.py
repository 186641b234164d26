"""A maintained view: a query, the engine maintaining it, and the input policy."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import chain, repeat
from operator import is_, itemgetter
from typing import Any

import numpy as np

from ivm.engines.base import Engine
from ivm.policy import Policy
from ivm.query.expr import Entry, EntryError, null_guarded
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
    #: updates dropped where they enter because their tuple fails the relation's selection (SQL's WHERE on
    #: one relation): valid input that is no change of the selected relation, so neither applied nor rejected
    filtered: int = 0


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
        self._set_entries({})

    def __getstate__(self) -> dict[str, Any]:
        """The view's state for a snapshot (pickle): the compiled entries are closures, made again on load."""
        state = dict(self.__dict__)
        state.pop("_enterers", None)
        state.pop("_conditions", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        # snapshots from before entries (or NULL join keys) were added have none: made again from the query
        self._set_entries(state.get("filtered", {}))

    def _set_entries(self, filtered: dict[str, int]) -> None:
        """How each relation's updates enter, made from the query (:mod:`ivm.query.expr`; NULL never joins:
        :func:`~ivm.query.expr.null_guarded`), with the counts ``filtered`` so far."""
        #: per relation with a selection, computed attributes or join variables, its entry
        self._entries: dict[str, Entry] = _entries_of(self.query)
        self._enterers = {relation: entry.compile() for relation, entry in self._entries.items()}
        self._conditions = {r: e.where.compile() for r, e in self._entries.items() if e.where is not None}
        #: every entry only drops NULL join keys (no selection, no computed attribute: a batch without NULLs passes)
        self._null_keys_only = all(e.where is None and not e.derived for e in self._entries.values())
        #: per relation, the updates its selection or a NULL join key dropped where they entered (counted,
        #: never rejected)
        self.filtered: dict[str, int] = {
            **dict.fromkeys((r for r, e in self._entries.items() if e.filters), 0),
            **filtered,
        }

    def apply(self, updates: Iterable[Update | tuple[str, Row, int]]) -> Outcome:
        """Validate each update against the state as the batch's earlier updates leave it; hand
        the valid ones to the engine as one batch.  O(1) per update on top of the engine's work.

        An update of a relation with a selection or computed attributes (SQL's WHERE on one relation,
        expressions inside the aggregate, ``COUNT(col)``: :class:`~ivm.query.expr.Entry`) enters first:
        if its tuple fails the selection it is dropped and counted (:attr:`Outcome.filtered`,
        :attr:`filtered`), else its computed attributes are appended; O(size of the expressions) per
        update.  A value an expression cannot evaluate (a string in arithmetic, a string compared with a
        number) refuses the update by name.  NULL never joins, as in SQL: an update with NULL (``None``) in a
        join variable is dropped and counted the same way (rule syntax too), and one with NULL where a
        self-joined relation joins in one atom but not in another is refused (``null_join_key``):
        :class:`~ivm.query.expr.Entry`, :func:`~ivm.query.expr.null_guarded`.

        The state is looked up only where the policy can refuse: for deletes (``negative =
        "reject"``) and for inserts under set semantics (``duplicate = "reject"``); a batch of
        inserts under the default policy is checked for shape alone.
        """
        if self._entries:
            return self._enter(updates, self._apply_entered)
        return self._apply_entered(updates)

    def _enter(self, updates: Iterable[Any], then: Callable[[list[Any]], Outcome]) -> Outcome:
        """Each update of a relation with an :class:`~ivm.query.expr.Entry` entered (dropped if its
        selection fails, its computed attributes appended), then ``then`` of the batch entered; the
        outcome indexes and names the updates as given.  Updates of other relations, and malformed ones,
        go through as they are (``then`` says what is wrong with them)."""
        items = updates if isinstance(updates, list) else list(updates)
        if self._null_keys_only:  # NULL join keys alone: a batch without a NULL enters as it is (one C-level pass)
            try:
                clean = None not in chain.from_iterable(map(row_of, items))
            except Exception:  # a malformed update, or a value whose == fails: the paths below say what is wrong
                clean = False
            if clean:
                return then(items)
        fast = self._enter_batch(items, then)
        if fast is not None:
            return fast
        entries, enterers = self._entries, self._enterers
        outcome = Outcome()
        entered: list[Any] = []
        origin: list[int] = []
        for index, item in enumerate(items):
            entry = entries.get(item[0]) if isinstance(item, tuple) and len(item) == 3 else None
            if entry is None:
                entered.append(item)
                origin.append(index)
                continue
            relation, row, mult = item
            if type(row) is not tuple:
                row = tuple(row)
            if type(mult) is not int:
                raise TypeError(f"multiplicity must be an int, got {mult!r}")
            if len(row) != entry.arity:
                reason = f"relation {relation} has arity {entry.arity}, tuple {row!r} has {len(row)}"
                outcome.rejected.append(Rejected(index, Update(relation, row, mult), "arity", reason))
                continue
            if mult == 0:
                outcome.rejected.append(Rejected(index, Update(relation, row, mult), *self.policy.check(0, 0)))  # type: ignore[misc]
                continue
            try:
                out = enterers[relation](row)
            except EntryError as error:
                reason = f"{relation} row {row!r} cannot enter the query ({entry}): {error}"
                outcome.rejected.append(Rejected(index, Update(relation, row, mult), error.kind, reason))
                continue
            if out is None:
                outcome.filtered += 1
                self.filtered[relation] += 1
                continue
            entered.append(tuple.__new__(Update, (relation, out, mult)))
            origin.append(index)
        inner = then(entered) if entered else Outcome()
        for r in inner.rejected:
            i = origin[r.index]
            given = items[i]
            update = given if type(given) is Update else Update(given[0], tuple(given[1]), given[2])
            outcome.rejected.append(Rejected(i, update, r.kind, r.reason))
        outcome.rejected.sort(key=lambda r: r.index)
        outcome.applied = inner.applied
        outcome.filtered += inner.filtered
        return outcome

    def _enter_batch(self, items: list[Any], then: Callable[[list[Any]], Outcome]) -> Outcome | None:
        """:meth:`_enter` in C-level passes (one ``map`` of the compiled entry per relation), or ``None`` when
        the batch needs the loop: some update malformed (not a ``(relation, tuple, non-zero int)`` triple of
        its relation's arity) or refused where it enters.  The same outcome as the loop."""
        if not items or not set(map(type, items)) <= {tuple, Update} or set(map(len, items)) != {3}:
            return None
        relations, rows, mults = list(map(relation_of, items)), list(map(row_of, items)), list(map(mult_of, items))
        if set(map(type, rows)) != {tuple} or set(map(type, mults)) != {int} or 0 in mults:
            return None
        out: list[Any] = list(items)
        names = set(relations)
        filtered: dict[str, int] = {}
        for relation, enter in self._enterers.items():
            if relation not in names:
                continue
            at = range(len(items)) if len(names) == 1 else [i for i, r in enumerate(relations) if r == relation]
            mine = [rows[i] for i in at] if len(names) > 1 else rows
            if set(map(len, mine)) != {self._entries[relation].arity}:
                return None
            try:
                if self._entries[relation].derived:
                    entered = list(map(enter, mine))
                else:  # a selection or NULL join keys alone: the rows that pass, as they are
                    kept = self._entries[relation].keep(mine, self._conditions.get(relation))
                    if kept is None:
                        filtered[relation] = 0
                        continue  # every row enters as it is given
                    entered = [row if ok else None for row, ok in zip(mine, kept, strict=True)]
            except EntryError:
                return None  # the loop says which update, and why
            new = tuple.__new__
            dropped = 0
            for i, row in zip(at, entered, strict=True):
                if row is None:
                    out[i] = None
                    dropped += 1
                else:
                    out[i] = new(Update, (relation, row, mults[i]))
            filtered[relation] = dropped
        if any(u is None for u in out):
            origin = [i for i, u in enumerate(out) if u is not None]
            kept = [out[i] for i in origin]
        else:
            origin, kept = list(range(len(out))), out
        inner = then(kept) if kept else Outcome()
        outcome = Outcome(applied=inner.applied, filtered=sum(filtered.values()) + inner.filtered)
        for relation, n in filtered.items():
            if n:
                self.filtered[relation] += n
        for r in inner.rejected:
            i = origin[r.index]
            given = items[i]
            update = given if type(given) is Update else Update(*given)
            outcome.rejected.append(Rejected(i, update, r.kind, r.reason))
        return outcome

    def _apply_entered(self, updates: Iterable[Update | tuple[str, Row, int]]) -> Outcome:
        """:meth:`apply` of updates that have entered (rows as the query's atoms see them)."""
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
        entry = self._entries.get(relation)
        entering = entry is not None and not (entry.where is None and not entry.derived and _no_null(entry, columns))
        fast = None if entering else self._columns_admissible(relation, columns, multiplicities)
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
            # the first value with an order fixes the variable's kind (one without, refused, fixes nothing)
            want = self._families.setdefault(x.variable, kind) if kind is not None else None
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
        if self._entries:  # selections and computed attributes first; a computed value may be no finite number
            vouched = finite and not any(e.derived for e in self._entries.values())
            return self._enter(updates, lambda entered: self._apply_admitted_entered(entered, finite=vouched))
        return self._apply_admitted_entered(updates, finite=finite)

    def _apply_admitted_entered(self, updates: list[Any], *, finite: bool) -> Outcome:
        """:meth:`apply_admitted` of updates that have entered."""
        policy = self.policy
        if policy.negative == "reject" or policy.duplicate == "reject" or policy.delete_only:
            return self._apply_entered(updates)
        if not finite and self._lifted and updates and not self._lifted_finite(updates):
            return self._apply_entered(
                updates
            )  # a NaN or an infinity to lift: refused by name (not_finite), the rest applied
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

        entry = self._entries.get(relation)
        dropped = 0
        if entry is not None and entry.where is None and not entry.derived:  # NULL join keys alone
            factors, dropped = _drop_null_keys(entry, normalize(self.query, relation, factors, integers=True))
        elif entry is not None:
            raise TypeError(
                f"apply_factorized of {relation}, which enters the query through {self._entries[relation]}: a "
                "factorized update is not filtered or extended per tuple (apply the expanded tuples)"
            )
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
        if dropped:
            outcome.filtered = dropped
            self.filtered[relation] += dropped
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
        """The engine's statistics; with a selection (or once a NULL join key was dropped) also
        ``entry_filtered``, the updates dropped where they entered (:attr:`filtered`)."""
        stats = self.engine.stats()
        if any(self.filtered.values()) or any(e.where is not None for e in self.query.entry):
            stats = {**stats, "entry_filtered": sum(self.filtered.values())}
        return stats


def _entries_of(query: Query) -> dict[str, Entry]:
    """Per relation, how its updates enter: the query's selections and computed attributes, and NULL join keys
    (:func:`ivm.query.expr.null_guarded`: NULL never joins, as in SQL)."""
    own = {e.relation: e.arity for e in query.entry}
    relations = [(r, own.get(r, n)) for r, n in query.relations.items()]
    atoms = [(a.relation, tuple(a.terms)) for a in query.atoms]
    return {e.relation: e for e in null_guarded(relations, atoms, query.entry)}


def _drop_null_keys(entry: Entry, products: list[list[Any]]) -> tuple[list[list[Any]], int]:
    """A factorized update (normalized: factors named by column positions) without the tuples that have NULL
    where they would join: each factor's rows with a NULL at a ``nonnull`` position dropped, which drops exactly
    the expanded tuples holding them (the predicate is per column).  A NULL at a ``null_refused`` position
    raises ``ValueError``.  Also the number of expanded tuples dropped."""
    nonnull = set(entry.nonnull)
    refused = dict(entry.null_refused)
    out: list[list[Any]] = []
    dropped = 0
    for product in products:
        before, after = 1, 1
        factors = []
        for positions, data in product:
            for p, where in refused.items():
                if p in positions and any(key[positions.index(p)] is None for key in data):
                    raise ValueError(
                        f"NULL at position {p} of {entry.relation} ({where}) in a factorized update: NULL never "
                        "joins, but the relation also occurs where that position is no join variable"
                    )
            at = [i for i, p in enumerate(positions) if p in nonnull]
            kept = {key: m for key, m in data.items() if not any(key[i] is None for i in at)} if at else data
            before, after = before * len(data), after * len(kept)
            factors.append((positions, kept))
        dropped += before - after
        out.append(factors)
    return out, dropped


def _no_null(entry: Entry, columns: Sequence[Any]) -> bool:
    """Do the columns of ``entry``'s NULL join keys hold no NULL (``None``)?  A numeric numpy column has none; a
    pyarrow array says (``null_count``); other columns are looked at value by value.  ``False`` if unsure."""
    for position in (*entry.nonnull, *(p for p, _ in entry.null_refused)):
        if position >= len(columns):
            return False
        column = columns[position]
        if isinstance(column, np.ndarray):
            if column.dtype.kind in "iufb":
                continue
            if column.dtype.kind != "O":
                return False
        nulls = getattr(column, "null_count", None)
        if isinstance(nulls, int):
            if nulls:
                return False
            continue
        try:
            if any(map(is_, column, repeat(None))):
                return False
        except TypeError:
            return False
    return True
