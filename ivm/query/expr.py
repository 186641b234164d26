"""Scalar expressions over one relation's attributes: SQL's selections and computed attributes.

A query's ``WHERE`` may hold, besides the equalities that join relations and fix constants, a
*selection* on one relation: comparisons, ranges, ``BETWEEN``, ``IN``, ``OR``, ``NOT`` and
``IS [NOT] NULL`` over that relation's attributes.  The aggregates may hold arithmetic over one
relation's attributes (``SUM(price * (1 - discount))``), and ``COUNT(col)`` counts the rows whose
``col`` is not NULL.  Both are per relation, so both are done where the relation's updates enter the
view (:class:`Entry`, applied by :meth:`ivm.view.View.apply`), before any engine sees them:

- a selection is the relational algebra's σ on one relation, which commutes with the join
  (σ_p(R) ⋈ S = σ_p(R ⋈ S) for p over R's attributes) and is linear over Z-relations
  (σ_p(R ⊎ δR) = σ_p(R) ⊎ σ_p(δR)): an update whose tuple fails ``p`` is no change of σ_p(R), so it
  is dropped at entry, inserts and deletes alike (they still cancel);
- a computed attribute ``e(row)`` is a function of the row, appended to it: the relation R(x̄)
  becomes R'(x̄, e(x̄)) with the same multiplicities, a lifting ``g(x̄) = e(x̄)`` of F-IVM §2.4 on R's
  own variables.  The atom gains one private variable, so the query's structure (acyclicity,
  hierarchy, free-connexity) and with it every engine's plan and guarantee are unchanged.

Three-valued logic, as SQL's: a comparison with NULL is unknown (``None``), ``NOT unknown`` is
unknown, ``unknown AND false`` is false, ``unknown OR true`` is true, and a row whose selection is
true passes (false and unknown are filtered out).  Arithmetic with NULL is NULL.  The arithmetic is
DuckDB's on numbers: ``/`` divides as floats, ``%`` keeps the sign of the dividend, and a division
or remainder by zero is NULL.  A value that does not fit its operation (a string in arithmetic, a
string compared with a number) raises :class:`EntryError`, which the view reports as a refused
update naming the relation, the attribute and the expression (never a silent filter).

The trees are small and immutable (hashable, comparable): two occurrences of a relation share one
:class:`Entry` only if their selections are equal trees.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from numbers import Number
from operator import itemgetter
from typing import Any, Literal

Value = Any
ArithmeticOp = Literal["+", "-", "*", "/", "%"]
CompareOp = Literal["=", "<>", "<", "<=", ">", ">="]


class EntryError(ValueError):
    """A value of an update that an entry expression cannot evaluate (the update is refused).

    ``kind`` is a stable label (``not_a_number``, ``not_comparable``), ``args[0]`` the reason.
    """

    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(reason)
        self.kind = kind


def _render(value: Value) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return repr(value)


_PLAIN = frozenset({int, float})


def _is_number(value: Value) -> bool:
    """A number as the rings take one (:func:`ivm.query.lifted.is_number`): bools, Decimals and numpy numbers too."""
    if type(value) in _PLAIN:
        return True
    return isinstance(value, Number) and not isinstance(value, complex)


def _family(value: Value) -> str:
    kind = type(value)
    if kind in _PLAIN:
        return "number"
    if kind is str:
        return "string"
    if _is_number(value):
        return "number"
    if isinstance(value, str):
        return "string"
    return type(value).__name__


class Expr:
    """A scalar expression over one row of a relation; subclasses are frozen dataclasses."""

    def evaluate(self, row: Sequence[Value]) -> Value:
        """The value at ``row`` (``None`` for NULL; ``True``/``False``/``None`` for a condition)."""
        raise NotImplementedError

    def positions(self) -> frozenset[int]:
        """The attribute positions the expression reads."""
        raise NotImplementedError

    def compile(self) -> Callable[[Sequence[Value]], Value]:
        """:meth:`evaluate` as one closure per node (no method dispatch per row): the same values and errors.
        Comparisons and arithmetic of two ``int``/``float`` operands take a fast path; others go through
        :meth:`evaluate`'s rules."""
        return self.evaluate


@dataclass(frozen=True)
class Column(Expr):
    """Attribute ``name`` at ``position`` of the relation's row."""

    position: int
    name: str

    def evaluate(self, row: Sequence[Value]) -> Value:
        return row[self.position]

    def compile(self) -> Callable[[Sequence[Value]], Value]:
        return itemgetter(self.position)

    def positions(self) -> frozenset[int]:
        return frozenset({self.position})

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class Const(Expr):
    """A constant: a number, a string or NULL (``None``)."""

    value: Value

    def evaluate(self, row: Sequence[Value]) -> Value:
        return self.value

    def positions(self) -> frozenset[int]:
        return frozenset()

    def __str__(self) -> str:
        return _render(self.value)


@dataclass(frozen=True)
class Arithmetic(Expr):
    """``left op right`` on numbers; NULL if either side is NULL (DuckDB's ``/`` and ``%``, see the module)."""

    op: ArithmeticOp
    left: Expr
    right: Expr

    def _apply(self, a: Value, b: Value) -> Value:
        if a is None or b is None:
            return None
        for side, value in ((self.left, a), (self.right, b)):
            if not _is_number(value):
                raise EntryError("not_a_number", f"{value!r} ({side}) is not a number in {self}")
        op = self.op
        if op == "+":
            return a + b
        if op == "-":
            return a - b
        if op == "*":
            return a * b
        if b == 0:
            return None  # DuckDB: a division or remainder by zero is NULL
        if op == "/":
            return a / b
        if isinstance(a, int) and isinstance(b, int):
            r = abs(a) % abs(b)
            return r if a >= 0 else -r  # the sign of the dividend (truncated division), as DuckDB's %
        return math.fmod(a, b)

    def positions(self) -> frozenset[int]:
        return self.left.positions() | self.right.positions()

    def compile(self) -> Callable[[Sequence[Value]], Value]:
        left, right, slow = self.left.compile(), self.right.compile(), self._apply
        fast = _FAST_ARITHMETIC.get(self.op)
        plain = _PLAIN

        def arithmetic(row: Sequence[Value]) -> Value:
            a, b = left(row), right(row)
            if fast is not None and type(a) in plain and type(b) in plain:
                return fast(a, b)
            return slow(a, b)

        return arithmetic

    def evaluate(self, row: Sequence[Value]) -> Value:
        return self._apply(self.left.evaluate(row), self.right.evaluate(row))

    def __str__(self) -> str:
        return f"({self.left} {self.op} {self.right})"


@dataclass(frozen=True)
class Negate(Expr):
    """``-operand``."""

    operand: Expr

    def evaluate(self, row: Sequence[Value]) -> Value:
        a = self.operand.evaluate(row)
        if a is None:
            return None
        if not _is_number(a):
            raise EntryError("not_a_number", f"{a!r} ({self.operand}) is not a number in {self}")
        return -a

    def positions(self) -> frozenset[int]:
        return self.operand.positions()

    def __str__(self) -> str:
        return f"-{self.operand}"


def _compare(op: CompareOp, a: Value, b: Value, where: Expr) -> bool | None:
    if a is None or b is None:
        return None
    fa, fb = _family(a), _family(b)
    if fa != fb or fa not in ("number", "string"):
        raise EntryError("not_comparable", f"{a!r} does not compare with {b!r} in {where} ({fa} and {fb})")
    if op == "=":
        return a == b
    if op == "<>":
        return a != b
    if op == "<":
        return a < b
    if op == "<=":
        return a <= b
    if op == ">":
        return a > b
    return a >= b


@dataclass(frozen=True)
class Compare(Expr):
    """``left op right``: unknown (``None``) when either side is NULL; numbers with numbers, strings with strings."""

    op: CompareOp
    left: Expr
    right: Expr

    def evaluate(self, row: Sequence[Value]) -> bool | None:
        return _compare(self.op, self.left.evaluate(row), self.right.evaluate(row), self)

    def compile(self) -> Callable[[Sequence[Value]], bool | None]:
        left, right, op, fast, plain = (
            self.left.compile(),
            self.right.compile(),
            self.op,
            _FAST_COMPARE[self.op],
            _PLAIN,
        )
        if isinstance(self.left, Column) and isinstance(self.right, Const) and type(self.right.value) in plain:
            position, constant = self.left.position, self.right.value  # column op number: the common selection

            def compare_constant(row: Sequence[Value]) -> bool | None:
                a = row[position]
                if type(a) in plain:
                    return fast(a, constant)
                return _compare(op, a, constant, self)

            return compare_constant

        def compare(row: Sequence[Value]) -> bool | None:
            a, b = left(row), right(row)
            if type(a) in plain and type(b) in plain:
                return fast(a, b)
            return _compare(op, a, b, self)

        return compare

    def positions(self) -> frozenset[int]:
        return self.left.positions() | self.right.positions()

    def __str__(self) -> str:
        return f"{self.left} {self.op} {self.right}"


@dataclass(frozen=True)
class And(Expr):
    """The conjunction: false if some operand is false, else unknown if some is unknown, else true."""

    operands: tuple[Expr, ...]

    def evaluate(self, row: Sequence[Value]) -> bool | None:
        unknown = False
        for operand in self.operands:
            value = operand.evaluate(row)
            if value is False:
                return False
            unknown = unknown or value is None
        return None if unknown else True

    def compile(self) -> Callable[[Sequence[Value]], bool | None]:
        parts = tuple(o.compile() for o in self.operands)

        def conjunction(row: Sequence[Value]) -> bool | None:
            unknown = False
            for part in parts:
                value = part(row)
                if value is False:
                    return False
                if value is None:
                    unknown = True
            return None if unknown else True

        return conjunction

    def positions(self) -> frozenset[int]:
        return frozenset().union(*(o.positions() for o in self.operands))

    def __str__(self) -> str:
        return " AND ".join(_paren(o) for o in self.operands)


@dataclass(frozen=True)
class Or(Expr):
    """The disjunction: true if some operand is true, else unknown if some is unknown, else false."""

    operands: tuple[Expr, ...]

    def evaluate(self, row: Sequence[Value]) -> bool | None:
        unknown = False
        for operand in self.operands:
            value = operand.evaluate(row)
            if value is True:
                return True
            unknown = unknown or value is None
        return None if unknown else False

    def compile(self) -> Callable[[Sequence[Value]], bool | None]:
        parts = tuple(o.compile() for o in self.operands)

        def disjunction(row: Sequence[Value]) -> bool | None:
            unknown = False
            for part in parts:
                value = part(row)
                if value is True:
                    return True
                if value is None:
                    unknown = True
            return None if unknown else False

        return disjunction

    def positions(self) -> frozenset[int]:
        return frozenset().union(*(o.positions() for o in self.operands))

    def __str__(self) -> str:
        return " OR ".join(_paren(o) for o in self.operands)


@dataclass(frozen=True)
class Not(Expr):
    """The negation; ``NOT unknown`` is unknown."""

    operand: Expr

    def evaluate(self, row: Sequence[Value]) -> bool | None:
        value = self.operand.evaluate(row)
        return None if value is None else not value

    def compile(self) -> Callable[[Sequence[Value]], bool | None]:
        operand = self.operand.compile()

        def negation(row: Sequence[Value]) -> bool | None:
            value = operand(row)
            return None if value is None else not value

        return negation

    def positions(self) -> frozenset[int]:
        return self.operand.positions()

    def __str__(self) -> str:
        return f"NOT {_paren(self.operand)}"


@dataclass(frozen=True)
class IsNull(Expr):
    """``operand IS [NOT] NULL``: never unknown."""

    operand: Expr
    negated: bool = False

    def evaluate(self, row: Sequence[Value]) -> bool:
        return (self.operand.evaluate(row) is None) != self.negated

    def compile(self) -> Callable[[Sequence[Value]], bool]:
        operand, negated = self.operand.compile(), self.negated
        return lambda row: (operand(row) is None) != negated

    def positions(self) -> frozenset[int]:
        return self.operand.positions()

    def __str__(self) -> str:
        return f"{self.operand} IS {'NOT ' if self.negated else ''}NULL"


@dataclass(frozen=True)
class InList(Expr):
    """``operand [NOT] IN (v1, ..., vk)``: ``operand = v1 OR ... OR operand = vk`` (negated: NOT of it)."""

    operand: Expr
    values: tuple[Expr, ...]
    negated: bool = False

    def evaluate(self, row: Sequence[Value]) -> bool | None:
        a = self.operand.evaluate(row)
        unknown = False
        found = False
        for value in self.values:
            hit = _compare("=", a, value.evaluate(row), self)
            if hit:
                found = True
                break
            unknown = unknown or hit is None
        result = True if found else (None if unknown else False)
        return result if not self.negated or result is None else not result

    def positions(self) -> frozenset[int]:
        return self.operand.positions().union(*(v.positions() for v in self.values))

    def __str__(self) -> str:
        return f"{self.operand} {'NOT ' if self.negated else ''}IN ({', '.join(str(v) for v in self.values)})"


@dataclass(frozen=True)
class NotNullCount(Expr):
    """``CASE WHEN operand IS NULL THEN 0 ELSE 1 END``: the lifting of ``COUNT(operand)`` (SQL counts the rows
    whose value is not NULL); ``SUM`` of it over a group is the group's ``COUNT(operand)``."""

    operand: Expr

    def evaluate(self, row: Sequence[Value]) -> int:
        return 0 if self.operand.evaluate(row) is None else 1

    def positions(self) -> frozenset[int]:
        return self.operand.positions()

    def __str__(self) -> str:
        return f"CASE WHEN {self.operand} IS NULL THEN 0 ELSE 1 END"


_FAST_COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    "=": operator.eq,
    "<>": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}
#: the operations whose int/float result needs no rule of its own (division and remainder do: by zero, signs)
_FAST_ARITHMETIC: dict[str, Callable[[Any, Any], Any]] = {"+": operator.add, "-": operator.sub, "*": operator.mul}


def _paren(e: Expr) -> str:
    return f"({e})" if isinstance(e, And | Or) else str(e)


def conjunction(parts: Sequence[Expr]) -> Expr | None:
    """The AND of ``parts`` (flattened; ``None`` for none, the part itself for one)."""
    flat: list[Expr] = []
    for part in parts:
        flat.extend(part.operands if isinstance(part, And) else (part,))
    unique = tuple(dict.fromkeys(flat))
    if not unique:
        return None
    return unique[0] if len(unique) == 1 else And(unique)


@dataclass(frozen=True)
class Entry:
    """How updates of ``relation`` enter the view: its selection, its NULL join keys and its computed attributes.

    ``arity`` is the relation's own (its schema's); the view's atoms of ``relation`` have
    ``arity + len(derived)`` terms, the computed values appended in order.  :meth:`enter` maps
    one row; O(size of the expressions).

    NULL never joins, as in SQL (an equi-join ``r.b = s.b`` is unknown when either side is NULL, and
    the engines would join ``None`` with ``None``): ``nonnull`` are the positions that are a join
    variable (a variable at two or more positions of the body) in every atom of ``relation``; a row
    with NULL there has no join partner, so it is dropped like a row failing the selection (σ_{x IS
    NOT NULL}, linear: a delete of such a row is dropped too).  ``null_refused`` are the positions
    that are a join variable in some atom of a self-joined ``relation`` but not in another, each with
    its description: a NULL there joins in none of the former and is a value in the latter, which one
    relation-wide entry cannot express, so the row is refused (:class:`EntryError`
    ``null_join_key``), never applied with a wrong result.

    >>> e = Entry("R", 2, Compare(">", Column(1, "qty"), Const(5)),
    ...           (("amount", Arithmetic("*", Column(0, "price"), Column(1, "qty"))),))
    >>> e.enter((2.5, 6)), e.enter((2.5, 5)), e.enter((2.5, None))
    ((2.5, 6, 15.0), None, None)
    >>> str(e)
    'R: WHERE qty > 5; amount := (price * qty)'
    >>> Entry("S", 2, nonnull=(0,)).enter((None, 1)), str(Entry("S", 2, nonnull=(0,)))
    (None, 'S: NULL never joins at position 0')
    """

    relation: str
    arity: int
    where: Expr | None = None
    derived: tuple[tuple[str, Expr], ...] = ()
    #: positions that are a join variable in every atom of the relation: a NULL there drops the row
    nonnull: tuple[int, ...] = ()
    #: (position, description) of positions that are a join variable in some atom of the relation only: a NULL
    #: there refuses the row
    null_refused: tuple[tuple[int, str], ...] = ()

    def _refuse_null(self, row: tuple[Value, ...]) -> None:
        for position, where in self.null_refused:
            if row[position] is None:
                raise EntryError(
                    "null_join_key",
                    f"NULL at position {position} ({where}): NULL never joins (as in SQL), and {self.relation} "
                    "occurs where that position is a join variable and where it is not, so the row can be neither "
                    "dropped nor applied",
                )

    def passes(self) -> Callable[[tuple[Value, ...]], bool] | None:
        """The row filter as one closure: ``True`` if the row enters, ``False`` if it is dropped (the selection
        is not true, or a NULL in a ``nonnull`` position); raises :class:`EntryError` (a value an expression
        cannot evaluate, a NULL in a ``null_refused`` position).  ``None`` if every row enters."""
        where = self.where.compile() if self.where is not None else None
        nonnull, refused, refuse = self.nonnull, self.null_refused, self._refuse_null
        if where is None and not nonnull and not refused:
            return None
        keys = itemgetter(*nonnull) if len(nonnull) > 1 else None
        single = nonnull[0] if len(nonnull) == 1 else None

        def passes(row: tuple[Value, ...]) -> bool:
            if where is not None and where(row) is not True:
                return False
            if single is not None:
                if row[single] is None:
                    return False
            elif keys is not None and None in keys(row):
                return False
            if refused:
                refuse(row)
            return True

        return passes

    def keep(
        self, rows: list[tuple[Value, ...]], where: Callable[[tuple[Value, ...]], Value] | None = None
    ) -> list[bool] | None:
        """:meth:`passes` of each row, in C-level passes where it can: ``None`` if every row enters.  Raises
        :class:`EntryError` as :meth:`passes` does (some row, not said which).  ``where`` is the selection
        compiled, if the caller has it."""
        kept = None
        if self.where is not None:
            kept = [p is True for p in map(where or self.where.compile(), rows)]
        for position in self.nonnull:
            values = list(map(itemgetter(position), rows))
            if None in values:
                mask = [v is not None for v in values]
                kept = mask if kept is None else [a and b for a, b in zip(kept, mask, strict=True)]
        for position, _ in self.null_refused:
            values = list(map(itemgetter(position), rows))
            if None in values:
                for row, ok in zip(rows, kept or [True] * len(rows), strict=True):
                    if ok:
                        self._refuse_null(row)
        return None if kept is None or all(kept) else kept

    def enter(self, row: tuple[Value, ...]) -> tuple[Value, ...] | None:
        """The row as the view's atoms see it, or ``None`` if the selection filters it out (or it has NULL
        where it would join).

        Raises :class:`EntryError` if a value does not fit an expression, or is a NULL in a ``null_refused``
        position."""
        where = self.where
        if where is not None and where.evaluate(row) is not True:
            return None
        if any(row[p] is None for p in self.nonnull):
            return None
        self._refuse_null(row)
        if not self.derived:
            return row
        return row + tuple(e.evaluate(row) for _, e in self.derived)

    def compile(self) -> Callable[[tuple[Value, ...]], tuple[Value, ...] | None]:
        """:meth:`enter` as one closure (the expressions compiled, :meth:`Expr.compile`): the same rows and errors."""
        passes = self.passes()
        derived = tuple(e.compile() for _, e in self.derived)
        if not derived:
            assert passes is not None
            return lambda row: row if passes(row) else None
        if passes is None:
            return lambda row: row + tuple([f(row) for f in derived])

        def enter(row: tuple[Value, ...]) -> tuple[Value, ...] | None:
            if not passes(row):
                return None
            return row + tuple([f(row) for f in derived])

        return enter

    @property
    def filters(self) -> bool:
        """Can a row be dropped where it enters (a selection, or NULL join keys)?"""
        return self.where is not None or bool(self.nonnull)

    def __str__(self) -> str:
        parts = [f"WHERE {self.where}"] if self.where is not None else []
        parts += [f"{name} := {e}" for name, e in self.derived]
        if self.nonnull:
            parts.append(
                f"NULL never joins at position{'s' if len(self.nonnull) > 1 else ''} "
                + ", ".join(map(str, self.nonnull))
            )
        parts += [f"NULL refused at position {p} ({where})" for p, where in self.null_refused]
        return f"{self.relation}: {'; '.join(parts)}"


def null_guarded(
    relations: Sequence[tuple[str, int]], atoms: Sequence[tuple[str, tuple[str, ...]]], entries: Sequence[Entry]
) -> tuple[Entry, ...]:
    """``entries`` with each relation's NULL join keys (:attr:`Entry.nonnull`, :attr:`Entry.null_refused`):
    ``relations`` are (relation, own arity) for every relation of the query, ``atoms`` (relation, terms) for
    every atom of the body (the terms after the own arity are computed attributes).

    A *join variable* is a variable at two or more positions of the body (in two atoms, or twice in one:
    SQL's ``r.x = s.y`` and ``r.x = r.y`` are both unknown on NULL); a variable at one position (a group-by
    key, an aggregated attribute, an unused column) keeps NULL as a value, as SQL's GROUP BY does.  Raises
    ``ValueError`` if a computed attribute is a join variable (the SQL front end makes none)."""
    count: dict[str, int] = {}
    for _, terms in atoms:
        for term in terms:
            count[term] = count.get(term, 0) + 1
    by_relation = {e.relation: e for e in entries}
    out: list[Entry] = []
    for relation, arity in relations:
        occurrences = [terms for r, terms in atoms if r == relation]
        nonnull: list[int] = []
        refused: list[tuple[int, str]] = []
        width = len(occurrences[0])
        for position in range(width):
            joins = [count[terms[position]] > 1 for terms in occurrences]
            if not any(joins):
                continue
            if position >= arity:
                raise ValueError(f"computed attribute {occurrences[0][position]} of {relation} is a join variable")
            if all(joins):
                nonnull.append(position)
            else:
                shown = ", ".join(f"{terms[position]} in {relation}({', '.join(terms)})" for terms in occurrences)
                refused.append((position, shown))
        entry = by_relation.get(relation)
        if not nonnull and not refused:
            if entry is not None:
                out.append(entry)
            continue
        if entry is None:
            entry = Entry(relation, arity)
        out.append(replace(entry, nonnull=tuple(nonnull), null_refused=tuple(refused)))
    return tuple(out)
