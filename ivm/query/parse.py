"""Parse rule syntax ``Q(a, c) :- R(a, b), S(b, c)`` into a :class:`Query`."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from ivm.query.model import Atom, Query

_ATOM = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*\(([^()]*)\)\s*")


class QuerySyntaxError(ValueError):
    """The query text is not a query this library can read."""


def parse(text: str, schema: Mapping[str, Sequence[str]] | None = None) -> Query:
    """Parse a rule into a :class:`Query`.

    >>> str(parse("Q() :- R(a,b), S(b,c), T(c,a)"))
    'Q() :- R(a, b), S(b, c), T(c, a)'
    """
    if ":-" not in text:
        raise QuerySyntaxError(f"expected a rule 'Q(...) :- R(...), ...', got {text!r}")
    head_text, body_text = text.split(":-", 1)
    head = _parse_atom(head_text)
    atoms = tuple(_parse_atom(part) for part in _split_atoms(body_text))
    if not atoms:
        raise QuerySyntaxError("the query body has no atoms")
    query = Query(head.relation, head.terms, atoms)
    missing = set(query.free) - query.variables
    if missing:
        raise QuerySyntaxError(f"free variables {sorted(missing)} do not occur in the body")
    for atom in atoms:
        if schema is not None and atom.relation in schema and len(schema[atom.relation]) != len(atom.terms):
            raise QuerySyntaxError(
                f"{atom} has {len(atom.terms)} terms but relation {atom.relation} "
                f"has attributes {list(schema[atom.relation])}"
            )
    return query


def _split_atoms(body: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(body):
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            parts.append(body[start:i])
            start = i + 1
    parts.append(body[start:])
    return [p for p in parts if p.strip()]


def _parse_atom(text: str) -> Atom:
    match = _ATOM.fullmatch(text)
    if not match:
        raise QuerySyntaxError(f"cannot read atom {text.strip()!r}")
    terms = tuple(t.strip() for t in match.group(2).split(",") if t.strip())
    return Atom(match.group(1), terms)
