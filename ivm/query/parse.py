"""Parse rule syntax ``Q(a, c) :- R(a, b), S(b, c)`` into a :class:`Query`.

Grammar (whitespace is free)::

    rule      := NAME "(" [headterm ("," headterm)*] ")" ":-" atom ("," atom)* [having]
    headterm  := VAR | aggregate
    aggregate := "COUNT(*)" | "SUM(" factor ("*" factor)* ")" | "COVAR(" VAR ("," VAR)* ")"
               | "AVG(" VAR ")" | "MIN(" VAR ")" | "MAX(" VAR ")" | "COUNT(DISTINCT " VAR ")"
    having    := "HAVING" condition (("," | "AND") condition)*
    condition := (aggregate | VAR) ("=" | "<>" | "!=" | "<" | "<=" | ">" | ">=") constant
    atom      := NAME "(" [term ("," term)*] ")"
    term      := VAR | "_" | NUMBER | 'string' | "string"

Head variables are the free variables; at most one aggregate may appear in the
head (default ``COUNT(*)``: the sum of the product of multiplicities, F-IVM §2).
``_`` is an anonymous variable; a constant is a selection on its position.
``HAVING`` (after the body, its conditions separated by commas like the atoms)
keeps the groups whose aggregates (any of the head's kinds but COVAR) or head
variables compare as stated with constants:
``Q(a, MIN(c)) :- R(a, b), S(b, c) HAVING COUNT(*) > 2, a <> 3``.
Text starting with ``SELECT`` is read as SQL (:func:`ivm.query.sql.parse_sql`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from ivm.query.model import FRESH, OPERATORS, Aggregate, Atom, Comparison, Constant, Operator, Query


class QuerySyntaxError(ValueError):
    """The query text is not a query this library can read; the message names the construct."""


_TOKEN = re.compile(
    r"""\s*(?:
        (?P<rule>:-)
      | (?P<number>-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)
      | (?P<string>'(?:[^']|'')*'|"[^"]*")
      | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
      | (?P<compare><>|!=|<=|>=|<|>|=)
      | (?P<punct>[(),*])
    )""",
    re.VERBOSE,
)
_AGGREGATES = {"COUNT", "SUM", "COVAR", "AVG", "MIN", "MAX"}
_ONE_VARIABLE = {"AVG": "avg", "MIN": "min", "MAX": "max"}


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
    >>> q = parse("Q(a, COUNT(DISTINCT c)) :- R(a, b), S(b, c) HAVING MIN(c) >= 2 AND a != 'x'")
    >>> str(q)
    "Q(a, COUNT(DISTINCT c)) :- R(a, b), S(b, c) HAVING MIN(c) >= 2, a <> 'x'"
    >>> parse(str(q)) == q
    True
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
        having: list[Comparison] = []
        if self.peek()[0] == "name" and self.peek()[1].upper() == "HAVING":
            self.take()
            having.append(self.condition())
            while self.peek()[1] == "," or (self.peek()[0] == "name" and self.peek()[1].upper() == "AND"):
                self.take()
                having.append(self.condition())
        if self.peek()[0] != "end":
            raise QuerySyntaxError(f"unexpected {self.peek()[1]!r} after the body in {self.text!r}")
        query = Query(name, tuple(free), tuple(atoms), aggregate or Aggregate(), tuple(having))
        return validate(query, schema)

    def condition(self) -> Comparison:
        """``aggregate op constant`` or ``variable op constant``, one conjunct of HAVING."""
        word = self.take(kind="name")
        term: Aggregate | str = self.aggregate(word) if self.peek()[1] == "(" else word
        op = self.take(kind="compare")
        kind, value = self.peek()
        if kind not in ("number", "string"):
            raise QuerySyntaxError(f"HAVING compares with a constant, found {value or 'the end'!r} in {self.text!r}")
        self.take()
        constant = _number(value) if kind == "number" else _string(value)
        return Comparison(term, _operator(op), constant)

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
                f"unsupported aggregate {word}(...): use COUNT(*), SUM(a * b * ...), COVAR(a, b, ...), AVG(a), "
                "MIN(a), MAX(a) or COUNT(DISTINCT a)"
            )
        self.take("(")
        if func == "COUNT":
            if self.peek()[0] == "name" and self.peek()[1].upper() == "DISTINCT":
                self.take()
                variable = self.take(kind="name")
                self.take(")")
                return Aggregate("count_distinct", (variable,))
            if self.peek()[1] == "*":
                self.take("*")
            self.take(")")
            return Aggregate()
        if func in _ONE_VARIABLE:
            variable = self.take(kind="name")
            self.take(")")
            return Aggregate(_ONE_VARIABLE[func], (variable,))
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


def _operator(text: str) -> Operator:
    op = "<>" if text == "!=" else text
    assert op in OPERATORS
    return op  # type: ignore[return-value]


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
    for aggregate in query.aggregates:
        unknown = set(aggregate.variables) - query.variables
        if unknown:
            raise QuerySyntaxError(f"aggregate {aggregate} uses {sorted(unknown)}, absent from the body")
        if aggregate.kind in ("avg", "min", "max", "count_distinct") and len(aggregate.variables) != 1:
            raise QuerySyntaxError(f"aggregate {aggregate} takes one variable")
    for condition in query.having:
        term = condition.term
        if isinstance(term, str) and term not in query.free:
            raise QuerySyntaxError(
                f"HAVING {condition}: {term} is not a head (GROUP BY) variable; HAVING compares aggregates "
                "and head variables with constants"
            )
        if isinstance(term, Aggregate) and term.kind == "covariance":
            raise QuerySyntaxError(f"HAVING {condition}: COVAR is not a number to compare")
        numeric = isinstance(term, Aggregate) and term.kind not in ("min", "max")
        if numeric and isinstance(condition.value, str | bool):
            raise QuerySyntaxError(f"HAVING {condition}: {term} is a number, compared with a string")
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
