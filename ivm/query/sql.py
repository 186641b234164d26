"""Parse the SQL fragment of conjunctive queries with aggregates (via sqlglot).

Supported, exactly::

    SELECT [DISTINCT] item, ..., item
    FROM from_item, ..., from_item
    [WHERE where AND where AND ...]
    [GROUP BY column, ..., column]
    [HAVING cond AND cond AND ...]

    from_item := table [[AS] alias] join ... join
    join      := [INNER] JOIN table [[AS] alias] ON where AND where AND ...
               | [INNER] JOIN table [[AS] alias] USING (c1, ..., ck)
               | NATURAL JOIN table [[AS] alias]
               | CROSS JOIN table [[AS] alias]
    item      := column | aggregate   [[AS] name]
    aggregate := COUNT(*) | SUM(f * f * ...) | COVAR(column, ..., column) | COUNT(e)
               | AVG(e) | MIN(e) | MAX(e) | COUNT(DISTINCT column)
    where     := column = column | column = literal | selection   (parentheses allowed)
    selection := a condition over the columns of one table: e op e, e [NOT] BETWEEN e AND e,
                 e [NOT] IN (e, ...), e IS [NOT] NULL, combined with AND, OR, NOT
    e         := column | literal | e + e | e - e | e * e | e / e | e % e | -e | (e)
    cond      := term op literal | literal op term          (parentheses allowed)
    term      := aggregate other than COVAR | GROUP BY column
    op        := = | <> | != | < | <= | > | >=

where a ``column`` is ``c`` or ``alias.c``, a ``literal`` is a number (with an
optional minus sign) or a string, and each SUM factor ``f`` is a column, a
number or an ``e`` over the columns of one table; the ``e`` of COUNT, AVG, MIN
and MAX is over one table's columns too.  The meaning is standard SQL's (as
DuckDB computes it, bag semantics):

- a comma is a cross product and binds looser than JOIN: ``R, S NATURAL JOIN T``
  is ``R`` times ``(S NATURAL JOIN T)``; an ON clause sees the tables to its left;
- ``JOIN t USING (c, ...)`` equi-joins each ``c``, which must be a column of
  ``t`` and name exactly one column of the join so far (a column merged by an
  earlier USING/NATURAL counts once), and merges the pairs;
  ``NATURAL JOIN t`` is ``USING`` over every column name that the join so far
  and ``t`` have in common (none: a cross product, as standard SQL says;
  DuckDB alone refuses that and asks for CROSS JOIN); a name the join so far
  has twice, unmerged, is ambiguous and refused, as DuckDB does;
- an unqualified column must name one column of the FROM items (a merged
  column counts once), else it is unknown or ambiguous;
- the columns in SELECT outside the aggregate are the free variables; each is
  selected once, and with an aggregate they must be exactly the GROUP BY
  columns (one result row per group).  A SELECT without aggregate lists the
  join result: each answer with its multiplicity, i.e. SQL's bag of rows;
  GROUP BY and DISTINCT there would make it a set, which this model cannot
  state, so they are refused.  DISTINCT next to an aggregate changes nothing
  (the groups are distinct already) and is accepted;
- ``COVAR(x, y, ...)`` is this library's covariance aggregate: the
  covariance-ring element of the features (count, sums and sums of products),
  from which a linear regression is solved (F-IVM §6.1).  One difference from
  SQL: a SUM over no rows is 0 here, NULL in SQL;
- ``AVG``, ``MIN``, ``MAX`` and ``COUNT(DISTINCT x)`` are SQL's: a group is in
  the result while it has rows (AVG a float, MIN/MAX compared as numbers,
  COUNT(DISTINCT x) the number of distinct ``x`` values, multiplicities
  ignored); without GROUP BY, AVG/MIN/MAX over no rows are NULL (``None``) and
  COUNT(DISTINCT x) is 0;
- ``HAVING`` keeps the groups whose conditions all hold: each compares one
  aggregate (any above but COVAR, in SELECT or not) or one GROUP BY column
  with a literal;
- a *selection* (a condition of WHERE or ON over one table's columns) is the
  relational σ of that table's relation, with SQL's three-valued logic (NULL
  compares unknown, and a row passes only if its condition is true).  It is
  applied where the relation's updates enter the view, so the engines and
  their guarantees are those of the query without it
  (:class:`ivm.query.expr.Entry`); every occurrence of a self-joined relation
  must have the same selection.  A condition over two tables' columns other
  than an equality of columns is a theta join, refused;
- an expression ``e`` inside an aggregate is a *computed attribute* of its
  table's relation, appended to each row where it enters (F-IVM §2.4: a
  lifting of the relation's own variables, which keeps every plan); a SUM over
  several tables is a product of per-table factors ``SUM(f(R) * g(S))``, each
  lifted at its relation; a sum of columns of different tables is refused.
  ``COUNT(e)`` counts the rows whose ``e`` is not NULL (SQL's rule): the SUM of
  the computed attribute ``1 if e is not NULL else 0``.  A NULL reaching SUM or
  AVG (a NULL value, a division by zero) is refused as a value that is no
  number, as for a column.

Anything else raises :class:`QuerySyntaxError` naming the construct and where
it is ("line L, column C", 1-based): outer, semi and anti joins, subqueries,
CTEs, set operations, theta joins, EXISTS, LIKE, CASE, other functions,
expressions in the head outside the aggregate, window functions, OR and NOT in
HAVING, ORDER BY, LIMIT, OFFSET, SELECT *, ... .  The parse
tree is audited against an allow-list of node kinds and of their options, so
a construct nobody listed is refused too, never dropped.  Relation attributes
come from ``schema`` or, if it is ``None``, from the Avro schemas registered in
``schemas/`` (:func:`ivm.query.schemas.registered_schemas`).
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import sqlglot
from sqlglot import exp
from sqlglot.tokens import Token, TokenType

from ivm.query import expr as ex
from ivm.query.model import Aggregate, Atom, Comparison, Constant, Operator, Query, flipped
from ivm.query.parse import QuerySyntaxError, validate

Slot = tuple[int, int]
"""A column of the FROM clause: (table index, attribute position)."""


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
    >>> str(parse_sql("SELECT B, SUM(A * C) FROM R NATURAL JOIN S JOIN T USING (C) GROUP BY B",
    ...               {"R": ["A", "B"], "S": ["B", "C"], "T": ["C", "D"]}))
    'Q(B, SUM(A * C)) :- R(A, B), S(B, C), T(C, D)'
    >>> str(parse_sql("SELECT SUM(R.A * (1 - R.B)) FROM R WHERE R.A < 3 OR R.B IS NULL", {"R": ["A", "B"]}))
    'Q(SUM(A * expr1)) :- R(A, B, expr1) | R: WHERE A < 3 OR B IS NULL; expr1 := (1 - B)'
    >>> parse_sql("SELECT COUNT(*)\\nFROM R\\nWHERE R.A LIKE 'x%'", {"R": ["A"]})
    Traceback (most recent call last):
    ...
    ivm.query.parse.QuerySyntaxError: unsupported SQL: LIKE in WHERE at line 3, column 11
    """
    if schema is None:
        from ivm.query.schemas import registered_schemas

        schema = registered_schemas()
    try:
        tree = sqlglot.parse_one(text)
    except sqlglot.errors.ParseError as error:
        raise QuerySyntaxError(_parse_error_message(error)) from error
    except sqlglot.errors.SqlglotError as error:  # the tokenizer's errors (an unterminated string, ...)
        raise QuerySyntaxError(f"cannot parse SQL: {error}") from error
    source = _Source(text)
    while isinstance(tree, exp.Subquery) and _set_args(tree) == ["this"]:
        tree = tree.this  # (SELECT ...) is SELECT ...
    if not isinstance(tree, exp.Select):
        raise QuerySyntaxError(
            f"unsupported SQL: {_statement_name(tree)} {source.statement_at(tree)} "
            "(only one SELECT ... FROM ... WHERE ...)"
        )
    _audit(tree, source)
    return _SqlReader(tree, schema, source).query()


def _parse_error_message(error: sqlglot.errors.ParseError) -> str:
    first = error.errors[0] if error.errors else {}
    line, end, highlight = first.get("line"), first.get("col"), first.get("highlight") or ""
    if not isinstance(line, int) or not isinstance(end, int):
        return f"cannot parse SQL: {error}"
    column = max(1, end - len(highlight) + 1) if highlight else end
    return f"cannot parse SQL: {first.get('description', error)} at line {line}, column {column}"


def _statement_name(tree: exp.Expression) -> str:
    if isinstance(tree, exp.Block):
        return "more than one statement"
    if isinstance(tree, exp.SetOperation):
        return tree.key.upper()
    return f"{tree.key.upper()} statement"


def _set_args(node: exp.Expression) -> list[str]:
    """The keys of ``node``'s arguments that are set (not None, False or empty)."""
    return [key for key, value in node.args.items() if _is_set(value)]


def _is_set(value: object) -> bool:
    if value is None or value is False:
        return False
    return not (isinstance(value, list | str) and not value)


# Where a construct is: sqlglot records the position of identifiers, literals,
# stars and function names (``node.meta``); keywords are found in the tokens.

_INFIX: dict[type[exp.Expression], tuple[TokenType, ...]] = {
    exp.Or: (TokenType.OR,),
    exp.In: (TokenType.IN,),
    exp.Between: (TokenType.BETWEEN,),
    exp.Like: (TokenType.LIKE,),
    exp.ILike: (TokenType.ILIKE,),
    exp.Is: (TokenType.IS,),
    exp.EQ: (TokenType.EQ,),
    exp.NEQ: (TokenType.NEQ,),
    exp.NullSafeEQ: (TokenType.NULLSAFE_EQ,),
    exp.LT: (TokenType.LT,),
    exp.LTE: (TokenType.LTE,),
    exp.GT: (TokenType.GT,),
    exp.GTE: (TokenType.GTE,),
    exp.Add: (TokenType.PLUS,),
    exp.Sub: (TokenType.DASH,),
    exp.Mul: (TokenType.STAR,),
    exp.Div: (TokenType.SLASH,),
    exp.Mod: (TokenType.MOD, TokenType.PERCENT),
    exp.DPipe: (TokenType.DPIPE,),
    exp.Union: (TokenType.UNION,),
    exp.Intersect: (TokenType.INTERSECT,),
    exp.Except: (TokenType.EXCEPT,),
    exp.Window: (TokenType.OVER,),
}
_PREFIX: dict[type[exp.Expression], tuple[TokenType, ...]] = {
    exp.Not: (TokenType.NOT,),
    exp.Exists: (TokenType.EXISTS,),
    exp.Subquery: (TokenType.L_PAREN,),
    exp.Select: (TokenType.SELECT,),
    exp.With: (TokenType.WITH,),
    exp.Order: (TokenType.ORDER_BY,),
    exp.Limit: (TokenType.LIMIT,),
    exp.Fetch: (TokenType.FETCH,),
    exp.Offset: (TokenType.OFFSET,),
    exp.Having: (TokenType.HAVING,),
    exp.Qualify: (TokenType.QUALIFY,),
    exp.Lateral: (TokenType.LATERAL,),
    exp.Case: (TokenType.CASE,),
    exp.Distinct: (TokenType.DISTINCT,),
    exp.Group: (TokenType.GROUP_BY,),
}
# Leaves without a recorded position, found as the first such token after their left neighbour.
_LEAVES: dict[type[exp.Expression], tuple[TokenType, ...]] = {
    exp.Placeholder: (TokenType.PLACEHOLDER, TokenType.COLON, TokenType.PARAMETER),
    exp.Null: (TokenType.NULL,),
    exp.Boolean: (TokenType.TRUE, TokenType.FALSE),
}
# Tokens that may stand between a prefix keyword and the first positioned part of its construct.
_GLUE = frozenset(
    getattr(TokenType, n)
    for n in ("L_PAREN", "SELECT", "DISTINCT", "ALL", "RECURSIVE", "FIRST", "NEXT", "WHEN")
    if hasattr(TokenType, n)
)
_JOIN_WORDS = frozenset(
    getattr(TokenType, n)
    for n in (
        "JOIN",
        "NATURAL",
        "LEFT",
        "RIGHT",
        "FULL",
        "INNER",
        "OUTER",
        "CROSS",
        "SEMI",
        "ANTI",
        "ASOF",
        "POSITIONAL",
        "STRAIGHT_JOIN",
        "LATERAL",
    )
    if hasattr(TokenType, n)
)


class _Source:
    """The SQL text and its tokens, to say where a construct is."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens: list[Token] = sqlglot.tokenize(text)
        self.starts = [token.start for token in self.tokens]

    def at(self, offset: int) -> str:
        """``line L, column C`` (1-based) of a character offset."""
        line = self.text.count("\n", 0, offset) + 1
        column = offset - self.text.rfind("\n", 0, offset)
        return f"line {line}, column {column}"

    def statement_at(self, tree: exp.Expression) -> str:
        """Where a statement other than one SELECT is refused: its set operation, its second
        statement, or its first word."""
        if isinstance(tree, exp.Block):
            token = next((t for t in self.tokens if t.token_type == TokenType.SEMICOLON), None)
            return "at " + self.at(token.start) if token else self.where(tree)
        if isinstance(tree, exp.SetOperation):
            return self.where(tree)
        return "at " + self.at(self.tokens[0].start) if self.tokens else self.where(tree)

    def where(self, node: exp.Expression) -> str:
        """``at line L, column C`` of ``node``."""
        return "at " + self.at(self.locate(node))

    def locate(self, node: exp.Expression) -> int:
        """The offset of ``node``, or of its nearest positioned ancestor."""
        current: exp.Expression | None = node
        while current is not None:
            offset = self.offset(current)
            if offset is not None:
                return offset
            current = current.parent
        return 0

    def offset(self, node: exp.Expression) -> int | None:
        """Where ``node`` is: its keyword, else its own or first positioned descendant's position."""
        if isinstance(node, exp.Join):
            return self.join_start(node)
        span = _span(node)
        if isinstance(node, exp.Distinct) and isinstance(node.parent, exp.Select) and node.parent.expressions:
            span = _span(node.parent.expressions[0])  # SELECT DISTINCT: the keyword before the first item
        if span is None and type(node) in _LEAVES and node.parent is not None:
            left = node.parent.this if node.parent.args.get("expression") is node else None
            left_span = _span(left) if isinstance(left, exp.Expression) else None
            leaf = self.after(left_span[1] + 1 if left_span else 0, _LEAVES[type(node)])
            return leaf.start if leaf is not None else None
        token = self.keyword(node, span)
        if token is not None:
            return token.start
        return span[0] if span else None

    def keyword(self, node: exp.Expression, span: tuple[int, int] | None) -> Token | None:
        if span is None:
            return None
        prefix = _PREFIX.get(type(node))
        if prefix:
            token = self.before(span[0], prefix)
            if token is not None or not isinstance(node, exp.Not):
                return token
            inner = node.this  # x NOT IN (...), x NOT LIKE ..., x IS NOT NULL
            left = _span(inner.this) if isinstance(inner.this, exp.Expression) else None
            return self.after(left[1] + 1 if left else span[0], prefix)
        infix = _INFIX.get(type(node))
        if infix:
            left = _span(node.this) if isinstance(node.this, exp.Expression) else None
            return self.after(left[1] + 1 if left else span[0], infix)
        return None

    def before(self, offset: int, types: tuple[TokenType, ...]) -> Token | None:
        """The keyword of ``types`` right before ``offset`` (only glue such as ``(`` between)."""
        i = bisect.bisect_left(self.starts, offset) - 1
        while i >= 0:
            token = self.tokens[i]
            if token.token_type in types:
                return token
            if token.token_type not in _GLUE:
                return None
            i -= 1
        return None

    def after(self, start: int, types: tuple[TokenType, ...]) -> Token | None:
        """The first token of ``types`` at or after offset ``start`` (past an infix's left operand)."""
        for token in self.tokens[bisect.bisect_left(self.starts, start) :]:
            if token.token_type in types:
                return token
        return None

    def join_start(self, join: exp.Join) -> int | None:
        """Where a join begins: its first keyword (``NATURAL``, ``LEFT``, ``JOIN``, ``,`` ...)."""
        span = _span(join.this)
        if span is None:
            return None
        i = bisect.bisect_left(self.starts, span[0])
        first = i
        while first > 0 and self.tokens[first - 1].token_type in _JOIN_WORDS:
            first -= 1
        if first == i and i > 0 and self.tokens[i - 1].token_type == TokenType.COMMA:
            first -= 1
        return self.tokens[first].start if first < i else span[0]

    def is_comma(self, join: exp.Join) -> bool:
        """Is ``join`` a comma in FROM (sqlglot parses ``R, S`` and ``R JOIN S`` alike)?"""
        span = _span(join.this)
        if span is None:
            return False
        i = bisect.bisect_left(self.starts, span[0])
        return i > 0 and self.tokens[i - 1].token_type == TokenType.COMMA


def _span(node: exp.Expression) -> tuple[int, int] | None:
    """The first and last character offsets of the positioned parts of ``node``."""
    starts, ends = [], []
    for part in node.walk():
        meta = part.meta
        if "start" in meta and "end" in meta:
            starts.append(meta["start"])
            ends.append(meta["end"])
    return (min(starts), max(ends)) if starts else None


# The audit: every node of the tree must be of a kind the reader handles, with
# only the options it handles; anything else is refused by name and position.

_COVAR_NAMES = ("COVAR", "COVAR_MATRIX")
_ALLOWED: dict[type[exp.Expression], frozenset[str]] = {
    exp.Select: frozenset({"expressions", "from", "from_", "joins", "where", "group", "having", "distinct"}),
    exp.From: frozenset({"this"}),
    exp.Join: frozenset({"this", "on", "using", "kind", "side", "method"}),
    exp.Table: frozenset({"this", "alias"}),
    exp.TableAlias: frozenset({"this"}),
    exp.Identifier: frozenset({"this", "quoted"}),
    exp.Column: frozenset({"this", "table"}),
    exp.Where: frozenset({"this"}),
    exp.And: frozenset({"this", "expression"}),
    exp.EQ: frozenset({"this", "expression"}),
    exp.Paren: frozenset({"this"}),
    exp.Literal: frozenset({"this", "is_string"}),
    exp.Neg: frozenset({"this"}),
    exp.Group: frozenset({"expressions"}),
    exp.Having: frozenset({"this"}),
    exp.Alias: frozenset({"this", "alias"}),
    exp.Count: frozenset({"this", "big_int"}),
    exp.Sum: frozenset({"this"}),
    exp.Avg: frozenset({"this"}),
    exp.Min: frozenset({"this"}),
    exp.Max: frozenset({"this"}),
    exp.Distinct: frozenset({"expressions"}),  # COUNT(DISTINCT column) only: the audit checks where
    # comparisons other than = only in HAVING: the audit checks where
    exp.NEQ: frozenset({"this", "expression"}),
    exp.LT: frozenset({"this", "expression"}),
    exp.LTE: frozenset({"this", "expression"}),
    exp.GT: frozenset({"this", "expression"}),
    exp.GTE: frozenset({"this", "expression"}),
    exp.Mul: frozenset({"this", "expression"}),
    exp.Star: frozenset(),
    exp.Anonymous: frozenset({"this", "expressions"}),
    # selections (WHERE and ON) and arithmetic (WHERE, ON and inside SUM/AVG/MIN/MAX/COUNT): the audit checks where
    exp.Or: frozenset({"this", "expression"}),
    exp.Not: frozenset({"this"}),
    exp.In: frozenset({"this", "expressions"}),
    exp.Between: frozenset({"this", "low", "high"}),
    exp.Is: frozenset({"this", "expression"}),
    exp.Null: frozenset(),
    exp.Add: frozenset({"this", "expression"}),
    exp.Sub: frozenset({"this", "expression"}),
    exp.Div: frozenset({"this", "expression", "typed", "safe"}),
    exp.Mod: frozenset({"this", "expression"}),
}
#: the node kinds of a selection: only in WHERE and JOIN ... ON
_SELECTION_NODES = (exp.Or, exp.Not, exp.In, exp.Between, exp.Is)
#: arithmetic other than *: in WHERE, JOIN ... ON and inside the aggregates (never in HAVING or the head)
_ARITHMETIC_NODES = (exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod)
_CONDITION_CONTEXTS = frozenset({"in WHERE", "in JOIN ... ON"})
_EXPRESSION_CONTEXTS = _CONDITION_CONTEXTS | {f"inside {name}" for name in ("SUM", "AVG", "MIN", "MAX", "COUNT")}
_NAMES: dict[type[exp.Expression], str] = {
    exp.Or: "OR",
    exp.Not: "NOT",
    exp.In: "IN",
    exp.Exists: "EXISTS",
    exp.Between: "BETWEEN",
    exp.Like: "LIKE",
    exp.ILike: "ILIKE",
    exp.Is: "IS",
    exp.Null: "NULL",
    exp.Case: "CASE",
    exp.Cast: "CAST",
    exp.TryCast: "TRY_CAST",
    exp.Window: "window function (OVER)",
    exp.Union: "UNION",
    exp.Intersect: "INTERSECT",
    exp.Except: "EXCEPT",
    exp.With: "WITH (common table expressions)",
    exp.CTE: "WITH (common table expressions)",
    exp.Select: "SUBQUERY (SELECT)",
    exp.Lateral: "LATERAL",
    exp.Unnest: "UNNEST",
    exp.Values: "VALUES",
    exp.Distinct: "DISTINCT",
    exp.Placeholder: "parameter",
    exp.Filter: "FILTER",
    exp.Collate: "COLLATE",
    exp.Interval: "INTERVAL",
    exp.Tuple: "tuple",
    exp.Dot: "nested field access",
    exp.Bracket: "subscript",
    exp.Order: "ORDER BY",
    exp.Limit: "LIMIT",
    exp.Fetch: "FETCH",
    exp.Offset: "OFFSET",
    exp.Having: "HAVING",
    exp.Qualify: "QUALIFY",
}
_COMPARISONS: dict[type[exp.Expression], str] = {
    exp.NEQ: "<>",
    exp.NullSafeEQ: "<=>",
    exp.LT: "<",
    exp.LTE: "<=",
    exp.GT: ">",
    exp.GTE: ">=",
}
_ARITHMETIC: dict[type[exp.Expression], str] = {
    exp.Add: "+",
    exp.Sub: "-",
    exp.Mul: "*",
    exp.Div: "/",
    exp.Mod: "%",
    exp.DPipe: "||",
}
_HINTS: dict[type[exp.Expression], str] = {
    exp.NullSafeEQ: " (only =, <>, <, <=, >, >=)",
    exp.DPipe: " (only +, -, *, / and %)",
}
_OUTER_HINT = (
    " (outer joins are not maintained: the NULL-padded rows of the unmatched side are no join of the relations; "
    "write [INNER] JOIN, or maintain the inner join and each side's own query)"
)
_HEAD_HINT = " (an expression in SELECT only inside SUM, AVG, MIN, MAX or COUNT: computed per row where updates enter)"
_HAVING_HINTS: dict[type[exp.Expression], str] = {
    exp.Or: " (only conjunctions of comparisons)",
    exp.NullSafeEQ: " (only =, <>, <, <=, >, >=)",
}
#: the comparisons admitted in HAVING only (= is admitted everywhere)
_HAVING_COMPARISONS = (exp.NEQ, exp.LT, exp.LTE, exp.GT, exp.GTE)
_AGGREGATE_NODES = (exp.Count, exp.Sum, exp.Avg, exp.Min, exp.Max)
_OPTIONS: dict[str, str] = {
    "order": "ORDER BY",
    "limit": "LIMIT",
    "offset": "OFFSET",
    "qualify": "QUALIFY",
    "windows": "WINDOW",
    "with": "WITH (common table expressions)",
    "with_": "WITH (common table expressions)",
    "laterals": "LATERAL",
    "pivots": "PIVOT",
    "into": "SELECT INTO",
    "kind": "SELECT AS",
    "sample": "TABLESAMPLE",
    "db": "a schema-qualified name",
    "catalog": "a catalog-qualified name",
    "columns": "column aliases (AS t(x, y))",
    "except": "* EXCLUDE",
    "except_": "* EXCLUDE",
    "replace": "* REPLACE",
    "rename": "* RENAME",
    "rollup": "ROLLUP",
    "cube": "CUBE",
    "grouping_sets": "GROUPING SETS",
    "all": "GROUP BY ALL",
    "totals": "WITH TOTALS",
    "locks": "FOR UPDATE",
    "hint": "an optimizer hint",
    "connect": "CONNECT BY",
    "prewhere": "PREWHERE",
    "match": "MATCH_RECOGNIZE",
    "cluster": "CLUSTER BY",
    "distribute": "DISTRIBUTE BY",
    "sort": "SORT BY",
    "joins": "a parenthesized join",
    "version": "time travel (AS OF)",
}
_SELECT_CLAUSES: dict[str, str] = {
    "expressions": "in SELECT",
    "from": "in FROM",
    "from_": "in FROM",
    "joins": "in FROM",
    "where": "in WHERE",
    "group": "in GROUP BY",
    "having": "in HAVING",
}


def _construct(node: exp.Expression) -> str:
    """The SQL name of a node kind, for messages."""
    cls = type(node)
    if cls in _COMPARISONS:
        return f"comparison {_COMPARISONS[cls]!r}"
    if cls in _ARITHMETIC:
        return f"arithmetic {_ARITHMETIC[cls]!r}"
    if isinstance(node, exp.Subquery):
        return "SUBQUERY" if isinstance(node.this, exp.Query) else "a parenthesized join"
    if isinstance(node, exp.Boolean):
        return node.sql()
    if isinstance(node, exp.Not) and isinstance(node.this, exp.In | exp.Like | exp.ILike | exp.Between):
        return f"NOT {_construct(node.this)}"
    if isinstance(node, exp.Not) and isinstance(node.this, exp.Is):
        return "IS NOT"
    if cls in _NAMES:
        return _NAMES[cls]
    if isinstance(node, exp.Anonymous):
        return f"function {node.name.upper()}"
    if isinstance(node, exp.Func):
        return f"function {node.sql_name()}"
    return node.key.upper()


def _join_name(join: exp.Join) -> str:
    words = [join.args.get("method"), join.args.get("side"), join.args.get("kind")]
    name = " ".join(str(w).upper() for w in words if w)
    return name if name.endswith("JOIN") else f"{name} JOIN".lstrip()


def _join_problem(join: exp.Join) -> str | None:
    """Why a join form is outside the fragment, or None."""
    side, kind, method = (str(join.args.get(k) or "").upper() for k in ("side", "kind", "method"))
    condition = join.args.get("on") is not None or _is_set(join.args.get("using"))
    if side or kind not in ("", "INNER", "CROSS") or method not in ("", "NATURAL"):
        return _join_name(join)
    if method == "NATURAL" and (kind == "CROSS" or condition):
        return f"{_join_name(join)} with {'ON/USING' if condition else 'CROSS'}"
    if kind == "CROSS" and condition:
        return "CROSS JOIN with ON/USING"
    return None


def _audit(select: exp.Select, source: _Source) -> None:
    """Refuse (the first, in the text) node outside the fragment the reader handles."""
    problems: list[tuple[int, str]] = []

    def refuse(node: exp.Expression, construct: str, context: str = "", hint: str = "") -> None:
        offset = source.locate(node)
        context = f" {context}" if context else ""
        problems.append((offset, f"unsupported SQL: {construct}{context}{hint} at {source.at(offset)}"))

    def visit(node: exp.Expression, context: str) -> None:
        allowed = _ALLOWED.get(type(node))
        if (
            allowed is None
            or (isinstance(node, exp.Select) and node is not select)
            or (isinstance(node, exp.Anonymous) and node.name.upper() not in _COVAR_NAMES)
            or (isinstance(node, _HAVING_COMPARISONS) and context not in {"in HAVING", *_CONDITION_CONTEXTS})
            or (isinstance(node, _SELECTION_NODES) and context not in _CONDITION_CONTEXTS)
            or (isinstance(node, _ARITHMETIC_NODES) and context not in _EXPRESSION_CONTEXTS)
            or (isinstance(node, exp.Null) and not isinstance(node.parent, exp.Is))
            or (isinstance(node, exp.Distinct) and not isinstance(node.parent, exp.Count))
        ):
            hints = _HAVING_HINTS if context == "in HAVING" else _HINTS
            hint = hints.get(type(node), "")
            if context == "in SELECT" and isinstance(node, _ARITHMETIC_NODES + _HAVING_COMPARISONS):
                hint = _HEAD_HINT
            if context in _CONDITION_CONTEXTS and isinstance(node, exp.Null):
                hint = " (a comparison with NULL is never true: write IS NULL or IS NOT NULL)"
            refuse(node, _construct(node), context, hint)
            return
        if isinstance(node, exp.In) and _is_set(node.args.get("query")):
            refuse(node, "IN", context, " (a subquery; only IN (value, ...) with literals)")
            return
        if isinstance(node, exp.Div) and (node.args.get("typed") or node.args.get("safe")):
            refuse(node, "integer or safe division", context)
            return
        if isinstance(node, exp.Join):
            problem = _join_problem(node)
            if problem:
                outer = str(node.args.get("side") or "").upper() in ("LEFT", "RIGHT", "FULL")
                refuse(node, problem, hint=_OUTER_HINT if outer else "")
        for key, value in node.args.items():
            if not _is_set(value):
                continue
            first = value[0] if isinstance(value, list) else value
            at = first if isinstance(first, exp.Expression) else node
            if key not in allowed:
                clause = isinstance(node, exp.Select)
                name = _NAMES.get(type(at)) if clause and at is not node else None
                name = name or _OPTIONS.get(key, f"{key.rstrip('_').upper()} option of {_construct(node)}")
                refuse(at, name, "" if clause else context)
                continue
            if isinstance(node, exp.Select) and key == "distinct":
                if _is_set(value.args.get("on")):
                    refuse(value, "DISTINCT ON")
                continue  # SELECT DISTINCT: the reader decides
            inner = _inner_context(node, key, context)
            for child in value if isinstance(value, list) else [value]:
                if isinstance(child, exp.Expression):
                    visit(child, inner)

    visit(select, "")
    if problems:
        raise QuerySyntaxError(min(problems)[1])


def _inner_context(node: exp.Expression, key: str, context: str) -> str:
    if isinstance(node, exp.Select):
        return _SELECT_CLAUSES.get(key, context)
    if isinstance(node, exp.Join):
        return {"on": "in JOIN ... ON", "using": "in JOIN ... USING"}.get(key, context)
    if isinstance(node, _AGGREGATE_NODES):
        return f"inside {node.key.upper()}"
    if isinstance(node, exp.Anonymous):
        return f"inside {node.name.upper()}"
    return context


@dataclass
class _Output:
    """One column of a FROM item's join result: its name and the table columns it stands for.

    A column merged by USING or NATURAL stands for several table columns (all
    equal); an unqualified reference to its name then names it, unambiguously.
    """

    name: str
    slots: list[Slot]


class _SqlReader:
    """Reads an audited SELECT: FROM and its joins, the equalities, then SELECT and GROUP BY."""

    def __init__(self, tree: exp.Select, schema: Mapping[str, Sequence[str]], source: _Source) -> None:
        self.tree = tree
        self.source = source
        self.schema = {name.lower(): (name, list(attrs)) for name, attrs in schema.items()}
        self.tables: list[tuple[str, str, list[str]]] = []  # (alias, relation, attributes)
        self.items: list[list[_Output]] = []  # the columns of each comma-separated FROM item
        self.parent: dict[Slot, Slot] = {}
        self.constants: dict[Slot, tuple[Constant, exp.Expression]] = {}
        self.aggregate_slots: list[Slot] = []
        self.aggregate_kind = ""
        self.group_keys: dict[Slot, exp.Column] = {}
        #: HAVING's conjuncts: (an aggregate read by read_aggregate, or a GROUP BY slot), operator, literal
        self.having: list[tuple[tuple[str, list[Slot], int | float] | Slot, Operator, Constant]] = []
        #: per table index, the conditions of WHERE/ON over that table's columns alone (and where they are)
        self.selections: dict[int, list[tuple[ex.Expr, exp.Expression]]] = {}
        #: per relation, its computed attributes (name, expression over its row), appended after its own
        self.derived: dict[str, list[tuple[str, ex.Expr]]] = {}

    def refuse(self, message: str, node: exp.Expression) -> QuerySyntaxError:
        """The error for ``message``, saying where ``node`` is."""
        return QuerySyntaxError(f"{message} {self.source.where(node)}")

    def query(self) -> Query:
        self.read_from()
        where = self.tree.args.get("where")
        if where is not None:
            self.read_conjunction(where.this, "WHERE")
        free, aggregate = self.read_select()
        having = self.tree.args.get("having")
        if having is not None:
            if not self.aggregate_kind:
                raise self.refuse("unsupported SQL: HAVING without an aggregate in SELECT", having)
            self.read_having(having.this)
        return validate(self.build(free, aggregate))

    # FROM and JOIN
    def read_from(self) -> None:
        source = self.tree.args.get("from") or self.tree.args.get("from_")
        if source is None:
            raise self.refuse("unsupported SQL: SELECT without FROM", self.tree)
        self.items.append(self.add_table(source.this))
        for join in self.tree.args.get("joins") or []:
            if self.source.is_comma(join) and not set(_set_args(join)) - {"this"}:
                self.items.append(self.add_table(join.this))
                continue
            kind = str(join.args.get("kind") or "").upper()
            left = self.items[-1]
            right = self.add_table(join.this)
            if str(join.args.get("method") or "").upper() == "NATURAL":
                self.items[-1] = self.natural(join, left, right)
            elif _is_set(join.args.get("using")):
                self.items[-1] = self.using(join, left, right)
            elif join.args.get("on") is not None:
                self.items[-1] = left + right
                self.read_conjunction(join.args["on"], "JOIN ... ON")
            elif kind == "CROSS":
                self.items[-1] = left + right
            else:
                raise self.refuse(f"unsupported SQL: {_join_name(join)} without ON or USING", join)

    def add_table(self, node: exp.Expression) -> list[_Output]:
        """Add a table of FROM; return its columns."""
        if not isinstance(node, exp.Table) or not isinstance(node.this, exp.Identifier):
            raise self.refuse(f"unsupported SQL: {_construct(node)} in FROM (only table names)", node)
        found = self.schema.get(node.name.lower())
        if found is None:
            raise self.refuse(
                f"unknown relation {node.name!r}: give its attributes in the schema "
                f"(known: {sorted(v[0] for v in self.schema.values())})",
                node.this,
            )
        alias = node.alias_or_name
        if any(a.lower() == alias.lower() for a, _, _ in self.tables):
            alias_node = node.args.get("alias")
            raise self.refuse(f"table alias {alias!r} is used twice in FROM", alias_node or node)
        t = len(self.tables)
        self.tables.append((alias, found[0], found[1]))
        return [_Output(a, [(t, p)]) for p, a in enumerate(found[1])]

    def natural(self, join: exp.Join, left: list[_Output], right: list[_Output]) -> list[_Output]:
        """``left NATURAL JOIN right``: USING over every common column name."""
        right_names = {o.name.lower() for o in right}
        common = list(dict.fromkeys(o.name.lower() for o in left if o.name.lower() in right_names))
        for name in common:
            for side, columns in (("left side", left), ("joined table", right)):
                hits = [o for o in columns if o.name.lower() == name]
                if len(hits) > 1:
                    raise self.refuse(
                        f"ambiguous column {hits[0].name!r} in NATURAL JOIN: the {side} has "
                        f"{' and '.join(self.describe(o) for o in hits)} (write JOIN ... ON instead)",
                        join,
                    )
        return self.merge(left, right, common)

    def using(self, join: exp.Join, left: list[_Output], right: list[_Output]) -> list[_Output]:
        """``left JOIN right USING (c, ...)``."""
        names: list[str] = []
        alias = self.tables[-1][0]
        for node in join.args["using"]:
            name = node.name
            for side, columns in (("the left side of the join", left), (f"table {alias}", right)):
                hits = [o for o in columns if o.name.lower() == name.lower()]
                if not hits:
                    raise self.refuse(f"column {name!r} of USING is not a column of {side}", node)
                if len(hits) > 1:
                    raise self.refuse(
                        f"ambiguous column {name!r} in USING: {side} has "
                        f"{' and '.join(self.describe(o) for o in hits)}",
                        node,
                    )
            if name.lower() not in names:
                names.append(name.lower())
        return self.merge(left, right, names)

    def merge(self, left: list[_Output], right: list[_Output], names: list[str]) -> list[_Output]:
        """Equi-join ``left`` and ``right`` on ``names`` (lower case, one column each side); merge them."""
        merged, used = [], set()
        for name in names:
            a = next(o for o in left if o.name.lower() == name)
            b = next(o for o in right if o.name.lower() == name)
            self.union(a.slots[0], b.slots[0])
            merged.append(_Output(a.name, a.slots + b.slots))
            used.update((id(a), id(b)))
        return merged + [o for o in left + right if id(o) not in used]

    def describe(self, column: _Output) -> str:
        """``R.A`` (or ``R.A = S.A`` for a merged column), for messages."""
        return " = ".join(f"{self.tables[t][0]}.{self.tables[t][2][p]}" for t, p in column.slots)

    # WHERE / ON
    def read_conjunction(self, node: exp.Expression, where: str) -> None:
        """A conjunct of WHERE or ON: an equality of columns (a join), column = literal (a constant of the
        atom), or a condition over one table's columns (a selection of its relation, applied at entry)."""
        if isinstance(node, exp.Paren):
            self.read_conjunction(node.this, where)
        elif isinstance(node, exp.And):
            self.read_conjunction(node.this, where)
            self.read_conjunction(node.expression, where)
        elif isinstance(node, exp.EQ) and self.read_equality(node, where):
            pass
        else:
            self.read_selection(node, where)

    def read_selection(self, node: exp.Expression, where: str) -> None:
        """A condition over the columns of one table of FROM: that table's selection (SQL's three-valued
        logic, :mod:`ivm.query.expr`).  Over two tables it is a theta join, refused by name."""
        tables: dict[int, exp.Column] = {}
        condition = self.condition(node, where, tables)
        if not tables:
            raise self.refuse(f"unsupported SQL: {node.sql()} in {where} (a condition without columns)", node)
        if len(tables) > 1:
            names = " and ".join(self.tables[t][0] for t in tables)
            raise self.refuse(
                f"unsupported SQL: {node.sql()} in {where} compares columns of {names} (a theta join: only "
                "equalities join tables; any other condition is over one table's columns)",
                node,
            )
        (t,) = tables
        self.selections.setdefault(t, []).append((condition, node))

    def condition(self, node: exp.Expression, where: str, tables: dict[int, exp.Column]) -> ex.Expr:
        """``node`` as a condition tree; ``tables`` collects the tables whose columns it reads."""
        node = _unparen(node)
        if isinstance(node, exp.And):
            return ex.And((self.condition(node.this, where, tables), self.condition(node.expression, where, tables)))
        if isinstance(node, exp.Or):
            return ex.Or((self.condition(node.this, where, tables), self.condition(node.expression, where, tables)))
        if isinstance(node, exp.Not):
            inner = _unparen(node.this)
            if isinstance(inner, exp.In | exp.Is):
                read = self.condition(inner, where, tables)
                assert isinstance(read, ex.InList | ex.IsNull)
                return replace(read, negated=True)
            return ex.Not(self.condition(inner, where, tables))
        op = _CONDITION_OPERATORS.get(type(node))
        if op is not None:
            return ex.Compare(op, self.value(node.this, where, tables), self.value(node.expression, where, tables))
        if isinstance(node, exp.Between):
            x = self.value(node.this, where, tables)
            low, high = self.value(node.args["low"], where, tables), self.value(node.args["high"], where, tables)
            return ex.And((ex.Compare(">=", x, low), ex.Compare("<=", x, high)))
        if isinstance(node, exp.In):
            values = tuple(self.value(v, where, tables) for v in node.expressions)
            return ex.InList(self.value(node.this, where, tables), values)
        if isinstance(node, exp.Is):
            if not isinstance(node.expression, exp.Null):
                raise self.refuse(f"unsupported SQL: {node.sql()} in {where} (only IS NULL and IS NOT NULL)", node)
            return ex.IsNull(self.value(node.this, where, tables))
        raise self.refuse(
            f"unsupported SQL: {_construct(node)} in {where} where a condition is expected (comparisons, BETWEEN, "
            "IN, IS NULL, combined with AND, OR, NOT)",
            node,
        )

    def value(self, node: exp.Expression, where: str, tables: dict[int, exp.Column]) -> ex.Expr:
        """``node`` as a scalar expression tree (columns, literals, + - * / %); ``tables`` collects the tables."""
        node = _unparen(node)
        literal = _literal(node)
        if literal is not None:
            return ex.Const(literal)
        if isinstance(node, exp.Column):
            t, p = self.column(node)
            tables.setdefault(t, node)
            return ex.Column(p, self.tables[t][2][p])
        if isinstance(node, exp.Neg):
            return ex.Negate(self.value(node.this, where, tables))
        op = _ARITHMETIC_OPERATORS.get(type(node))
        if op is not None:
            return ex.Arithmetic(op, self.value(node.this, where, tables), self.value(node.expression, where, tables))
        raise self.refuse(
            f"unsupported SQL: {_construct(node)} in {where} where a value is expected (columns, literals, "
            "+, -, *, /, %)",
            node,
        )

    def read_equality(self, node: exp.EQ, where: str) -> bool:
        """``column = column`` (a join) or ``column = literal`` (a constant); False for another equality,
        which is a selection."""
        left, right = _unparen(node.this), _unparen(node.expression)
        if isinstance(left, exp.Column) and isinstance(right, exp.Column):
            self.union(self.column(left), self.column(right))
            return True
        if isinstance(right, exp.Column):
            left, right = right, left
        value = _literal(right)
        if not isinstance(left, exp.Column) or value is None:
            return False
        slot = self.column(left)
        old = self.constants.setdefault(slot, (value, node))[0]
        if old != value:
            raise self.refuse(f"{left.sql()} is equated with two constants {old!r} and {value!r}", node)
        return True

    def column(self, column: exp.Column) -> Slot:
        """The (table index, position) a column reference names."""
        if not isinstance(column.this, exp.Identifier):
            raise self.refuse(f"unsupported SQL: {column.sql()} (name one column)", column)
        attr, table = column.name, column.table
        if table:
            found = [t for t, (alias, _, _) in enumerate(self.tables) if alias.lower() == table.lower()]
            if not found:
                raise self.refuse(
                    f"unknown table {table!r} in {column.sql()!r} (tables so far: {[a for a, _, _ in self.tables]})",
                    column,
                )
            _, relation, attrs = self.tables[found[0]]
            hits = [(found[0], p) for p, a in enumerate(attrs) if a.lower() == attr.lower()]
            if not hits:
                raise self.refuse(f"unknown column {column.sql()!r}: {relation} has attributes {attrs}", column)
            if len(hits) > 1:
                raise self.refuse(f"ambiguous column {column.sql()!r}: {relation} has it twice", column)
            return hits[0]
        outputs = [o for item in self.items for o in item if o.name.lower() == attr.lower()]
        if not outputs:
            raise self.refuse(f"unknown column {column.sql()!r}", column)
        if len(outputs) > 1:
            raise self.refuse(
                f"ambiguous column {column.sql()!r}: it may be {' or '.join(self.describe(o) for o in outputs)}; "
                "qualify it with a table alias",
                column,
            )
        return outputs[0].slots[0]

    def union(self, a: Slot, b: Slot) -> None:
        a, b = self.find(a), self.find(b)
        if a != b:
            self.parent[max(a, b)] = min(a, b)

    def find(self, slot: Slot) -> Slot:
        while slot in self.parent:
            slot = self.parent[slot]
        return slot

    # SELECT and GROUP BY
    def read_select(self) -> tuple[list[Slot], Aggregate | None]:
        plain: list[tuple[Slot, exp.Column]] = []
        aggregate: tuple[str, list[Slot], int | float] | None = None
        for item in self.tree.expressions:
            node = item.this if isinstance(item, exp.Alias) else item
            if isinstance(node, exp.Column):
                slot = self.find(self.column(node))
                twin = next((other for s, other in plain if s == slot), None)
                if twin is not None:
                    raise self.refuse(
                        f"unsupported SQL: {node.sql()} is selected twice (as {twin.sql()}, equal by the joins); "
                        "select it once",
                        node,
                    )
                plain.append((slot, node))
            elif isinstance(node, exp.Star):
                raise self.refuse("unsupported SQL: SELECT * (name the columns)", node)
            else:
                if aggregate is not None:
                    raise self.refuse("unsupported SQL: more than one aggregate in SELECT", node)
                aggregate = self.read_aggregate(node)
        group = self.tree.args.get("group")
        distinct = self.tree.args.get("distinct")
        if aggregate is None and group is not None:
            raise self.refuse(
                "unsupported SQL: GROUP BY without an aggregate (SQL lists each group once; "
                "here a listing keeps multiplicities: drop GROUP BY, or add COUNT(*))",
                group,
            )
        if aggregate is None and distinct is not None:
            raise self.refuse(
                "unsupported SQL: SELECT DISTINCT without an aggregate (a listing here keeps each "
                "answer's multiplicity: drop DISTINCT, or add COUNT(*) and GROUP BY)",
                distinct,
            )
        if group is not None:
            keys = self.group_keys
            for node in group.expressions:
                if not isinstance(node, exp.Column):
                    raise self.refuse(f"unsupported SQL: GROUP BY {node.sql()} (only columns)", node)
                keys.setdefault(self.find(self.column(node)), node)
            for slot, node in plain:
                if slot not in keys:
                    raise self.refuse(
                        f"{node.sql()} is in SELECT but not in GROUP BY (the columns next to the "
                        "aggregate must be exactly the GROUP BY columns)",
                        node,
                    )
            selected = {slot for slot, _ in plain}
            for slot, node in keys.items():
                if slot not in selected:
                    raise self.refuse(
                        f"unsupported SQL: GROUP BY {node.sql()} without selecting it (the columns next to "
                        "the aggregate must be exactly the GROUP BY columns)",
                        node,
                    )
        elif aggregate is not None and plain:
            raise self.refuse("columns next to an aggregate need GROUP BY", plain[0][1])
        free = [slot for slot, _ in plain]
        if aggregate is None:
            return free, None
        kind, slots, coefficient = aggregate
        self.aggregate_slots = slots
        self.aggregate_kind = kind
        return free, Aggregate(kind, (), coefficient)  # variables filled in by build()

    def read_aggregate(self, node: exp.Expression, where: str = "SELECT") -> tuple[str, list[Slot], int | float]:
        if isinstance(node, exp.Count):
            if isinstance(node.this, exp.Distinct):
                columns = node.this.expressions
                if len(columns) != 1 or not isinstance(columns[0], exp.Column):
                    raise self.refuse(f"unsupported SQL: {node.sql()} (only COUNT(DISTINCT column))", node)
                return "count_distinct", [self.find(self.column(columns[0]))], 1
            if isinstance(node.this, exp.Star):
                return "count", [], 1
            # COUNT(x): the rows whose x is not NULL, SUM of the lifting 1 if x is not NULL else 0 (computed at entry)
            inner = _unparen(node.this)
            tables: dict[int, exp.Column] = {}
            operand = self.value(inner, "COUNT", tables)
            name = f"count_{inner.name}" if isinstance(inner, exp.Column) else "count_expr"
            return "sum", [self.computed(ex.NotNullCount(operand), tables, inner, "COUNT", name)], 1
        if isinstance(node, exp.Avg | exp.Min | exp.Max):
            name = node.key.upper()
            column = _unparen(node.this)
            if isinstance(column, exp.Column):
                return name.lower(), [self.find(self.column(column))], 1
            tables = {}
            value = self.value(column, f"{name}", tables)
            return name.lower(), [self.computed(value, tables, column, name)], 1
        if isinstance(node, exp.Sum):
            slots: list[Slot] = []
            coefficient: int | float = 1
            for factor in _factors(node.this):
                value = _literal(factor)
                if isinstance(factor, exp.Column):
                    slots.append(self.find(self.column(factor)))
                elif isinstance(value, int | float) and not isinstance(value, bool):
                    coefficient *= value
                elif isinstance(value, str):
                    raise self.refuse(f"unsupported SQL: the string {factor.sql()} inside SUM (not a number)", factor)
                else:  # an expression over one table's columns: a computed attribute of its relation
                    tables = {}
                    computed = self.value(factor, "SUM", tables)
                    slots.append(self.computed(computed, tables, factor, "SUM"))
            return "sum", slots, coefficient
        if isinstance(node, exp.Anonymous) and node.name.upper() in _COVAR_NAMES:
            args = node.expressions
            if not args or not all(isinstance(a, exp.Column) for a in args):
                raise self.refuse("COVAR takes one or more columns: COVAR(R.x, S.y, ...)", node)
            return "covariance", [self.find(self.column(a)) for a in args], 1
        raise self.refuse(
            f"unsupported SQL: {_construct(node)} in {where} (use columns, COUNT(*), SUM(x * y), COVAR(x, y, ...), "
            "AVG(x), MIN(x), MAX(x) or COUNT(DISTINCT x))",
            node,
        )

    def computed(
        self, value: ex.Expr, tables: dict[int, exp.Column], node: exp.Expression, where: str, name: str = ""
    ) -> Slot:
        """The slot of ``value``, an expression over one table's columns, as a computed attribute of that
        table's relation (the same expression of the same relation is computed once).  Over no column
        or over two tables it is refused by name."""
        if not tables:
            raise self.refuse(f"unsupported SQL: {node.sql()} inside {where} (an expression without columns)", node)
        if len(tables) > 1:
            names = " and ".join(self.tables[t][0] for t in tables)
            hint = (
                "only products of expressions over one table each, SUM(f(R) * g(S)), which F-IVM lifts per relation"
                if where == "SUM"
                else "only an expression over one table's columns"
            )
            raise self.refuse(f"unsupported SQL: {node.sql()} inside {where} spans {names} ({hint})", node)
        (t,) = tables
        _, relation, attrs = self.tables[t]
        derived = self.derived.setdefault(relation, [])
        for k, (_, old) in enumerate(derived):
            if old == value:
                return (t, len(attrs) + k)
        taken = {a.lower() for a in attrs} | {n.lower() for n, _ in derived}
        name = name or f"expr{sum(len(d) for d in self.derived.values()) + 1}"
        while name.lower() in taken:
            name += "_"
        derived.append((name, value))
        return (t, len(attrs) + len(derived) - 1)

    def attribute(self, t: int, p: int) -> str:
        """The name of position ``p`` of table ``t``: an attribute, or a computed attribute after them."""
        _, relation, attrs = self.tables[t]
        return attrs[p] if p < len(attrs) else self.derived[relation][p - len(attrs)][0]

    def entries(self) -> tuple[ex.Entry, ...]:
        """Each relation's :class:`~ivm.query.expr.Entry`: its selection, the same for every occurrence of the
        relation (a selection is applied where the relation's updates enter), and its computed attributes."""
        out = []
        for relation in dict.fromkeys(r for _, r, _ in self.tables):
            occurrences = [t for t, (_, r, _) in enumerate(self.tables) if r == relation]
            wheres = {t: ex.conjunction([c for c, _ in self.selections.get(t, [])]) for t in occurrences}
            first = wheres[occurrences[0]]
            for t in occurrences[1:]:
                if wheres[t] != first:
                    where_node = next(
                        (nodes[0][1] for u in (t, occurrences[0]) if (nodes := self.selections.get(u))), None
                    )
                    aliases = ", ".join(self.tables[u][0] for u in occurrences)
                    raise self.refuse(
                        f"unsupported SQL: different selections on the occurrences {aliases} of {relation} (a "
                        "selection is applied where the relation's updates enter, so every occurrence of a "
                        "relation must have the same one)",
                        where_node if where_node is not None else self.tree,
                    )
            derived = tuple(self.derived.get(relation, ()))
            if first is not None or derived:
                arity = len(self.tables[occurrences[0]][2])
                out.append(ex.Entry(relation, arity, first, derived))
        return tuple(out)

    # HAVING
    def read_having(self, node: exp.Expression) -> None:
        """A conjunction of comparisons, each between an aggregate or a GROUP BY column and a literal."""
        if isinstance(node, exp.Paren):
            self.read_having(node.this)
            return
        if isinstance(node, exp.And):
            self.read_having(node.this)
            self.read_having(node.expression)
            return
        op = _HAVING_OPERATORS.get(type(node))
        if op is None:
            raise self.refuse(f"unsupported SQL: {_construct(node)} in HAVING (only comparisons)", node)
        left, right = _unparen(node.this), _unparen(node.expression)
        if _literal(left) is not None and _literal(right) is None:
            left, right, op = right, left, flipped(op)
        value = _literal(right)
        if value is None or _literal(left) is not None:
            raise self.refuse(
                f"unsupported SQL: {node.sql()} in HAVING (only an aggregate or a GROUP BY column compared "
                "with a literal)",
                right,
            )
        if isinstance(left, exp.Column):
            slot = self.find(self.column(left))
            if slot not in self.group_keys:
                raise self.refuse(f"{left.sql()} in HAVING is not a GROUP BY column", left)
            self.having.append((slot, op, value))
            return
        if isinstance(left, exp.Anonymous) and left.name.upper() in _COVAR_NAMES:
            raise self.refuse("unsupported SQL: COVAR in HAVING (not a number to compare)", left)
        if not isinstance(left, _AGGREGATE_NODES):
            raise self.refuse(f"unsupported SQL: {_construct(left)} in HAVING (only aggregates and columns)", left)
        term = self.read_aggregate(left, "HAVING")
        if isinstance(value, str) and term[0] not in ("min", "max"):
            raise self.refuse(f"{left.sql()} is a number, compared with the string {value!r} in HAVING", node)
        self.having.append((term, op, value))

    # the query
    def build(self, free: list[Slot], aggregate: Aggregate | None) -> Query:
        entry = self.entries()
        width = [len(attrs) + len(self.derived.get(relation, ())) for _, relation, attrs in self.tables]
        slots = [(t, p) for t in range(len(self.tables)) for p in range(width[t])]
        classes: dict[Slot, list[Slot]] = {}
        for slot in slots:
            classes.setdefault(self.find(slot), []).append(slot)
        constant_of: dict[Slot, Constant] = {}
        for slot, (value, node) in self.constants.items():
            root = self.find(slot)
            old = constant_of.setdefault(root, value)
            if old != value:
                raise self.refuse(f"a join column is equated with two constants {old!r} and {value!r}", node)
        names: dict[Slot, str] = {}
        used: set[str] = set()
        named = {*free, *self.aggregate_slots}
        for term, _, _ in self.having:
            named.update(term[1] if isinstance(term[0], str) else [term])  # type: ignore[arg-type,list-item]
        for root, members in classes.items():
            if root in constant_of and root not in named:
                continue
            candidates = [self.attribute(t, p) for t, p in members]
            name = next((c for c in candidates if c not in used), None)
            if name is None or name.startswith("_"):
                t, p = members[0]
                name = f"{self.tables[t][0]}_{self.attribute(t, p)}"
            while name in used:
                name += "_"
            names[root] = name
            used.add(name)
        fresh = 0
        atoms = []
        for t, (_, relation, _attrs) in enumerate(self.tables):
            terms: list[str] = []
            constants: list[tuple[int, Constant]] = []
            for p in range(width[t]):
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
            aggregate = Aggregate(aggregate.kind, tuple(names[s] for s in self.aggregate_slots), aggregate.coefficient)
        having = []
        for term, op, value in self.having:
            if isinstance(term[0], str):  # an aggregate
                kind, slots, coefficient = term  # type: ignore[misc]
                having.append(Comparison(Aggregate(kind, tuple(names[s] for s in slots), coefficient), op, value))
            else:  # a GROUP BY column
                having.append(Comparison(names[term], op, value))  # type: ignore[index]
        free_names = tuple(names[s] for s in free)
        return Query("Q", free_names, tuple(atoms), aggregate or Aggregate(), tuple(having), entry)


_HAVING_OPERATORS: dict[type[exp.Expression], Operator] = {
    exp.EQ: "=",
    exp.NEQ: "<>",
    exp.LT: "<",
    exp.LTE: "<=",
    exp.GT: ">",
    exp.GTE: ">=",
}


_CONDITION_OPERATORS: dict[type[exp.Expression], ex.CompareOp] = {
    exp.EQ: "=",
    exp.NEQ: "<>",
    exp.LT: "<",
    exp.LTE: "<=",
    exp.GT: ">",
    exp.GTE: ">=",
}
_ARITHMETIC_OPERATORS: dict[type[exp.Expression], ex.ArithmeticOp] = {
    exp.Add: "+",
    exp.Sub: "-",
    exp.Mul: "*",
    exp.Div: "/",
    exp.Mod: "%",
}


def _unparen(node: exp.Expression) -> exp.Expression:
    while isinstance(node, exp.Paren):
        node = node.this
    return node


def _factors(node: exp.Expression) -> list[exp.Expression]:
    if isinstance(node, exp.Paren):
        return _factors(node.this)
    if isinstance(node, exp.Mul):
        return _factors(node.this) + _factors(node.expression)
    return [node]


def _literal(node: exp.Expression) -> Constant | None:
    node = _unparen(node)
    if isinstance(node, exp.Neg):
        inner = _literal(node.this)
        return -inner if isinstance(inner, int | float) else None
    if isinstance(node, exp.Literal):
        if node.is_string:
            return node.this
        try:
            return float(node.this) if any(c in node.this for c in ".eE") else int(node.this)
        except ValueError:
            return None
    return None
