"""SQL selections, expressions in aggregates and COUNT(col), every engine that serves them, against DuckDB.

DuckDB holds each relation as a bag (a tuple repeated by its multiplicity, NULLs as NULL) and runs the
SQL text itself.  After every batch of a random insert/delete stream (deletes of present tuples, partly
or wholly, so groups empty out and filtered-out tuples are deleted too) each engine's maintained result
must equal DuckDB's rows.  The engines get the updates as given: the selection is applied where they
enter the view, so a delete of a filtered-out tuple must be dropped exactly as its insert was (else the
view would reject it as the delete of an absent tuple, which the test refuses).

Every column may be NULL, join columns too: NULL never joins in SQL, so a tuple with NULL in a join
variable is dropped where it enters (counted as filtered), and one with NULL where a self-joined relation
joins in one occurrence but not in another is refused (``null_join_key``; DuckDB never sees it).  A NULL
that reaches SUM, AVG, MIN or MAX is refused too (as the view documents; DuckDB never sees it either).
Rule-syntax queries get the same rule (:data:`RULES`, each beside its SQL).
"""

from __future__ import annotations

import math
import random
from collections import Counter
from typing import Any

import duckdb
import pytest

import ivm
from ivm.engines import ENGINES
from ivm.query.model import Query
from ivm.query.parse import parse
from ivm.query.sql import parse_sql

# every attribute may be NULL (S.D a third of its values, the others one in eight, join columns too); else small ints
SCHEMA = {"R": ["A", "B"], "S": ["B", "C", "D"], "T": ["C", "E"], "W": ["B", "C"]}
NULLS = {("S", 2): 0.35}
NULL_ELSEWHERE = 0.12

QUERIES = [
    # selections: comparisons, ranges, BETWEEN, IN, OR, NOT, IS NULL, arithmetic inside a condition
    "SELECT COUNT(*) FROM R JOIN S USING (B) WHERE S.C > 2",
    "SELECT R.A, COUNT(*) FROM R JOIN S USING (B) WHERE R.A BETWEEN 1 AND 3 GROUP BY R.A",
    "SELECT R.A, SUM(S.C) FROM R JOIN S USING (B) WHERE S.C IN (1, 3, 4) OR NOT S.D < 2 GROUP BY R.A",
    "SELECT COUNT(*) FROM R JOIN S USING (B) WHERE S.D IS NULL AND R.A <> 2",
    "SELECT S.C, COUNT(*) FROM R JOIN S USING (B) WHERE S.D NOT IN (0, 1) GROUP BY S.C",
    "SELECT S.B, SUM(S.C) FROM S WHERE S.D IS NOT NULL AND (S.C < 2 OR S.C >= 4) GROUP BY S.B",
    "SELECT R.A, S.C FROM R JOIN S USING (B) WHERE S.C <> 2 AND R.A >= 1",
    "SELECT COUNT(*) FROM R JOIN S ON R.B = S.B AND S.C NOT BETWEEN 1 AND 2 JOIN T ON S.C = T.C WHERE T.E % 2 = 0",
    "SELECT COUNT(*) FROM R, S, T WHERE R.B = S.B AND S.C = T.C AND T.E = R.A AND R.A + R.B > 3",
    "SELECT COUNT(*) FROM R r1 JOIN R r2 ON r1.B = r2.A WHERE r1.A > 0 AND r2.A > 0",
    "SELECT COUNT(*) FROM R, W, T WHERE R.B = W.B AND W.C = T.C AND T.E = R.A AND R.A <> 1 AND W.C IN (0, 1, 3)",
    "SELECT R.A, W.C FROM R JOIN W USING (B) WHERE R.A - R.B BETWEEN -1 AND 1",
    # expressions inside the aggregates: computed attributes, and products of per-relation factors
    "SELECT SUM(S.C * (S.C + 1)) FROM R JOIN S USING (B)",
    "SELECT R.A, SUM(R.A * (S.C - 1)) FROM R JOIN S USING (B) GROUP BY R.A",
    "SELECT R.A, SUM(2 * (R.B + 1) * (T.E - T.C)) FROM R JOIN S USING (B) JOIN T USING (C) GROUP BY R.A",
    "SELECT R.A, AVG(S.C * 2 + 1) FROM R JOIN S USING (B) GROUP BY R.A",
    "SELECT R.A, AVG(S.C / 2) FROM R JOIN S USING (B) GROUP BY R.A",
    "SELECT R.A, MIN(S.C - S.B) FROM R JOIN S USING (B) GROUP BY R.A",
    "SELECT MAX(S.C % 3) FROM R JOIN S USING (B) WHERE R.A < 4",
    "SELECT R.A, COUNT(*) FROM R JOIN S USING (B) GROUP BY R.A HAVING SUM(S.C - 1) > 4",
    # COUNT(col): the rows whose col is not NULL
    "SELECT R.A, COUNT(S.D) FROM R JOIN S USING (B) GROUP BY R.A",
    "SELECT COUNT(S.D) FROM R JOIN S USING (B) WHERE R.A <> 1",
    "SELECT S.C, COUNT(S.D + 1) FROM S GROUP BY S.C",
    # no selection: NULL join keys alone (an equality inside one table too), NULL group-by keys kept as values
    "SELECT R.A, COUNT(*) FROM R JOIN S USING (B) GROUP BY R.A",
    "SELECT S.D, SUM(R.A) FROM R JOIN S USING (B) GROUP BY S.D",
    "SELECT COUNT(*) FROM R, S, T WHERE R.B = S.B AND S.C = T.C AND T.E = R.A",
    "SELECT R.A, T.E FROM R JOIN S USING (B) JOIN T USING (C)",
    "SELECT S.D, COUNT(*) FROM S WHERE S.B = S.C GROUP BY S.D",
    "SELECT r1.A, COUNT(*) FROM R r1 JOIN R r2 ON r1.B = r2.A GROUP BY r1.A",
]

# the rule syntax, each beside the SQL that DuckDB runs for it
RULES = [
    ("Q(A) :- R(A, B), S(B, C, D)", "SELECT R.A, COUNT(*) FROM R JOIN S USING (B) GROUP BY R.A"),
    ("Q(D, SUM(A)) :- R(A, B), S(B, C, D)", "SELECT S.D, SUM(R.A) FROM R JOIN S USING (B) GROUP BY S.D"),
    ("Q() :- R(A, B), S(B, C, D), T(C, A)", "SELECT COUNT(*) FROM R, S, T WHERE R.B = S.B AND S.C = T.C AND T.E = R.A"),
    ("Q(A, E) :- R(A, B), S(B, C, D), T(C, E)", "SELECT R.A, T.E FROM R JOIN S USING (B) JOIN T USING (C)"),
    ("Q(D) :- S(B, B, D)", "SELECT S.D, COUNT(*) FROM S WHERE S.B = S.C GROUP BY S.D"),
    ("Q(A) :- R(A, B), R(B, C)", "SELECT r1.A, COUNT(*) FROM R r1 JOIN R r2 ON r1.B = r2.A GROUP BY r1.A"),
]


def random_stream(rng: random.Random, relations: dict[str, int], n: int) -> list[ivm.Update]:
    """Inserts (multiplicities 1-3) and deletes of present tuples (partly or wholly); small values, NULLs in S.D."""
    live: dict[tuple[str, tuple[Any, ...]], int] = {}
    out = []
    for _ in range(n):
        if live and rng.random() < 0.45:
            (relation, row), m = rng.choice(sorted(live.items(), key=repr))
            mult = -m if rng.random() < 0.7 else -rng.randint(1, m)
        else:
            relation = rng.choice(sorted(relations))
            row = tuple(
                None if rng.random() < NULLS.get((relation, p), NULL_ELSEWHERE) else rng.randrange(5)
                for p in range(relations[relation])
            )
            mult = rng.choice([1, 1, 2, 3])
        live[(relation, row)] = live.get((relation, row), 0) + mult
        if not live[(relation, row)]:
            del live[(relation, row)]
        out.append(ivm.Update(relation, row, mult))
    return out


class Oracle:
    """The relations as DuckDB bags, rebuilt from the current multiplicities before each query."""

    def __init__(self) -> None:
        self.con = duckdb.connect()
        self.bags: dict[str, Counter] = {r: Counter() for r in SCHEMA}
        for relation, attributes in SCHEMA.items():
            self.con.execute(f"CREATE TABLE {relation} ({', '.join(f'{a} INTEGER' for a in attributes)})")

    def apply(self, updates: list[ivm.Update]) -> None:
        for relation, row, mult in updates:
            self.bags[relation][row] += mult
            assert self.bags[relation][row] >= 0

    def run(self, sql: str) -> list[tuple[Any, ...]]:
        for relation, bag in self.bags.items():
            self.con.execute(f"DELETE FROM {relation}")
            rows = [row for row, m in bag.items() for _ in range(m)]
            if rows:
                marks = ", ".join("?" * len(SCHEMA[relation]))
                self.con.executemany(f"INSERT INTO {relation} VALUES ({marks})", rows)
        return self.con.execute(sql).fetchall()


def is_listing(sql: str, query: Query) -> bool:
    """A SELECT without aggregate: the bag of its rows (each answer with its multiplicity)."""
    return bool(query.free) and "GROUP BY" not in sql


def expected(sql: str, query: Query, rows: list[tuple[Any, ...]]) -> Any:
    """DuckDB's rows as the view's result: ``{group: value}`` with GROUP BY, the value without, and a
    listing ``{row: multiplicity}``.  A SUM or COUNT over no rows is 0 here (NULL in SQL for SUM)."""
    if is_listing(sql, query):
        return dict(Counter(rows))
    if query.free:
        return {tuple(row[:-1]): row[-1] for row in rows}
    (value,) = rows[0] if rows else (None,)
    if value is None and query.aggregate.kind in ("count", "sum"):
        return 0
    return value


def same(got: Any, want: Any) -> bool:
    if isinstance(want, dict):
        return isinstance(got, dict) and got.keys() == want.keys() and all(same(got[k], want[k]) for k in want)
    if isinstance(want, float) or isinstance(got, float):
        return got is not None and want is not None and math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-9)
    return got == want and type(got) is not bool


def engines_for(query: Query) -> list[str]:
    """Every registered engine that serves ``query`` (each refuses the others by name)."""
    return [name for name, cls in sorted(ENGINES.items()) if not cls.refuses(query)]


def result_of(view: Any, sql: str, query: Query) -> Any:
    if is_listing(sql, query):
        return {row: m for row, m in view.enumerate() if m}
    return view.result()


@pytest.mark.parametrize("sql", QUERIES)
def test_every_engine_matches_duckdb_after_every_batch(sql: str) -> None:
    check_against_duckdb(sql, parse_sql(sql, SCHEMA))


@pytest.mark.parametrize(("rule", "sql"), RULES)
def test_rule_syntax_nulls_never_join_as_in_duckdb(rule: str, sql: str) -> None:
    check_against_duckdb(sql, parse(rule))


def check_against_duckdb(sql: str, query: Query) -> None:
    """Every engine serving ``query`` equals DuckDB running ``sql`` after every batch of random streams; the
    only refusals are NULLs where a self-joined relation joins in one occurrence and not in another or that an
    aggregate takes as a number; the tuples with NULL where they join are dropped (each stream has some)."""
    self_join = not query.self_join_free
    joins = any(m > 1 for m in Counter(t for atom in query.atoms for t in atom.terms).values())
    names = engines_for(query)
    assert names, f"no engine serves {query}"
    planned = ivm.maintain(query)
    assert planned.engine.name in names
    for seed in range(2):
        rng = random.Random(seed)
        views = {name: ivm.maintain(query, engine=name) for name in names}
        oracle = Oracle()
        stream = random_stream(rng, {r: len(SCHEMA[r]) for r in query.relations}, 120)
        i = 0
        null_dropped = 0
        while i < len(stream):
            batch = stream[i : i + rng.choice([1, 1, 4, 15])]
            i += len(batch)
            refused = None
            for name, view in views.items():
                outcome = view.apply(batch)
                indices = [r.index for r in outcome.rejected]
                for r in outcome.rejected:  # a NULL join key of a self-join, or a NULL that SUM/AVG/MIN/MAX takes
                    assert None in r.update.row, f"{name}: {r}"
                    assert r.kind in ("not_a_number", "not_comparable") or (r.kind == "null_join_key" and self_join), r
                assert refused is None or indices == refused, f"{name} refuses other updates: {indices} {refused}"
                refused = indices
                assert outcome.applied + outcome.filtered + len(indices) == len(batch)
            kept = [u for k, u in enumerate(batch) if k not in set(refused or ())]
            null_dropped += sum(1 for u in kept if _nulls_in_join(query, u))
            oracle.apply(kept)
            want = expected(sql, query, oracle.run(sql))
            for name, view in views.items():
                got = result_of(view, sql, query)
                assert same(got, want), f"{name} on {sql} after {i} updates: got {got!r}, DuckDB {want!r}"
        assert null_dropped > 0 or self_join or not joins, "the stream has tuples with NULL where they join"


def _nulls_in_join(query: Query, update: ivm.Update) -> bool:
    """Does ``update``'s tuple have NULL in a variable its relation's atoms share (a join variable)?"""
    count = Counter(t for atom in query.atoms for t in atom.terms)
    return any(
        value is None and count[atom.terms[p]] > 1
        for atom in query.atoms
        if atom.relation == update.relation
        for p, value in enumerate(update.row)
    )
