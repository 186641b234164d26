"""AVG, MIN, MAX, COUNT(DISTINCT) and HAVING (the ``aggregates`` engine) against DuckDB.

DuckDB holds each relation as a bag (a tuple repeated by its multiplicity) and
runs the SQL text itself; after every batch of a random insert/delete stream
(deletes of present tuples, so groups empty out and minima lose their last
copy) the maintained result must equal DuckDB's rows: ``{group: value}`` with
GROUP BY, the value (``None`` for NULL or no row) without.
"""

from __future__ import annotations

import json
import math
import pickle
import random
import re
from typing import Any

import duckdb
import pytest

import ivm
from ivm.engines import ENGINES, EngineRefused
from ivm.engines.aggregates import GroupAggregates
from ivm.query.explain import explain, render_text
from ivm.query.model import Aggregate, Atom, Comparison, Query
from ivm.query.parse import QuerySyntaxError, parse
from ivm.query.sql import parse_sql

SCHEMA = {"R": ["A", "B"], "S": ["B", "C"], "T": ["C", "D"]}

QUERIES = [
    "SELECT R.A, AVG(S.C) FROM R JOIN S ON R.B = S.B GROUP BY R.A",
    "SELECT R.A, MIN(S.C) FROM R, S WHERE R.B = S.B GROUP BY R.A",
    "SELECT R.A, MAX(S.C) FROM R JOIN S USING (B) GROUP BY R.A",
    "SELECT R.A, COUNT(DISTINCT S.C) FROM R JOIN S USING (B) GROUP BY R.A",
    "SELECT MIN(S.C) FROM R JOIN S USING (B)",
    "SELECT MAX(R.A) FROM R",
    "SELECT AVG(R.A) FROM R JOIN S USING (B) JOIN T USING (C)",
    "SELECT COUNT(DISTINCT T.D) FROM R JOIN S USING (B) JOIN T USING (C)",
    "SELECT S.B, MAX(T.D) FROM R JOIN S USING (B) JOIN T USING (C) GROUP BY S.B HAVING COUNT(*) > 2",
    "SELECT R.A, MIN(S.C) FROM R JOIN S USING (B) GROUP BY R.A HAVING MAX(S.C) >= 3 AND COUNT(DISTINCT S.C) <> 1",
    "SELECT R.A, AVG(S.C) FROM R JOIN S USING (B) GROUP BY R.A HAVING AVG(S.C) > 1.5 AND R.A <> 0",
    "SELECT R.A, COUNT(*) FROM R JOIN S USING (B) GROUP BY R.A HAVING SUM(S.C) < 6",
    "SELECT R.A, SUM(2 * S.C) FROM R JOIN S USING (B) GROUP BY R.A HAVING MIN(S.C) = 0",
    "SELECT S.C, T.D, MIN(R.A) FROM R JOIN S USING (B) JOIN T USING (C) GROUP BY S.C, T.D HAVING 1 < MAX(R.A)",
    "SELECT MAX(S.C) FROM R JOIN S USING (B) HAVING COUNT(*) >= 3",
    "SELECT COUNT(DISTINCT S.C) FROM R JOIN S USING (B) HAVING COUNT(*) = 0",
    "SELECT R.A, MIN(R.B) FROM R JOIN S USING (B) GROUP BY R.A HAVING R.A >= 1",
    "SELECT R.A, MIN(R.A) FROM R GROUP BY R.A",
    "SELECT R.A, COUNT(DISTINCT R.A) FROM R JOIN S USING (B) GROUP BY R.A",
    "SELECT e1.A, MIN(e2.B) FROM R e1 JOIN R e2 ON e1.B = e2.A GROUP BY e1.A HAVING COUNT(DISTINCT e2.B) >= 1",
    "SELECT R.A, MAX(S.C) FROM R JOIN S USING (B) WHERE S.B = 1 GROUP BY R.A",
]


def random_stream(rng: random.Random, relations: dict[str, int], n: int, domain: int) -> list[ivm.Update]:
    """Inserts (multiplicities 1-3) and deletes of present tuples (partly or wholly), skewed to small values."""
    live: dict[tuple[str, tuple[Any, ...]], int] = {}
    out = []
    for _ in range(n):
        if live and rng.random() < 0.45:
            (relation, row), m = rng.choice(sorted(live.items()))
            mult = -m if rng.random() < 0.7 else -rng.randint(1, m)
        else:
            relation = rng.choice(sorted(relations))
            row = tuple(rng.randrange(domain) if rng.random() < 0.8 else 0 for _ in range(relations[relation]))
            mult = rng.choice([1, 1, 2, 3])
        live[(relation, row)] = live.get((relation, row), 0) + mult
        if not live[(relation, row)]:
            del live[(relation, row)]
        out.append(ivm.Update(relation, row, mult))
    return out


class Oracle:
    """The relations as DuckDB bags, rebuilt from the current multiplicities before each query."""

    def __init__(self, schema: dict[str, list[str]], column_type: str = "INTEGER") -> None:
        self.con = duckdb.connect()
        self.schema = schema
        self.bags: dict[str, dict[tuple[Any, ...], int]] = {r: {} for r in schema}
        for relation, attributes in schema.items():
            columns = ", ".join(f"{a} {column_type}" for a in attributes)
            self.con.execute(f"CREATE TABLE {relation} ({columns})")

    def apply(self, updates: list[ivm.Update]) -> None:
        for relation, row, mult in updates:
            bag = self.bags[relation]
            bag[row] = bag.get(row, 0) + mult
            assert bag[row] >= 0
            if not bag[row]:
                del bag[row]

    def run(self, sql: str, grouped: bool) -> Any:
        for relation, bag in self.bags.items():
            self.con.execute(f"DELETE FROM {relation}")
            rows = [row for row, m in bag.items() for _ in range(m)]  # numbers only: their repr is SQL
            if rows:
                values = ", ".join("(" + ", ".join(repr(v) for v in row) + ")" for row in rows)
                self.con.execute(f"INSERT INTO {relation} VALUES {values}")
        rows = self.con.execute(sql).fetchall()
        if grouped:
            return {tuple(row[:-1]): row[-1] for row in rows}
        assert len(rows) <= 1
        return rows[0][0] if rows else None


def same(got: Any, want: Any) -> bool:
    if isinstance(want, dict):
        return isinstance(got, dict) and got.keys() == want.keys() and all(same(got[k], want[k]) for k in want)
    if isinstance(want, float) or isinstance(got, float):
        return got is not None and want is not None and math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-9)
    return got == want and type(got) is not bool


def check_stream(sql: str, seed: int, schema: dict[str, list[str]], domain: int, column_type: str = "INTEGER") -> None:
    rng = random.Random(seed)
    query = parse_sql(sql, schema)
    view = ivm.maintain(query)
    assert view.engine.name == "aggregates"
    oracle = Oracle(schema, column_type)
    stream = random_stream(rng, dict(query.relations), 160, domain)
    grouped = bool(query.free)
    i = 0
    while i < len(stream):
        batch = stream[i : i + rng.choice([1, 1, 3, 12])]
        i += len(batch)
        outcome = view.apply(batch)
        assert outcome.rejected == []
        oracle.apply(batch)
        want = oracle.run(sql, grouped)
        got = view.result()
        assert same(got, want), f"{sql} after {i} updates: got {got!r}, DuckDB {want!r}"
        assert sorted(view.enumerate()) == sorted(
            (g, c) for g, c in oracle_counts(oracle, query, sql).items() if not grouped or g in want
        )


def oracle_counts(oracle: Oracle, query: Query, sql: str) -> dict[tuple[Any, ...], int]:
    """Each result group's COUNT(*) (what enumerate() lists), by DuckDB: the SQL with COUNT(*) for the aggregate."""
    head, _, rest = sql.partition(" FROM ")
    columns = head.removeprefix("SELECT ").rsplit(",", 1)[0] if query.free else ""
    select = f"SELECT {columns + ', ' if columns else ''}COUNT(*) FROM {rest}"
    found = oracle.run(select, bool(query.free))
    if not query.free:
        return {(): found} if found else {}
    return {g: c for g, c in found.items() if c}


@pytest.mark.parametrize("sql", QUERIES)
@pytest.mark.parametrize("seed", range(3))
def test_matches_duckdb_after_every_batch(sql: str, seed: int) -> None:
    check_stream(sql, seed, SCHEMA, domain=5)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT R.A, MIN(S.C) FROM R JOIN S USING (B) GROUP BY R.A HAVING MAX(S.C) > 0.5",
        "SELECT R.A, AVG(S.C) FROM R JOIN S USING (B) GROUP BY R.A HAVING MIN(S.C) <= 1.25",
        "SELECT COUNT(DISTINCT S.C) FROM R JOIN S USING (B) HAVING AVG(S.C) >= 0.75",
    ],
)
@pytest.mark.parametrize("seed", range(2))
def test_floats_and_ints_compare_as_numbers(sql: str, seed: int) -> None:
    """Values are ints and floats mixed (a DOUBLE column in DuckDB): compared as numbers."""
    schema = {"R": ["A", "B"], "S": ["B", "C"]}
    rng = random.Random(100 + seed)
    query = parse_sql(sql, schema)
    view = ivm.maintain(query)
    oracle = Oracle(schema, "DOUBLE")
    values = [0, 1, 2, 0.5, 1.25, -0.75, 2.0]
    live: list[ivm.Update] = []
    for step in range(120):
        if live and rng.random() < 0.4:
            update = live.pop(rng.randrange(len(live)))
            batch = [ivm.Update(update.relation, update.row, -1)]
        else:
            relation = rng.choice(["R", "S"])
            row = (rng.randrange(3), rng.randrange(3) if relation == "R" else rng.choice(values))
            batch = [ivm.Update(relation, row, 1)]
            live += batch
        view.apply(batch)
        oracle.apply(batch)
        want = oracle.run(sql, bool(query.free))
        assert same(view.result(), want), f"{sql} at step {step}: {view.result()!r} vs {want!r}"


def test_a_deleted_minimum_gives_way_and_an_emptied_group_disappears() -> None:
    view = ivm.maintain("SELECT R.A, MIN(S.C) FROM R JOIN S USING (B) GROUP BY R.A", schema=SCHEMA)
    view.apply([("R", (1, 10), 1), ("S", (10, 3), 2), ("S", (10, 7), 1), ("R", (2, 20), 1), ("S", (20, 5), 1)])
    assert view.result() == {(1,): 3, (2,): 5}
    view.apply([("S", (10, 3), -1)])  # one of the two copies: still the minimum
    assert view.result() == {(1,): 3, (2,): 5}
    view.apply([("S", (10, 3), -1)])  # the minimum's last copy
    assert view.result() == {(1,): 7, (2,): 5}
    view.apply([("S", (20, 5), -1)])  # group 2's last row
    assert view.result() == {(1,): 7}
    view.apply([("S", (20, 4), 1)])
    assert view.result() == {(1,): 7, (2,): 4}

    avg = ivm.maintain("SELECT R.A, AVG(S.C) FROM R JOIN S USING (B) GROUP BY R.A", schema=SCHEMA)
    avg.apply([("R", (1, 10), 1), ("S", (10, 0), 1), ("S", (10, 3), 1)])
    assert avg.result() == {(1,): 1.5} and isinstance(avg.result()[(1,)], float)
    avg.apply([("S", (10, 3), -1)])
    assert avg.result() == {(1,): 0.0}  # a zero sum over rows is an average of 0, the group stays
    avg.apply([("S", (10, 0), -1)])
    assert avg.result() == {}  # no rows: no group, never 0/0


def test_having_drops_and_restores_groups() -> None:
    view = ivm.maintain("Q(a, MAX(c)) :- R(a, b), S(b, c) HAVING COUNT(DISTINCT c) >= 2, a <> 9")
    view.apply([("R", (1, 1), 1), ("S", (1, 4), 1), ("R", (9, 1), 1)])
    assert view.result() == {}
    view.apply([("S", (1, 6), 3)])
    assert view.result() == {(1,): 6}
    assert view.engine.drain_delta() == [((1,), 4)]  # the first call lists what is there
    view.apply([("S", (1, 4), -1)])  # multiplicities do not count: one distinct value left
    assert view.result() == {} and view.engine.drain_delta() == [((1,), -4)]  # the group leaves the listing
    view.apply([("S", (1, 5), 1)])
    assert view.result() == {(1,): 6} and view.engine.drain_delta() == [((1,), 4)]


def test_scalar_over_no_rows_is_sql_null_or_zero() -> None:
    assert ivm.maintain("SELECT MIN(S.C) FROM R JOIN S USING (B)", schema=SCHEMA).result() is None
    assert ivm.maintain("SELECT AVG(S.C) FROM R JOIN S USING (B)", schema=SCHEMA).result() is None
    assert ivm.maintain("SELECT COUNT(DISTINCT S.C) FROM R JOIN S USING (B)", schema=SCHEMA).result() == 0
    having = ivm.maintain("SELECT COUNT(DISTINCT S.C) FROM R JOIN S USING (B) HAVING COUNT(*) = 0", schema=SCHEMA)
    assert having.result() == 0 and list(having.enumerate()) == []
    having.apply([("R", (1, 2), 1), ("S", (2, 3), 1)])
    assert having.result() is None  # one row: HAVING COUNT(*) = 0 fails, no row


@pytest.mark.parametrize("sql", [QUERIES[1], QUERIES[9], QUERIES[10], QUERIES[15]])
def test_batch_equals_one_by_one_snapshot_and_deltas(sql: str) -> None:
    query = parse_sql(sql, SCHEMA)
    stream = random_stream(random.Random(5), dict(query.relations), 300, 4)
    batched, single = ivm.maintain(query), ivm.maintain(query)
    deltas: dict[tuple[Any, ...], int] = {}
    for i in range(0, len(stream), 25):
        batched.apply(stream[i : i + 25])
        for answer, d in batched.engine.drain_delta():
            deltas[answer] = deltas.get(answer, 0) + d
        assert {a: m for a, m in deltas.items() if m} == dict(batched.enumerate())
    for update in stream:
        single.apply([update])
    assert same(batched.result(), single.result())
    assert sorted(batched.enumerate()) == sorted(single.enumerate())
    restored = GroupAggregates.restore(batched.engine.snapshot())
    assert same(restored.result(), batched.result())
    assert pickle.loads(pickle.dumps(batched.engine)).stats() == batched.engine.stats()
    for relation, row, _ in stream[:40]:
        assert restored.multiplicity(relation, row) == batched.engine.multiplicity(relation, row)
    restored.apply(stream[:10])
    batched.engine.apply(stream[:10])
    assert same(restored.result(), batched.result())


# ---------------------------------------------------------------------------- explain and refusals


def test_explain_states_each_guarantee() -> None:
    minimum = explain("SELECT R.A, MIN(S.C) FROM R JOIN S USING (B) GROUP BY R.A", schema=SCHEMA)
    assert minimum["engine"] == minimum["best_engine"] == "aggregates"
    assert "O(log n) per change of a (group, C) count" in minimum["guarantee"]["update"]
    assert minimum["guarantee"]["update"].startswith("O(N) per single-tuple update (Q(A, C) :- R(A, B), S(B, C))")
    assert "sorted" in " ".join(minimum["plan"]["views"])

    distinct = explain("Q(a, COUNT(DISTINCT c)) :- R(a, b), S(b, c)")
    assert "O(1) per change of a (group, c) count" in distinct["guarantee"]["update"]
    assert "O(log n)" not in distinct["guarantee"]["update"]

    average = explain("Q(a, AVG(b)) :- R(a, b), S(a, c)")  # q-hierarchical: the SUM's O(1) bound carries over
    assert average["guarantee"]["update"] == "expected O(1) (hash tables) (Q(a, SUM(b)) :- R(a, b), S(a, c))"
    assert "count and sum" in average["plan"]["why"] and average["ring"].startswith("the count and sum")
    assert average["in_ring"] is False and "aggregate: AVG(b), computed from the count and sum" in render_text(average)

    having = explain("Q(a, MAX(c)) :- R(a, b), S(b, c) HAVING COUNT(*) > 2, a <> 3")
    assert "HAVING" in having["guarantee"]["delay"] and "HAVING COUNT(*) > 2, a <> 3" in having["plan"]["why"]
    assert having["having"] == ["COUNT(*) > 2", "a <> 3"]
    assert "O(log n) per change" in render_text(having)

    scalar = explain("SELECT MAX(R.A) FROM R", schema=SCHEMA)
    assert scalar["guarantee"]["delay"] == "O(1) answer time"

    view = ivm.maintain("Q(a, MIN(c)) :- R(a, b), S(b, c)")
    assert view.explain()["engine"] == "aggregates"


@pytest.mark.parametrize("engine", ["first_order", "ivm_eps", "ivm_eps_auto", "fivm", "qhier", "propagation"])
@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("Q(MIN(a)) :- R(a, b), S(b, c), T(c, a)", "MIN(a)"),
        ("Q(a, AVG(b)) :- R(a, b), S(a, c)", "AVG(b)"),
        ("Q(a, COUNT(DISTINCT c)) :- R(a, b), S(b, c)", "COUNT(DISTINCT c)"),
        ("Q() :- R(a, b), S(b, c), T(c, a) HAVING COUNT(*) > 2", "HAVING"),
        ("Q(a) :- R(a, b), S(a, c) HAVING a > 2", "HAVING"),
    ],
)
def test_other_engines_refuse_by_name(engine: str, text: str, named: str) -> None:
    with pytest.raises(EngineRefused, match=rf"engine {re.escape(repr(engine))} cannot maintain .*{re.escape(named)}"):
        ivm.maintain(text, engine=engine)
    assert named in (ENGINES[engine].refuses(parse(text)) or "")
    out = explain(text, engine=engine)
    assert out["engine"] is None and any(named in note for note in out["plan"]["notes"])


def test_shards_are_refused() -> None:
    with pytest.raises(EngineRefused, match="do not add up across shards"):
        ivm.maintain("Q(a, MIN(c)) :- R(a, b), S(b, c)", shards=4)


def test_result_is_json_for_the_runtime() -> None:
    import ivm.processor.codecs.avro as codec

    view = ivm.maintain("SELECT R.A, AVG(S.C) FROM R JOIN S USING (B) GROUP BY R.A", schema=SCHEMA)
    view.apply([("R", (1, 2), 1), ("S", (2, 3), 1), ("S", (2, 4), 1)])
    assert json.loads(codec.result_to_json(view.result(), view.query)) == {"[1]": 3.5}
    scalar = ivm.maintain("SELECT MIN(S.C) FROM R JOIN S USING (B)", schema=SCHEMA)
    assert codec.result_to_json(scalar.result(), scalar.query) == "null"


# ---------------------------------------------------------------------------- parsing


@pytest.mark.parametrize(
    ("sql", "head", "having"),
    [
        ("SELECT R.A, AVG(S.C) FROM R JOIN S USING (B) GROUP BY R.A", (("A",), Aggregate("avg", ("C",))), ()),
        ("SELECT MIN(R.B) AS m FROM R", ((), Aggregate("min", ("B",))), ()),
        ("SELECT R.A, MAX(S.C) FROM R, S WHERE R.B = S.B GROUP BY R.A", (("A",), Aggregate("max", ("C",))), ()),
        (
            "SELECT R.A, COUNT(DISTINCT S.C) FROM R JOIN S USING (B) GROUP BY R.A",
            (("A",), Aggregate("count_distinct", ("C",))),
            (),
        ),
        (
            "SELECT R.A, MIN(S.C) FROM R JOIN S USING (B) GROUP BY R.A "
            "HAVING COUNT(*) > 1 AND (2.5 <= AVG(S.C)) AND R.A != 3 AND MAX(S.C) = -1 AND SUM(2 * S.C) < 9",
            (("A",), Aggregate("min", ("C",))),
            (
                Comparison(Aggregate(), ">", 1),
                Comparison(Aggregate("avg", ("C",)), ">=", 2.5),
                Comparison("A", "<>", 3),
                Comparison(Aggregate("max", ("C",)), "=", -1),
                Comparison(Aggregate("sum", ("C",), 2), "<", 9),
            ),
        ),
        (
            "SELECT COUNT(*) FROM R HAVING COUNT(DISTINCT R.B) >= 2",
            ((), Aggregate()),
            (Comparison(Aggregate("count_distinct", ("B",)), ">=", 2),),
        ),
    ],
)
def test_sql_forms_parse_to_the_query(sql: str, head: tuple[Any, ...], having: tuple[Comparison, ...]) -> None:
    q = parse_sql(sql, SCHEMA)
    assert (q.free, q.aggregate) == head
    assert q.having == having
    assert parse(str(q)) == q  # the rule syntax writes and reads back every form


def test_rule_syntax_forms() -> None:
    q = parse("Q(a, AVG(c)) :- R(a, b), S(b, c) HAVING MIN(c) > 0 AND COUNT(DISTINCT b) <> 2, a >= 'k'")
    assert q == Query(
        "Q",
        ("a",),
        (Atom("R", ("a", "b")), Atom("S", ("b", "c"))),
        Aggregate("avg", ("c",)),
        (
            Comparison(Aggregate("min", ("c",)), ">", 0),
            Comparison(Aggregate("count_distinct", ("b",)), "<>", 2),
            Comparison("a", ">=", "k"),
        ),
    )
    assert str(q) == "Q(a, AVG(c)) :- R(a, b), S(b, c) HAVING MIN(c) > 0, COUNT(DISTINCT b) <> 2, a >= 'k'"
    assert parse("Q(MAX(a)) :- R(a, b)").aggregate == Aggregate("max", ("a",))
    with pytest.raises(QuerySyntaxError, match="not a head"):
        parse("Q(a, MIN(c)) :- R(a, b), S(b, c) HAVING b > 1")
    with pytest.raises(QuerySyntaxError, match="compares with a constant"):
        parse("Q(a, MIN(c)) :- R(a, b), S(b, c) HAVING MIN(c) > a")
    with pytest.raises(QuerySyntaxError, match="a number, compared with a string"):
        parse("Q(a, MIN(c)) :- R(a, b), S(b, c) HAVING COUNT(*) > 'x'")
    with pytest.raises(QuerySyntaxError, match="COVAR is not a number"):
        parse("Q(a) :- R(a, b) HAVING COVAR(b) > 1")
