"""An immutable conjunctive query with an aggregate.

``Q(free...) :- R1(x...), ..., Rn(x...)`` over Z-relations; the aggregate is
the sum over the bound variables of the product of the atoms' multiplicities
(COUNT), as in F-IVM §2 and the q-hierarchical paper §2.  F-IVM §2.4 lifts
variables into other rings: ``SUM(a*b)`` is the sum ring with lifting
``g_a(x) = x``, ``COVAR(a, b, c)`` the covariance ring of degree 3 used for
linear regression (F-IVM §6.1).

SQL's per-group aggregates that are no ring payload, ``AVG(x)``, ``MIN(x)``,
``MAX(x)`` and ``COUNT(DISTINCT x)``, and ``HAVING`` (a conjunction of
:class:`Comparison`), are computed per group from ring queries over the same
body (:func:`aggregate_inputs`): the count and the sum of a group (Z × Z/R), and
the multiset of a group's ``x`` values, which is the COUNT grouped by the free
variables plus ``x``.

Constants are selections: ``R(a, 5)`` is stored as ``R(a, _1)`` with the
fresh variable ``_1`` fixed to ``5`` (Berkholz et al. §7 [derived]: "treat
constants in atoms like the repeated-variable filter").  The fresh variable
occurs in no other atom, so every structural test reads it as a private bound
variable, which is exactly what a selection on ``R`` is.  Engines that do not
filter on constants must refuse queries with :attr:`Query.has_selections`
(or pre-filter updates with :meth:`Atom.matches`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ivm.query.expr import Entry

Constant = int | float | str

FRESH = re.compile(r"_\d+")
"""Names of the variables the parsers invent (anonymous ``_`` and constants)."""


def _render_constant(value: Constant) -> str:
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return repr(value)


@dataclass(frozen=True)
class Atom:
    """One relation occurrence ``relation(terms...)``.

    ``terms`` holds one variable name per attribute position (repeats allowed:
    ``E(x, x)``); ``constants`` lists ``(position, value)`` selections, whose
    positions hold fresh variables of their own.
    """

    relation: str
    terms: tuple[str, ...]
    constants: tuple[tuple[int, Constant], ...] = ()

    @property
    def variables(self) -> frozenset[str]:
        return frozenset(self.terms)

    @property
    def arity(self) -> int:
        return len(self.terms)

    def matches(self, row: tuple[Any, ...]) -> bool:
        """Does ``row`` pass this atom's selections (constants and repeated variables)?

        >>> Atom("E", ("x", "x")).matches((1, 1)), Atom("E", ("x", "x")).matches((1, 2))
        (True, False)
        >>> Atom("R", ("a", "_1"), ((1, 5),)).matches((7, 5))
        True
        """
        if len(row) != len(self.terms):
            return False
        if any(row[pos] != value for pos, value in self.constants):
            return False
        seen: dict[str, Any] = {}
        return all(seen.setdefault(var, value) == value for var, value in zip(self.terms, row, strict=True))

    def __str__(self) -> str:
        fixed = dict(self.constants)
        shown = []
        for pos, term in enumerate(self.terms):
            if pos in fixed:
                shown.append(_render_constant(fixed[pos]))
            elif FRESH.fullmatch(term):
                shown.append("_")
            else:
                shown.append(term)
        return f"{self.relation}({', '.join(shown)})"


AggregateKind = Literal["count", "sum", "covariance", "avg", "min", "max", "count_distinct"]
#: the kinds computed in a ring over the view tree (F-IVM §2.4); the others are computed per group from them
RING_KINDS = frozenset({"count", "sum", "covariance"})
#: the kinds read from the multiset of a group's values of their variable
VALUE_KINDS = frozenset({"min", "max", "count_distinct"})


@dataclass(frozen=True)
class Aggregate:
    """The aggregate of the query and the ring it is computed in (F-IVM §2.4).

    - ``count``: ``COUNT(*)``, the Z ring (multiplicities);
    - ``sum``: ``SUM(coefficient * v1 * ... * vk)``, the sum ring with lifting
      ``g_v(x) = x`` for each factor ``v``;
    - ``covariance``: ``COVAR(v1, ..., vk)``, the degree-k covariance ring
      (count, the k sums and the k*k sums of products), from which the least
      squares model of a linear regression is solved (F-IVM §6.1);
    - ``avg``: ``AVG(v)``, the sum over the count of the Z × Z/R payload;
    - ``min``, ``max``, ``count_distinct``: ``MIN(v)``, ``MAX(v)``,
      ``COUNT(DISTINCT v)``, read from the multiset of the group's ``v`` values
      (the values with a positive count).

    >>> str(Aggregate("min", ("c",))), str(Aggregate("count_distinct", ("c",))), Aggregate("avg", ("c",)).in_ring
    ('MIN(c)', 'COUNT(DISTINCT c)', False)
    """

    kind: AggregateKind = "count"
    variables: tuple[str, ...] = ()
    coefficient: int | float = 1

    @property
    def in_ring(self) -> bool:
        """Is this aggregate a ring payload of the view tree (COUNT, SUM, COVAR)?"""
        return self.kind in RING_KINDS

    @property
    def ring(self) -> str:
        """The payload ring, named as in F-IVM §2.4 (for the other kinds: what they are computed from)."""
        if self.kind == "count":
            return "Z (count)"
        if self.kind == "sum":
            return "Z/R (sum of products, lifting g_v(x) = x)"
        if self.kind == "avg":
            return "the count and sum of each group (Z × Z/R; AVG = sum / count)"
        if self.kind in VALUE_KINDS:
            return f"the multiset of {', '.join(self.variables)} per group (Z: a count per group and value)"
        return f"covariance ring of degree {len(self.variables)}"

    def __str__(self) -> str:
        if self.kind == "count":
            return "COUNT(*)"
        if self.kind == "covariance":
            return f"COVAR({', '.join(self.variables)})"
        if self.kind == "count_distinct":
            return f"COUNT(DISTINCT {', '.join(self.variables)})"
        if self.kind in ("avg", "min", "max"):
            return f"{self.kind.upper()}({', '.join(self.variables)})"
        factors = list(self.variables)
        if self.coefficient != 1 or not factors:
            factors.insert(0, repr(self.coefficient))
        return f"SUM({' * '.join(factors)})"


COUNT = Aggregate()

Operator = Literal["=", "<>", "<", "<=", ">", ">="]
OPERATORS: tuple[Operator, ...] = ("=", "<>", "<", "<=", ">", ">=")
_FLIPPED: dict[str, Operator] = {"=": "=", "<>": "<>", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


def flipped(op: Operator) -> Operator:
    """The operator with its operands swapped: ``3 < x`` is ``x > 3``.

    >>> flipped("<"), flipped("<>")
    ('>', '<>')
    """
    return _FLIPPED[op]


@dataclass(frozen=True)
class Comparison:
    """One conjunct of ``HAVING``: ``term op value``.

    ``term`` is an :class:`Aggregate` of the group or a free (GROUP BY)
    variable; ``value`` a constant.  A group is in the result only while every
    conjunct holds.  Numbers compare as numbers (``2 = 2.0``); a value that does
    not compare with the constant (``NULL``, or a string against a number) fails
    the comparison, as SQL's unknown does.

    >>> c = Comparison(Aggregate("min", ("c",)), ">=", 2)
    >>> str(c), c.holds(2.0), c.holds(1), c.holds(None)
    ('MIN(c) >= 2', True, False, False)
    """

    term: Aggregate | str
    op: Operator
    value: Constant

    def __post_init__(self) -> None:
        if self.op not in OPERATORS:
            raise ValueError(f"unknown comparison {self.op!r}; known: {OPERATORS}")

    def holds(self, actual: Any) -> bool:
        """Does ``actual op value`` hold?  O(1)."""
        value, op = self.value, self.op
        try:
            if op == "=":
                return actual is not None and actual == value
            if op == "<>":
                return actual is not None and actual != value
            if op == "<":
                return actual < value
            if op == "<=":
                return actual <= value
            if op == ">":
                return actual > value
            return actual >= value
        except TypeError:  # None, or types that do not compare
            return False

    def __str__(self) -> str:
        return f"{self.term} {self.op} {_render_constant(self.value)}"


@dataclass(frozen=True)
class Query:
    """A conjunctive query: a head name, free variables, a body of atoms and an aggregate.

    >>> from ivm.query.parse import parse
    >>> q = parse("Q(a) :- R(a, b), S(b, c)")
    >>> q.free, sorted(q.bound), q.atoms_of("b")
    (('a',), ['b', 'c'], frozenset({0, 1}))
    """

    name: str
    free: tuple[str, ...]
    atoms: tuple[Atom, ...]
    aggregate: Aggregate = field(default=COUNT)
    #: the conjuncts of HAVING (empty: every group with rows is in the result)
    having: tuple[Comparison, ...] = ()
    #: per relation, how its updates enter: SQL's selection on it and its computed attributes
    #: (:class:`ivm.query.expr.Entry`, applied by the view before any engine; the atoms hold the computed
    #: attributes after the relation's own)
    entry: tuple[Entry, ...] = ()

    @property
    def variables(self) -> frozenset[str]:
        return frozenset(v for atom in self.atoms for v in atom.terms)

    @property
    def bound(self) -> frozenset[str]:
        return self.variables - set(self.free)

    @property
    def relations(self) -> Mapping[str, int]:
        """Relation name -> arity, in order of first occurrence."""
        return {atom.relation: len(atom.terms) for atom in self.atoms}

    @property
    def self_join_free(self) -> bool:
        """Does each relation symbol occur in at most one atom?"""
        return len({a.relation for a in self.atoms}) == len(self.atoms)

    @property
    def has_selections(self) -> bool:
        """Does some atom fix a position to a constant?"""
        return any(a.constants for a in self.atoms)

    @property
    def beyond_rings(self) -> bool:
        """Does the query need per-group work beyond one ring payload: AVG, MIN, MAX, COUNT(DISTINCT) or HAVING?"""
        return not self.aggregate.in_ring or bool(self.having)

    @property
    def aggregates(self) -> tuple[Aggregate, ...]:
        """The aggregates the query computes per group: the head's, then those of HAVING (each once)."""
        found = dict.fromkeys([self.aggregate, *(c.term for c in self.having if isinstance(c.term, Aggregate))])
        return tuple(found)

    @property
    def is_boolean(self) -> bool:
        return not self.free

    @property
    def is_full(self) -> bool:
        return set(self.free) == self.variables

    def atoms_of(self, variable: str) -> frozenset[int]:
        """Indices of the atom occurrences that contain ``variable`` (``atoms(x)``, 002 §2)."""
        return frozenset(i for i, a in enumerate(self.atoms) if variable in a.terms)

    def variable_order(self) -> tuple[str, ...]:
        """The variables in order of first occurrence (free variables first)."""
        seen = dict.fromkeys(self.free)
        for atom in self.atoms:
            seen.update(dict.fromkeys(atom.terms))
        return tuple(seen)

    def induced(self, indices: Iterable[int]) -> Query:
        """The induced CQ ``Q[E']`` on the atoms at ``indices`` (003 §1.1).

        Its free variables are the original free variables that still occur.
        """
        keep = sorted(set(indices))
        atoms = tuple(self.atoms[i] for i in keep)
        present = {v for a in atoms for v in a.terms}
        return Query(self.name, tuple(v for v in self.free if v in present), atoms, self.aggregate)

    def with_free(self, free: Iterable[str]) -> Query:
        """The same body with other free variables."""
        return Query(self.name, tuple(free), self.atoms, self.aggregate)

    def __str__(self) -> str:
        body = ", ".join(str(a) for a in self.atoms)
        head = list(self.free)
        if self.aggregate != COUNT:
            head.append(str(self.aggregate))
        having = f" HAVING {', '.join(str(c) for c in self.having)}" if self.having else ""
        entry = "".join(f" | {e}" for e in self.entry)
        return f"{self.name}({', '.join(head)}) :- {body}{having}{entry}"

    @property
    def entries(self) -> Mapping[str, Entry]:
        """Relation name -> its :class:`~ivm.query.expr.Entry` (only relations with a selection or computed
        attributes)."""
        return {e.relation: e for e in self.entry}


def aggregate_inputs(query: Query) -> tuple[Query, ...]:
    """The ring queries over ``query``'s body whose per-group results give its aggregates.

    - the sum of a group, for ``SUM(v1 * ... * vk)`` and ``AVG(v)``: the query
      with that SUM (coefficient 1), whose Z × Z/R payload is the group's
      count beside its sum (F-IVM Remark 18);
    - the multiset of a group's ``x`` values, for ``MIN(x)``, ``MAX(x)`` and
      ``COUNT(DISTINCT x)``: the COUNT grouped by the free variables plus
      ``x``, i.e. ``x ↦`` the number of join results of the group with that
      ``x`` (none when ``x`` is a free variable: its group has one value);
    - the COUNT grouped by the free variables, when nothing above gives the
      groups' counts (a group exists while its count is positive).

    Each input once, in the order the aggregates name them.

    >>> from ivm.query.parse import parse
    >>> q = parse("Q(a, MIN(c)) :- R(a, b), S(b, c) HAVING AVG(b) > 1, COUNT(*) > 2")
    >>> [str(i) for i in aggregate_inputs(q)]
    ['Q(a, c) :- R(a, b), S(b, c)', 'Q(a, SUM(b)) :- R(a, b), S(b, c)']
    >>> [str(i) for i in aggregate_inputs(parse("Q(a) :- R(a, b) HAVING a > 1"))]
    ['Q(a) :- R(a, b)']
    """
    inputs: dict[Query, None] = {}
    for aggregate in query.aggregates:
        if aggregate.kind in VALUE_KINDS:
            (x,) = aggregate.variables
            if x not in query.free:
                inputs[Query(query.name, (*query.free, x), query.atoms)] = None
        elif aggregate.kind in ("sum", "avg"):
            inputs[Query(query.name, query.free, query.atoms, Aggregate("sum", aggregate.variables))] = None
        elif aggregate.kind == "covariance":
            inputs[Query(query.name, query.free, query.atoms, aggregate)] = None
    if not inputs:
        inputs[Query(query.name, query.free, query.atoms)] = None
    return tuple(inputs)
