"""SQL join forms mean what SQL says: ``parse_sql`` against DuckDB on the same data.

Each query text is run by DuckDB over random small bags (duplicates included)
and parsed by :func:`ivm.query.sql.parse_sql`, then evaluated by the
brute-force oracle of ``tests/oracles.py``; the results are compared exactly.
Refused constructs must name themselves and say where they are.
"""

from __future__ import annotations

import math
import random
import re
from collections import Counter
from typing import Any

import duckdb
import pytest

import ivm
from ivm.query.model import Query
from ivm.query.parse import QuerySyntaxError, parse
from ivm.query.sql import parse_sql
from tests.oracles import ZRelation, count_answers

SCHEMA: dict[str, list[str]] = {
    "R": ["A", "B"],
    "S": ["B", "C"],
    "T": ["C", "A"],
    "V": ["A", "B", "X"],  # shares A and B with R
    "W": ["D", "X"],  # shares nothing with R, X with V
    "E": ["src", "dst"],
}

QUERIES = [
    # comma joins with WHERE
    "SELECT COUNT(*) FROM R, S, T WHERE R.B = S.B AND S.C = T.C AND T.A = R.A",
    "SELECT R.A, SUM(R.B * S.C) FROM R, S WHERE R.B = S.B GROUP BY R.A",
    "SELECT R.A, S.C FROM R, S WHERE R.B = S.B AND S.C = 1",
    "SELECT COUNT(*) FROM R, W",
    # JOIN ... ON
    "SELECT COUNT(*) FROM R JOIN S ON R.B = S.B JOIN T ON S.C = T.C AND T.A = R.A",
    "SELECT S.C, COUNT(*) FROM R INNER JOIN S ON (R.B = S.B) GROUP BY S.C",
    "SELECT R.A, T.C FROM R JOIN T ON R.A = T.A",
    # CROSS JOIN
    "SELECT COUNT(*) FROM R CROSS JOIN S",
    "SELECT SUM(R.A * S.C) FROM R CROSS JOIN S WHERE R.B = S.B",
    # NATURAL JOIN: no shared column (a cross product, as SQL says), one, two
    "SELECT COUNT(*) FROM R NATURAL JOIN W",
    "SELECT A, D FROM R NATURAL JOIN W",
    "SELECT COUNT(*) FROM R NATURAL JOIN S",
    "SELECT B, SUM(A * C) FROM R NATURAL JOIN S GROUP BY B",
    "SELECT A, C FROM R NATURAL JOIN S",
    "SELECT COUNT(*) FROM R NATURAL JOIN V",
    "SELECT X, COUNT(*) FROM R NATURAL JOIN V GROUP BY X",
    "SELECT A, B, X FROM V NATURAL JOIN R",
    # chains of three
    "SELECT COUNT(*) FROM R NATURAL JOIN S NATURAL JOIN T",
    "SELECT A, SUM(B * C) FROM R NATURAL JOIN S NATURAL JOIN T GROUP BY A",
    "SELECT COUNT(*) FROM R NATURAL JOIN V NATURAL JOIN W",
    "SELECT COUNT(*) FROM R NATURAL JOIN W NATURAL JOIN V",
    # self-joins with aliases
    "SELECT COUNT(*) FROM E e1 NATURAL JOIN E e2",
    "SELECT COUNT(*) FROM E e1 JOIN E e2 ON e1.dst = e2.src JOIN E e3 ON e2.dst = e3.src AND e3.dst = e1.src",
    "SELECT e1.src, COUNT(*) FROM E e1 JOIN E e2 USING (src) GROUP BY e1.src",
    "SELECT src, COUNT(*) FROM E AS e1 JOIN E AS e2 USING (src) GROUP BY src",
    "SELECT COUNT(*) FROM R r1 NATURAL JOIN R r2 NATURAL JOIN S",
    "SELECT e1.src, e2.dst FROM E e1 JOIN E e2 ON e1.dst = e2.src",
    # JOIN ... USING, one and two columns
    "SELECT COUNT(*) FROM R JOIN S USING (B)",
    "SELECT B, COUNT(*) FROM R JOIN S USING (B) GROUP BY B",
    "SELECT COUNT(*) FROM R JOIN V USING (A, B)",
    "SELECT A, X FROM R JOIN V USING (A, B)",
    "SELECT SUM(X * B) FROM R JOIN V USING (A, B)",
    "SELECT COUNT(*) FROM R JOIN V USING (A)",
    "SELECT COUNT(*) FROM R INNER JOIN S USING (b)",
    # mixed forms
    "SELECT COUNT(*) FROM R NATURAL JOIN S JOIN T ON T.C = S.C, W WHERE W.D = R.A",
    "SELECT COUNT(*) FROM R, S NATURAL JOIN T",
    "SELECT COUNT(*) FROM R, S NATURAL JOIN T WHERE R.A = T.A",
    "SELECT COUNT(*) FROM R JOIN S USING (B) NATURAL JOIN T",
    "SELECT C, SUM(2 * A) FROM R JOIN S USING (B) CROSS JOIN W WHERE W.X = S.C GROUP BY C",
    "SELECT COUNT(*) FROM R JOIN S USING (B) JOIN V USING (A, B)",
    "SELECT COUNT(*) FROM R NATURAL JOIN S WHERE B = 1",
    "SELECT DISTINCT A, COUNT(*) FROM R NATURAL JOIN S GROUP BY A",
    "SELECT COUNT(*) FROM R, S JOIN T ON R.A = T.A",
    "SELECT B, C FROM R NATURAL JOIN S CROSS JOIN W WHERE W.D = 1",
    "(SELECT COUNT(*) FROM R NATURAL JOIN S)",
]


# NATURAL JOIN without a shared column is a cross product in standard SQL (and PostgreSQL,
# SQLite, MySQL); DuckDB alone refuses it and asks for CROSS JOIN, so it runs the CROSS JOIN.
FOR_DUCKDB = {
    "SELECT COUNT(*) FROM R NATURAL JOIN W": "SELECT COUNT(*) FROM R CROSS JOIN W",
    "SELECT A, D FROM R NATURAL JOIN W": "SELECT A, D FROM R CROSS JOIN W",
    "SELECT COUNT(*) FROM R NATURAL JOIN W NATURAL JOIN V": "SELECT COUNT(*) FROM R CROSS JOIN W NATURAL JOIN V",
}


def random_database(rng: random.Random, domain: int = 3) -> dict[str, list[tuple[int, ...]]]:
    """Small bags over ``range(domain)``: rows drawn with replacement, so duplicates occur."""
    db = {}
    for relation, attrs in SCHEMA.items():
        pool = [tuple(rng.randrange(domain) for _ in attrs) for _ in range(rng.randint(1, 6))]
        db[relation] = [rng.choice(pool) for _ in range(rng.randint(0, 9))]
    return db


def duckdb_connection(db: dict[str, list[tuple[int, ...]]]) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    for relation, attrs in SCHEMA.items():
        con.execute(f"CREATE TABLE {relation} ({', '.join(f'{a} INTEGER' for a in attrs)})")
        if db[relation]:
            con.executemany(f"INSERT INTO {relation} VALUES ({', '.join('?' for _ in attrs)})", db[relation])
    return con


def z_relations(db: dict[str, list[tuple[int, ...]]]) -> dict[str, ZRelation]:
    return {relation: dict(Counter(rows)) for relation, rows in db.items()}


def oracle(query: Query, db: dict[str, ZRelation]) -> dict[tuple, Any]:
    """{free values: aggregate} by brute force: the oracle's weighted full bindings, folded."""
    variables = query.variable_order()
    bindings = count_answers(query.with_free(variables), db)
    out: dict[tuple, Any] = {}
    for values, weight in bindings.items():
        binding = dict(zip(variables, values, strict=True))
        key = tuple(binding[v] for v in query.free)
        if query.aggregate.kind == "count":
            value = weight
        else:
            assert query.aggregate.kind == "sum"
            value = weight * query.aggregate.coefficient * math.prod(binding[v] for v in query.aggregate.variables)
        out[key] = out.get(key, 0) + value
    return out


def duckdb_answer(con: duckdb.DuckDBPyConnection, sql: str, query: Query) -> dict[tuple, Any]:
    """DuckDB's result in the oracle's shape ({group: aggregate}, or {row: multiplicity} for a listing)."""
    rows = con.execute(sql).fetchall()
    if not _aggregated(sql):
        return dict(Counter(rows))
    out = {}
    for *key, value in rows:
        if not query.free and (value is None or (value == 0 and query.aggregate.kind == "count")):
            continue  # an aggregate over no rows (SQL: COUNT 0, SUM NULL): the oracle has no group
        out[tuple(key)] = value
    return out


def _aggregated(sql: str) -> bool:
    return bool(re.search(r"\b(COUNT|SUM)\s*\(", sql, re.IGNORECASE))


@pytest.fixture(scope="module")
def databases() -> list[tuple[dict[str, ZRelation], duckdb.DuckDBPyConnection]]:
    """Sixteen seeded random databases, as Z-relations and loaded into DuckDB."""
    out = []
    for seed in range(16):
        db = random_database(random.Random(seed), domain=2 + seed % 2)
        out.append((z_relations(db), duckdb_connection(db)))
    return out


@pytest.mark.parametrize("sql", QUERIES)
def test_join_forms_agree_with_duckdb(
    sql: str, databases: list[tuple[dict[str, ZRelation], duckdb.DuckDBPyConnection]]
) -> None:
    query = parse_sql(sql, SCHEMA)
    for seed, (db, con) in enumerate(databases):
        expected = duckdb_answer(con, FOR_DUCKDB.get(sql, sql), query)
        assert oracle(query, db) == expected, (seed, str(query))


@pytest.mark.parametrize("sql", list(FOR_DUCKDB))
def test_natural_join_without_shared_column_is_the_cross_product_duckdb_refuses(sql: str) -> None:
    with pytest.raises(duckdb.BinderException, match="No columns found to join on in NATURAL JOIN"):
        duckdb_connection({r: [] for r in SCHEMA}).execute(sql)
    assert parse_sql(sql, SCHEMA) == parse_sql(FOR_DUCKDB[sql], SCHEMA)


def test_natural_join_is_an_equi_join_not_a_cross_product() -> None:
    # before the fix this was Q() :- R(A, B), S(S_B, C): |R|·|S|
    query = parse_sql("SELECT COUNT(*) FROM R NATURAL JOIN S", SCHEMA)
    assert query == parse("Q() :- R(A, B), S(B, C)")
    db = {"R": [(1, 2), (1, 2), (2, 3)], "S": [(2, 5), (3, 6), (4, 7)]}
    con = duckdb.connect()
    con.execute("CREATE TABLE R (A INTEGER, B INTEGER); CREATE TABLE S (B INTEGER, C INTEGER)")
    con.executemany("INSERT INTO R VALUES (?, ?)", db["R"])
    con.executemany("INSERT INTO S VALUES (?, ?)", db["S"])
    assert con.execute("SELECT COUNT(*) FROM R NATURAL JOIN S").fetchone() == (3,)
    assert oracle(query, z_relations(db)) == {(): 3}


def test_using_and_natural_merge_columns() -> None:
    assert str(parse_sql("SELECT B, COUNT(*) FROM R JOIN S USING (B) GROUP BY B", SCHEMA)) == (
        "Q(B) :- R(A, B), S(B, C)"
    )
    assert str(parse_sql("SELECT COUNT(*) FROM R JOIN V USING (A, B)", SCHEMA)) == "Q() :- R(A, B), V(A, B, X)"
    assert str(parse_sql("SELECT COUNT(*) FROM R NATURAL JOIN W", SCHEMA)) == "Q() :- R(A, B), W(D, X)"
    # a comma binds looser than JOIN: R is crossed with (S NATURAL JOIN T), its A is not T's
    assert str(parse_sql("SELECT COUNT(*) FROM R, S NATURAL JOIN T", SCHEMA)) == "Q() :- R(A, B), S(S_B, C), T(C, T_A)"


def test_parsed_join_forms_maintained_by_the_engines_agree_with_duckdb() -> None:
    rng = random.Random(5)
    for sql in [
        "SELECT COUNT(*) FROM R NATURAL JOIN S NATURAL JOIN T",
        "SELECT B, COUNT(*) FROM R JOIN S USING (B) GROUP BY B",
        "SELECT COUNT(*) FROM R JOIN V USING (A, B)",
        "SELECT src, COUNT(*) FROM E e1 JOIN E e2 USING (src) GROUP BY src",
    ]:
        query = parse_sql(sql, SCHEMA)
        db = random_database(rng)
        view = ivm.maintain(query)
        view.apply([(r, row, 1) for r in query.relations for row in db[r]])
        expected = duckdb_answer(duckdb_connection(db), sql, query)
        got = dict(view.enumerate()) if query.free else ({(): view.result()} if view.result() else {})
        assert got == expected, sql


@pytest.mark.parametrize(
    ("sql", "why"),
    [
        ("SELECT COUNT(*) FROM R CROSS JOIN V NATURAL JOIN T", "ambiguous column 'A' in NATURAL JOIN"),
        ("SELECT COUNT(*) FROM R JOIN V ON R.A = V.A NATURAL JOIN T", "ambiguous column 'A' in NATURAL JOIN"),
        ("SELECT COUNT(*) FROM R JOIN S USING (B) JOIN T USING (C) JOIN V USING (A)", "ambiguous column 'A' in USING"),
        ("SELECT COUNT(*) FROM R JOIN S USING (C)", "'C' of USING is not a column of the left side"),
        ("SELECT COUNT(*) FROM R JOIN S USING (A)", "'A' of USING is not a column of table S"),
        ("SELECT A FROM R, V WHERE R.A = V.A", "ambiguous column 'A'"),
        ("SELECT COUNT(*) FROM R JOIN S ON R.B = T.C, T", "unknown table 'T'"),
        ("SELECT COUNT(*) FROM R JOIN S", "JOIN without ON or USING"),
    ],
)
def test_join_errors_are_refused_as_duckdb_refuses_them(sql: str, why: str) -> None:
    with pytest.raises(duckdb.Error):
        duckdb_connection({r: [] for r in SCHEMA}).execute(sql)
    with pytest.raises(QuerySyntaxError, match=re.escape(why)) as error:
        parse_sql(sql, SCHEMA)
    assert re.search(r"at line \d+, column \d+$", str(error.value))


def test_unqualified_column_of_a_merged_class_is_not_ambiguous_elsewhere_it_is() -> None:
    assert parse_sql("SELECT A FROM R JOIN V USING (A)", SCHEMA).free == ("A",)
    assert parse_sql("SELECT B FROM R NATURAL JOIN S NATURAL JOIN V", SCHEMA).free == ("B",)
    # DuckDB prefers the USING column here; standard SQL calls it ambiguous: refused, never guessed
    with pytest.raises(QuerySyntaxError, match=re.escape("ambiguous column 'A': it may be R.A = V.A or T.A")):
        parse_sql("SELECT A FROM R JOIN V USING (A), T", SCHEMA)


# (sql, the construct named in the message, the text found at the reported position)
REFUSALS = [
    ("SELECT COUNT(*) FROM R LEFT JOIN S ON R.B = S.B", "LEFT JOIN", "LEFT JOIN"),
    ("SELECT COUNT(*) FROM R RIGHT OUTER JOIN S USING (B)", "RIGHT OUTER JOIN", "RIGHT OUTER"),
    ("SELECT COUNT(*) FROM R FULL JOIN S ON R.B = S.B", "FULL JOIN", "FULL"),
    ("SELECT COUNT(*) FROM R NATURAL LEFT JOIN S", "NATURAL LEFT JOIN", "NATURAL LEFT"),
    ("SELECT COUNT(*) FROM R SEMI JOIN S ON R.B = S.B", "SEMI JOIN", "SEMI"),
    ("SELECT COUNT(*) FROM (SELECT R.A FROM R) AS x", "SUBQUERY in FROM", "(SELECT"),
    ("SELECT COUNT(*) FROM R WHERE R.A IN (SELECT T.A FROM T)", "IN in WHERE", "IN (SELECT"),
    ("SELECT COUNT(*) FROM R WHERE EXISTS (SELECT T.A FROM T)", "EXISTS in WHERE", "EXISTS"),
    ("SELECT COUNT(*) FROM R WHERE R.A = (SELECT MAX(T.A) FROM T)", "SUBQUERY in WHERE", "(SELECT MAX"),
    ("SELECT DISTINCT R.A FROM R", "SELECT DISTINCT without an aggregate", "DISTINCT R.A"),
    ("SELECT R.A FROM R GROUP BY R.A", "GROUP BY without an aggregate", "GROUP BY"),
    ("SELECT COUNT(*) FROM R LIMIT 3", "LIMIT", "LIMIT 3"),
    ("SELECT COUNT(*) FROM R OFFSET 2", "OFFSET", "OFFSET 2"),
    ("SELECT R.A, COUNT(*) FROM R GROUP BY R.A ORDER BY R.A", "ORDER BY", "ORDER BY"),
    ("SELECT R.A, COUNT(*) FROM R GROUP BY R.A HAVING COUNT(*) > 1 OR R.A = 2", "OR in HAVING", "OR R.A"),
    ("SELECT R.A, COUNT(*) FROM R GROUP BY R.A HAVING NOT COUNT(*) = 1", "NOT in HAVING", "NOT COUNT"),
    ("SELECT R.A, COUNT(*) FROM R GROUP BY R.A HAVING COUNT(*) <=> 1", "'<=>' in HAVING", "<=> 1"),
    ("SELECT R.A, COUNT(*) FROM R GROUP BY R.A HAVING R.B > 1", "R.B in HAVING is not a GROUP BY column", "R.B >"),
    ("SELECT R.A, COUNT(*) FROM R GROUP BY R.A HAVING MIN(R.B) > R.A", "compared with a literal", "R.A"),
    ("SELECT R.A, COUNT(*) FROM R GROUP BY R.A HAVING COVAR(R.B) > 1", "COVAR in HAVING", "COVAR("),
    ("SELECT R.A, COUNT(*) FROM R GROUP BY R.A HAVING MEDIAN(R.B) > 1", "function MEDIAN in HAVING", "MEDIAN("),
    ("SELECT R.A, COUNT(*) FROM R GROUP BY R.A HAVING SUM(R.B) > 'x'", "compared with the string", "> 'x'"),
    ("SELECT R.A, COUNT(*) FROM R GROUP BY R.A HAVING COUNT(*) > 1 + 1", "arithmetic '+' in HAVING", "+ 1"),
    ("SELECT R.A FROM R HAVING COUNT(*) > 1", "HAVING without an aggregate in SELECT", "HAVING"),
    ("SELECT AVG(DISTINCT R.A) FROM R", "DISTINCT inside AVG", "DISTINCT R.A"),
    ("SELECT COUNT(DISTINCT R.A, R.B) FROM R", "only COUNT(DISTINCT column)", "COUNT("),
    ("SELECT COUNT(*) FROM R UNION SELECT COUNT(*) FROM S", "UNION", "UNION"),
    ("SELECT COUNT(*) FROM R INTERSECT SELECT COUNT(*) FROM S", "INTERSECT", "INTERSECT"),
    ("SELECT COUNT(*) FROM R EXCEPT SELECT COUNT(*) FROM S", "EXCEPT", "EXCEPT"),
    ("SELECT R.A, ROW_NUMBER() OVER (PARTITION BY R.B) FROM R", "window function", "OVER"),
    ("WITH x AS (SELECT R.A FROM R) SELECT COUNT(*) FROM x", "WITH (common table expressions)", "WITH x"),
    ("SELECT COUNT(*) FROM R JOIN S ON R.B <> S.B", "in JOIN ... ON compares columns of R and S", "<>"),
    ("SELECT MIN(R.A + S.C) FROM R JOIN S USING (B)", "inside MIN spans R and S", "+ S.C"),
    ("SELECT SUM(R.A + S.C) FROM R JOIN S USING (B)", "inside SUM spans R and S", "+ S.C"),
    ("SELECT COUNT(*) FROM R JOIN S USING (B) WHERE R.A = 1 OR S.C = 2", "compares columns of R and S", "OR S.C"),
    ("SELECT COUNT(*) FROM R WHERE R.A LIKE 'a%'", "LIKE in WHERE", "LIKE"),
    ("SELECT R.A * 2, COUNT(*) FROM R GROUP BY R.A", "arithmetic '*' in SELECT", "* 2"),
    ("SELECT MEDIAN(R.A) FROM R", "function MEDIAN in SELECT", "MEDIAN("),
    ("SELECT COUNT(*) FROM R WHERE R.A = ABS(R.B)", "function ABS in WHERE", "ABS("),
    ("SELECT SUM(DISTINCT R.A) FROM R", "DISTINCT inside SUM", "DISTINCT R.A"),
    ("SELECT * FROM R", "SELECT *", "*"),
    ("SELECT R.*, COUNT(*) FROM R", "R.*", "R.*"),
    ("SELECT COUNT(*) FROM R, LATERAL (SELECT 1) x", "LATERAL in FROM", "LATERAL"),
    ("SELECT COUNT(*) FROM R AS r(x, y)", "column aliases", "x, y"),
    ("SELECT COUNT(*) FROM main.R", "schema-qualified", "main.R"),
    ("SELECT COUNT(*) FROM R JOIN (S JOIN T USING (C)) USING (B)", "parenthesized join", "(S JOIN"),
    ("SELECT COUNT(*) FROM R WHERE R.A = CAST('1' AS INT)", "CAST in WHERE", "'1'"),
    ("SELECT COUNT(*) FROM R WHERE R.A = CASE WHEN R.B = 1 THEN 1 END", "CASE in WHERE", "CASE"),
    ("SELECT COUNT(*) FROM R WHERE R.A = ?", "parameter in WHERE", "?"),
    ("SELECT COUNT(*) FROM R WHERE R.A = :x", "parameter in WHERE", ":x"),
    ("SELECT COUNT(*) FROM R WHERE R.A = NULL", "NULL in WHERE", "NULL"),
    ("SELECT COUNT(*) FROM R WHERE R.A = TRUE", "TRUE in WHERE", "TRUE"),
    ("SELECT COUNT(*) FROM R GROUP BY ROLLUP (R.A)", "ROLLUP in GROUP BY", "R.A"),
    ("SELECT COUNT(*) FROM R TABLESAMPLE (10 PERCENT)", "TABLESAMPLE", "10"),
    ("SELECT COUNT(*) FROM R QUALIFY R.A = 1", "QUALIFY", "QUALIFY"),
    ("SELECT COUNT(*) FROM R WHERE R.A = R.B COLLATE nocase", "COLLATE in WHERE", "R.B COLLATE"),
    ("SELECT COUNT(*) FROM R WHERE R.A = 1 << 2", "in WHERE", "1 << 2"),  # a node kind nobody listed
    ("SELECT COUNT(*) FROM R NATURAL JOIN S ON R.B = S.B", "NATURAL JOIN with ON/USING", "NATURAL"),
    ("SELECT COUNT(*) FROM R CROSS JOIN S ON R.B = S.B", "CROSS JOIN with ON/USING", "CROSS"),
    ("SELECT COUNT(*) FROM R; SELECT COUNT(*) FROM S", "more than one statement", ";"),
    ("SELECT COUNT(*) FROM U", "unknown relation 'U'", "U"),
    ("SELECT COUNT(*) FROM R JOIN S USING (B, Z)", "'Z' of USING", "Z)"),
    ("SELECT R.A, COUNT(*) FROM R", "need GROUP BY", "R.A,"),
    ("SELECT COUNT(*) FROM R GROUP BY R.A", "GROUP BY R.A without selecting it", "R.A"),
    ("SELECT R.A, R.A FROM R", "selected twice", "R.A FROM"),
    ("SELECT COUNT(*), SUM(R.A) FROM R", "more than one aggregate", "SUM("),
    ("SELECT COUNT(*) FROM R r, R", "alias 'R' is used twice", "R"),
]


def position(message: str) -> tuple[int, int]:
    found = re.search(r"at line (\d+), column (\d+)", message)
    assert found, f"no position in {message!r}"
    return int(found[1]), int(found[2])


def text_at(sql: str, line: int, column: int) -> str:
    return sql.split("\n")[line - 1][column - 1 :]


@pytest.mark.parametrize(("sql", "construct", "there"), REFUSALS)
def test_refusals_name_the_construct_and_where_it_is(sql: str, construct: str, there: str) -> None:
    with pytest.raises(QuerySyntaxError) as error:
        parse_sql(sql, SCHEMA)
    message = str(error.value)
    assert construct in message
    line, column = position(message)
    assert text_at(sql, line, column).startswith(there), message


MULTILINE = [
    (
        "SELECT R.A, COUNT(*)\nFROM R\n  NATURAL JOIN S\n  LEFT JOIN T ON T.C = S.C\nWHERE R.A = 1\nGROUP BY R.A",
        "LEFT JOIN",
        (4, 3),
    ),
    ("SELECT COUNT(*)\nFROM R, S\nWHERE R.B = S.B\n  OR S.C = 2", "compares columns of R and S", (4, 3)),
    ("SELECT COUNT(*)\nFROM R\nWHERE R.A IN (\n    SELECT T.A FROM T)", "IN in WHERE", (3, 11)),
    ("SELECT COUNT(*)\nFROM R JOIN S USING (B, Z)", "'Z' of USING", (2, 25)),
    ("SELECT COUNT(*)\nFROM R CROSS JOIN V\n     NATURAL JOIN T", "ambiguous column 'A' in NATURAL JOIN", (3, 6)),
    ("SELECT DISTINCT\n  A\nFROM R NATURAL JOIN S", "SELECT DISTINCT", (1, 8)),
    (
        "SELECT COUNT(*)\nFROM R, S\n\tWHERE R.A = 'é' AND R.B >= S.C",
        "compares columns of R and S",
        (3, 26),
    ),  # a tab is one column
]


@pytest.mark.parametrize(("sql", "construct", "where"), MULTILINE)
def test_refusal_positions_in_multi_line_queries(sql: str, construct: str, where: tuple[int, int]) -> None:
    with pytest.raises(QuerySyntaxError) as error:
        parse_sql(sql, SCHEMA)
    assert construct in str(error.value)
    assert f"line {where[0]}, column {where[1]}" in str(error.value)


def test_the_first_refused_construct_in_the_text_is_reported() -> None:
    sql = "SELECT COUNT(*)\nFROM R LEFT JOIN S ON R.B = S.B\nWHERE R.A = 1 OR R.A = 2\nLIMIT 5"
    with pytest.raises(
        QuerySyntaxError, match=r"LEFT JOIN \(outer joins are not maintained: .*\) at line 2, column 8$"
    ):
        parse_sql(sql, SCHEMA)


def test_parse_errors_say_where() -> None:
    with pytest.raises(QuerySyntaxError, match=r"cannot parse SQL: .* at line 2, column 13"):
        parse_sql("SELECT COUNT(*)\nWHERE R.A = = 1", SCHEMA)


def test_distinct_next_to_an_aggregate_is_exact() -> None:
    sql = "SELECT DISTINCT R.A, COUNT(*) FROM R JOIN S USING (B) GROUP BY R.A"
    assert parse_sql(sql, SCHEMA) == parse_sql(sql.replace("DISTINCT ", ""), SCHEMA)
