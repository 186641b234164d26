"""Parse rule syntax ``Q(a, c) :- R(a, b), S(b, c)`` into a :class:`Query`.

Grammar (whitespace is free)::

    rule      := NAME "(" [headterm ("," headterm)*] ")" ":-" atom ("," atom)*
    headterm  := VAR | "COUNT(*)" | "SUM(" factor ("*" factor)* ")" | "COVAR(" VAR ("," VAR)* ")"
    atom      := NAME "(" [term ("," term)*] ")"
    term      := VAR | "_" | NUMBER | 'string' | "string"

Head variables are the free variables; at most one aggregate may appear in the
head (default ``COUNT(*)``: the sum of the product of multiplicities, F-IVM §2).
``_`` is an anonymous variable; a constant is a selection on its position.
Text starting with ``SELECT`` is read as SQL (:func:`ivm.query.sql.parse_sql`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from ivm.query.model import FRESH, Aggregate, Atom, Constant, Query


class QuerySyntaxError(ValueError):
    """The query text is not a query this library can read; the message names the construct."""


_TOKEN = re.compile(
    r"""\s*(?:
        (?P<rule>:-)
      | (?P<number>-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)
      | (?P<string>'(?:[^']|'')*'|"[^"]*")
      | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
      | (?P<punct>[(),*])
    )""",
    re.VERBOSE,
)
_AGGREGATES = {"COUNT", "SUM", "COVAR"}


def parse(text: str, schema: Mapping[str, Sequence[str]] | None = None) -> Query:
    """Parse a rule (or, if it starts with ``SELECT``, SQL) into a :class:`Query`.

    >>> str(parse("Q() :- R(a,b), S(b,c), T(c,a)"))
    'Q() :- R(a, b), S(b, c), T(c, a)'
    >>> q = parse("Q(a, SUM(2 * b * c)) :- R(a, b), S(b, c, 'x'), T(_, c)")
    >>> q.free, q.aggregate.kind, q.aggregate.variables, q.aggregate.coefficient
    (('a',), 'sum', ('b', 'c'), 2)
    >>> str(q)
    "Q(a, SUM(2 * b * c)) :- R(a, b), S(b, c, 'x'), T(_, c)"
    >>> parse("Q(a) :- R(a, b), S(b, 3)").atoms[1]
    Atom(relation='S', terms=('b', '_1'), constants=((1, 3),))
    """
    if re.match(r"\s*(with\b|select\b|\()", text, re.IGNORECASE):
        from ivm.query.sql import parse_sql

        return parse_sql(text, schema)
    return _RuleParser(text).rule(schema)


class _RuleParser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens: list[tuple[str, str]] = []
        pos = 0
        stripped = text.rstrip().rstrip(".")
        while pos < len(stripped):
            match = _TOKEN.match(stripped, pos)
            if not match or match.end() == pos:
                raise QuerySyntaxError(f"cannot read {stripped[pos:].strip()[:20]!r} in {text!r}")
            kind = match.lastgroup or ""
            self.tokens.append((kind, match.group(kind)))
            pos = match.end()
            while pos < len(stripped) and stripped[pos].isspace():
                pos += 1
        self.i = 0
        self.fresh = 0

    def peek(self) -> tuple[str, str]:
        return self.tokens[self.i] if self.i < len(self.tokens) else ("end", "")

    def take(self, value: str | None = None, kind: str | None = None) -> str:
        k, v = self.peek()
        if (value is not None and v != value) or (kind is not None and k != kind) or k == "end":
            want = value or kind
            raise QuerySyntaxError(f"expected {want!r} but found {v or 'the end'!r} in {self.text!r}")
        self.i += 1
        return v

    def new_variable(self) -> str:
        self.fresh += 1
        return f"_{self.fresh}"

    def rule(self, schema: Mapping[str, Sequence[str]] | None) -> Query:
        if not any(kind == "rule" for kind, _ in self.tokens):
            raise QuerySyntaxError(f"expected a rule 'Q(...) :- R(...), ...', got {self.text!r}")
        name = self.take(kind="name")
        free, aggregate = self.head()
        self.take(":-")
        atoms = [self.atom()]
        while self.peek()[1] == ",":
            self.take(",")
            atoms.append(self.atom())
        if self.peek()[0] != "end":
            raise QuerySyntaxError(f"unexpected {self.peek()[1]!r} after the body in {self.text!r}")
        query = Query(name, tuple(free), tuple(atoms), aggregate or Aggregate())
        return validate(query, schema)

    def head(self) -> tuple[list[str], Aggregate | None]:
        self.take("(")
        free: list[str] = []
        aggregate: Aggregate | None = None
        while self.peek()[1] != ")":
            if free or aggregate:
                self.take(",")
            word = self.take(kind="name")
            if self.peek()[1] == "(":
                if aggregate is not None:
                    raise QuerySyntaxError(f"a query has one aggregate, the head of {self.text!r} has two")
                aggregate = self.aggregate(word)
            else:
                if FRESH.fullmatch(word) or word == "_":
                    raise QuerySyntaxError(f"head variable {word!r}: names _ and _<digits> are reserved")
                if word in free:
                    raise QuerySyntaxError(f"free variable {word!r} is listed twice in the head")
                free.append(word)
        self.take(")")
        return free, aggregate

    def aggregate(self, word: str) -> Aggregate:
        func = word.upper()
        if func not in _AGGREGATES:
            raise QuerySyntaxError(
                f"unsupported aggregate {word}(...): use COUNT(*), SUM(a * b * ...) or COVAR(a, b, ...)"
            )
        self.take("(")
        if func == "COUNT":
            if self.peek()[1] == "*":
                self.take("*")
            self.take(")")
            return Aggregate()
        if func == "COVAR":
            names = [self.take(kind="name")]
            while self.peek()[1] == ",":
                self.take(",")
                names.append(self.take(kind="name"))
            self.take(")")
            return Aggregate("covariance", tuple(names))
        coefficient: int | float = 1
        names = []
        while True:
            kind, value = self.peek()
            if kind == "number":
                self.take()
                coefficient *= _number(value)
            else:
                names.append(self.take(kind="name"))
            if self.peek()[1] != "*":
                break
            self.take("*")
        self.take(")")
        return Aggregate("sum", tuple(names), coefficient)

    def atom(self) -> Atom:
        relation = self.take(kind="name")
        self.take("(")
        terms: list[str] = []
        constants: list[tuple[int, Constant]] = []
        while self.peek()[1] != ")":
            if terms:
                self.take(",")
            kind, value = self.peek()
            self.take()
            if kind == "name" and value == "_":
                terms.append(self.new_variable())
            elif kind == "name":
                if FRESH.fullmatch(value):
                    raise QuerySyntaxError(f"variable {value!r}: names _<digits> are reserved")
                terms.append(value)
            elif kind in ("number", "string"):
                constants.append((len(terms), _number(value) if kind == "number" else _string(value)))
                terms.append(self.new_variable())
            else:
                raise QuerySyntaxError(f"unexpected {value!r} in atom {relation}(...) of {self.text!r}")
        self.take(")")
        return Atom(relation, tuple(terms), tuple(constants))


def _number(text: str) -> int | float:
    return float(text) if any(c in text for c in ".eE") else int(text)


def _string(text: str) -> str:
    if text.startswith("'"):
        return text[1:-1].replace("''", "'")
    return text[1:-1]


def validate(query: Query, schema: Mapping[str, Sequence[str]] | None = None) -> Query:
    """Check a query's well-formedness (and arities against ``schema``); return it."""
    if not query.atoms:
        raise QuerySyntaxError("the query body has no atoms")
    missing = set(query.free) - query.variables
    if missing:
        raise QuerySyntaxError(f"free variables {sorted(missing)} do not occur in the body")
    unknown = set(query.aggregate.variables) - query.variables
    if unknown:
        raise QuerySyntaxError(f"aggregate {query.aggregate} uses {sorted(unknown)}, absent from the body")
    arity: dict[str, int] = {}
    for atom in query.atoms:
        if arity.setdefault(atom.relation, len(atom.terms)) != len(atom.terms):
            raise QuerySyntaxError(f"relation {atom.relation} is used with two arities")
        if schema is not None and atom.relation in schema and len(schema[atom.relation]) != len(atom.terms):
            raise QuerySyntaxError(
                f"{atom} has {len(atom.terms)} terms but relation {atom.relation} "
                f"has attributes {list(schema[atom.relation])}"
            )
    return query
