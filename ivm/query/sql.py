"""Parse the SQL fragment of conjunctive queries with aggregates (via sqlglot).

Supported::

    SELECT [DISTINCT] g1, ..., gk [, COUNT(*) | SUM(x * y * ...) | COVAR(x, y, ...)]
    FROM R [AS r], S [AS s] [JOIN T [AS t] ON eq AND ...] ...
    [WHERE eq AND eq AND ...]
    [GROUP BY g1, ..., gk]

where each ``eq`` equates two columns (an equi-join) or a column and a literal
(a selection).  The columns in SELECT outside the aggregate must be exactly
the GROUP BY columns; they are the free variables.  A SELECT without
aggregate lists the join result (free variables, each answer with its
multiplicity).  ``COVAR(x, y, ...)`` is this library's covariance aggregate:
the covariance-ring element of the features (count, sums and sums of
products), from which a linear regression is solved (F-IVM §6.1).

Anything else (OR, inequalities, outer joins, subqueries, HAVING, ORDER BY,
LIMIT, other functions) raises :class:`QuerySyntaxError` naming the construct.
Relation attributes come from ``schema`` or, if it is ``None``, from the Avro
schemas registered in ``schemas/`` (:func:`ivm.query.schemas.registered_schemas`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import sqlglot
from sqlglot import exp

from ivm.query.model import Aggregate, Atom, Constant, Query
from ivm.query.parse import QuerySyntaxError, validate


def parse_sql(text: str, schema: Mapping[str, Sequence[str]] | None = None) -> Query:
    """Read a SQL join-aggregate query as a :class:`Query`.

    >>> q = parse_sql(
    ...     "SELECT COUNT(*) FROM R, S, T WHERE R.B = S.B AND S.C = T.C AND T.A = R.A",
    ...     {"R": ["A", "B"], "S": ["B", "C"], "T": ["C", "A"]})
    >>> str(q)
    'Q() :- R(A, B), S(B, C), T(C, A)'
    >>> str(parse_sql("SELECT e1.src, COUNT(*) FROM E e1 JOIN E e2 ON e1.dst = e2.src "
    ...               "WHERE e2.dst = 7 GROUP BY e1.src", {"E": ["src", "dst"]}))
    'Q(src) :- E(src, dst), E(dst, 7)'
    >>> parse_sql("SELECT COUNT(*) FROM R WHERE R.A < 3", {"R": ["A"]})
    Traceback (most recent call last):
    ...
    ivm.query.parse.QuerySyntaxError: unsupported SQL: comparison '<' in WHERE (only equalities)
    """
    if schema is None:
        from ivm.query.schemas import registered_schemas

        schema = registered_schemas()
    try:
        tree = sqlglot.parse_one(text)
    except sqlglot.errors.ParseError as error:
        raise QuerySyntaxError(f"cannot parse SQL: {error}") from error
    if not isinstance(tree, exp.Select):
        raise QuerySyntaxError(f"unsupported SQL: {tree.key.upper()} (only SELECT ... FROM ... WHERE)")
    return _SqlReader(tree, schema).query()


_UNSUPPORTED_CLAUSES = {
    "having": "HAVING",
    "order": "ORDER BY",
    "limit": "LIMIT",
    "offset": "OFFSET",
    "qualify": "QUALIFY",
    "windows": "WINDOW",
    "with": "WITH (common table expressions)",
    "laterals": "LATERAL",
    "pivots": "PIVOT",
}
_COMPARISONS = {exp.NEQ: "<>", exp.LT: "<", exp.LTE: "<=", exp.GT: ">", exp.GTE: ">=", exp.Like: "LIKE"}


class _SqlReader:
    def __init__(self, tree: exp.Select, schema: Mapping[str, Sequence[str]]) -> None:
        self.tree = tree
        self.schema = {name.lower(): (name, list(attrs)) for name, attrs in schema.items()}
        self.tables: list[tuple[str, str, list[str]]] = []  # (alias, relation, attributes)
        self.parent: dict[tuple[int, int], tuple[int, int]] = {}
        self.constants: dict[tuple[int, int], Constant] = {}

    def query(self) -> Query:
        for arg, construct in _UNSUPPORTED_CLAUSES.items():
            if self.tree.args.get(arg):
                raise QuerySyntaxError(f"unsupported SQL: {construct}")
        self.read_from()
        where = self.tree.args.get("where")
        if where is not None:
            self.read_conjunction(where.this, "WHERE")
        free, aggregate = self.read_select()
        return validate(self.build(free, aggregate))

    # FROM and JOIN
    def read_from(self) -> None:
        source = self.tree.args.get("from") or self.tree.args.get("from_")
        if source is None:
            raise QuerySyntaxError("unsupported SQL: SELECT without FROM")
        self.add_table(source.this)
        for join in self.tree.args.get("joins") or []:
            side, kind = join.args.get("side"), join.args.get("kind")
            if side or (kind and kind.upper() not in ("INNER", "CROSS")):
                raise QuerySyntaxError(f"unsupported SQL: {' '.join(filter(None, [side, kind]))} JOIN")
            if join.args.get("using"):
                raise QuerySyntaxError("unsupported SQL: JOIN ... USING (write ON a = b)")
            self.add_table(join.this)
            if join.args.get("on") is not None:
                self.read_conjunction(join.args["on"], "JOIN ... ON")

    def add_table(self, node: exp.Expression) -> None:
        if not isinstance(node, exp.Table) or not isinstance(node.this, exp.Identifier):
            raise QuerySyntaxError(f"unsupported SQL: {node.key.upper()} in FROM (only table names)")
        found = self.schema.get(node.name.lower())
        if found is None:
            raise QuerySyntaxError(
                f"unknown relation {node.name!r}: give its attributes in the schema "
                f"(known: {sorted(v[0] for v in self.schema.values())})"
            )
        alias = node.alias_or_name
        if any(a.lower() == alias.lower() for a, _, _ in self.tables):
            raise QuerySyntaxError(f"table alias {alias!r} is used twice in FROM")
        self.tables.append((alias, found[0], found[1]))

    # WHERE / ON
    def read_conjunction(self, node: exp.Expression, where: str) -> None:
        if isinstance(node, exp.Paren):
            self.read_conjunction(node.this, where)
        elif isinstance(node, exp.And):
            self.read_conjunction(node.this, where)
            self.read_conjunction(node.expression, where)
        elif isinstance(node, exp.EQ):
            self.read_equality(node.this, node.expression, where)
        elif isinstance(node, exp.Or):
            raise QuerySyntaxError(f"unsupported SQL: OR in {where} (only conjunctions of equalities)")
        elif isinstance(node, exp.Not):
            raise QuerySyntaxError(f"unsupported SQL: NOT in {where}")
        else:
            name = next((sym for cls, sym in _COMPARISONS.items() if isinstance(node, cls)), None)
            construct = f"comparison {name!r}" if name else f"{node.key.upper()} ({node.sql()})"
            raise QuerySyntaxError(f"unsupported SQL: {construct} in {where} (only equalities)")

    def read_equality(self, left: exp.Expression, right: exp.Expression, where: str) -> None:
        if isinstance(left, exp.Column) and isinstance(right, exp.Column):
            a, b = self.find(self.column(left)), self.find(self.column(right))
            if a != b:
                self.parent[max(a, b)] = min(a, b)
            return
        if isinstance(right, exp.Column):
            left, right = right, left
        value = _literal(right)
        if not isinstance(left, exp.Column) or value is None:
            raise QuerySyntaxError(f"unsupported SQL: {left.sql()} = {right.sql()} in {where}")
        slot = self.column(left)
        old = self.constants.setdefault(slot, value)
        if old != value:
            raise QuerySyntaxError(f"{left.sql()} is equated with two constants {old!r} and {value!r}")

    def column(self, column: exp.Column) -> tuple[int, int]:
        """The (table index, position) a column reference names."""
        attr, table = column.name, column.table
        hits = []
        for t, (alias, _relation, attrs) in enumerate(self.tables):
            if table and table.lower() not in (alias.lower(),):
                continue
            hits += [(t, p) for p, a in enumerate(attrs) if a.lower() == attr.lower()]
        if not hits:
            raise QuerySyntaxError(f"unknown column {column.sql()!r}")
        if len(hits) > 1:
            raise QuerySyntaxError(f"ambiguous column {column.sql()!r}: qualify it with a table alias")
        return hits[0]

    def find(self, slot: tuple[int, int]) -> tuple[int, int]:
        while slot in self.parent:
            slot = self.parent[slot]
        return slot

    # SELECT and GROUP BY
    def read_select(self) -> tuple[list[tuple[int, int]], Aggregate | None]:
        plain: list[tuple[int, int]] = []
        aggregate: tuple[str, list[tuple[int, int]], int | float] | None = None
        for item in self.tree.expressions:
            node = item.this if isinstance(item, exp.Alias) else item
            if isinstance(node, exp.Column):
                plain.append(self.find(self.column(node)))
            elif isinstance(node, exp.Star):
                raise QuerySyntaxError("unsupported SQL: SELECT * (name the columns)")
            else:
                if aggregate is not None:
                    raise QuerySyntaxError("unsupported SQL: more than one aggregate in SELECT")
                aggregate = self.read_aggregate(node)
        group = self.tree.args.get("group")
        if group is not None:
            keys = []
            for node in group.expressions:
                if not isinstance(node, exp.Column):
                    raise QuerySyntaxError(f"unsupported SQL: GROUP BY {node.sql()} (only columns)")
                keys.append(self.find(self.column(node)))
            if set(keys) != set(plain):
                raise QuerySyntaxError("the columns in SELECT outside the aggregate must be the GROUP BY columns")
        elif aggregate is not None and plain:
            raise QuerySyntaxError("columns next to an aggregate need GROUP BY")
        free = list(dict.fromkeys(plain))
        if aggregate is None:
            return free, None
        kind, slots, coefficient = aggregate
        self._aggregate_slots = slots
        return free, Aggregate(kind, (), coefficient)  # variables filled in by build()

    def read_aggregate(self, node: exp.Expression) -> tuple[str, list[tuple[int, int]], int | float]:
        if isinstance(node, exp.Count):
            if not isinstance(node.this, exp.Star):
                raise QuerySyntaxError(f"unsupported SQL: {node.sql()} (only COUNT(*))")
            return "count", [], 1
        if isinstance(node, exp.Sum):
            if isinstance(node.this, exp.Distinct):
                raise QuerySyntaxError("unsupported SQL: SUM(DISTINCT ...)")
            slots: list[tuple[int, int]] = []
            coefficient: int | float = 1
            for factor in _factors(node.this):
                value = _literal(factor)
                if isinstance(factor, exp.Column):
                    slots.append(self.find(self.column(factor)))
                elif isinstance(value, int | float) and not isinstance(value, bool):
                    coefficient *= value
                else:
                    raise QuerySyntaxError(
                        f"unsupported SQL: {factor.sql()} inside SUM (only products of columns and numbers)"
                    )
            return "sum", slots, coefficient
        name = node.name.upper() if isinstance(node, exp.Anonymous) else node.key.upper()
        if name in ("COVAR", "COVAR_MATRIX"):
            args = node.expressions
            if not args or not all(isinstance(a, exp.Column) for a in args):
                raise QuerySyntaxError("COVAR takes one or more columns: COVAR(R.x, S.y, ...)")
            return "covariance", [self.find(self.column(a)) for a in args], 1
        raise QuerySyntaxError(f"unsupported SQL: {name} in SELECT (use COUNT(*), SUM(x * y) or COVAR(x, y, ...))")

    # the query
    def build(self, free: list[tuple[int, int]], aggregate: Aggregate | None) -> Query:
        slots = [(t, p) for t, (_, _, attrs) in enumerate(self.tables) for p in range(len(attrs))]
        classes: dict[tuple[int, int], list[tuple[int, int]]] = {}
        for slot in slots:
            classes.setdefault(self.find(slot), []).append(slot)
        constant_of: dict[tuple[int, int], Constant] = {}
        for slot, value in self.constants.items():
            root = self.find(slot)
            if constant_of.setdefault(root, value) != value:
                raise QuerySyntaxError(f"a join column is equated with two constants {value!r}")
        names: dict[tuple[int, int], str] = {}
        used: set[str] = set()
        for root, members in classes.items():
            if root in constant_of and root not in free and not self._in_aggregate(root):
                continue
            candidates = [self.tables[t][2][p] for t, p in members]
            name = next((c for c in candidates if c not in used), None)
            if name is None or name.startswith("_"):
                t, p = members[0]
                name = f"{self.tables[t][0]}_{self.tables[t][2][p]}"
            while name in used:
                name += "_"
            names[root] = name
            used.add(name)
        fresh = 0
        atoms = []
        for t, (_, relation, attrs) in enumerate(self.tables):
            terms: list[str] = []
            constants: list[tuple[int, Constant]] = []
            for p in range(len(attrs)):
                root = self.find((t, p))
                if root in constant_of:
                    constants.append((p, constant_of[root]))
                    if root not in names:
                        fresh += 1
                        terms.append(f"_{fresh}")
                        continue
                terms.append(names[root])
            atoms.append(Atom(relation, tuple(terms), tuple(constants)))
        if aggregate is not None and aggregate.kind != "count":
            aggregate = Aggregate(aggregate.kind, tuple(names[s] for s in self._aggregate_slots), aggregate.coefficient)
        return Query("Q", tuple(names[s] for s in free), tuple(atoms), aggregate or Aggregate())

    def _in_aggregate(self, root: tuple[int, int]) -> bool:
        return root in getattr(self, "_aggregate_slots", [])


def _factors(node: exp.Expression) -> list[exp.Expression]:
    if isinstance(node, exp.Paren):
        return _factors(node.this)
    if isinstance(node, exp.Mul):
        return _factors(node.this) + _factors(node.expression)
    return [node]


def _literal(node: exp.Expression) -> Constant | None:
    if isinstance(node, exp.Neg):
        inner = _literal(node.this)
        return -inner if isinstance(inner, int | float) else None
    if isinstance(node, exp.Literal):
        if node.is_string:
            return node.this
        text = node.this
        return float(text) if any(c in text for c in ".eE") else int(text)
    return None
