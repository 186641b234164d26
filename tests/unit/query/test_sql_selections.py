"""SQL selections, expressions in aggregates and COUNT(col): what the front end reads, and what it refuses.

The selections and computed attributes are per relation (:class:`ivm.query.expr.Entry`); these tests pin
the query each SQL text becomes (the atoms keep their structure, the entry holds the rest), the
three-valued logic of the condition trees, and the exact refusals of what stays outside the fragment.
"""

from __future__ import annotations

import re

import pytest

from ivm.query import expr as ex
from ivm.query.explain import explain, render_text
from ivm.query.parse import QuerySyntaxError
from ivm.query.sql import parse_sql

SCHEMA = {"R": ["A", "B"], "S": ["B", "C", "D"], "E": ["src", "dst"]}

READ = [
    ("SELECT COUNT(*) FROM R WHERE R.A > 5", "Q() :- R(A, B) | R: WHERE A > 5"),
    ("SELECT COUNT(*) FROM R WHERE 5 < R.A", "Q() :- R(A, B) | R: WHERE 5 < A"),
    ("SELECT COUNT(*) FROM R WHERE R.A BETWEEN 1 AND 3", "Q() :- R(A, B) | R: WHERE A >= 1 AND A <= 3"),
    ("SELECT COUNT(*) FROM R WHERE R.A NOT BETWEEN 1 AND 3", "Q() :- R(A, B) | R: WHERE NOT (A >= 1 AND A <= 3)"),
    ("SELECT COUNT(*) FROM R WHERE R.A IN (1, 'x')", "Q() :- R(A, B) | R: WHERE A IN (1, 'x')"),
    ("SELECT COUNT(*) FROM R WHERE R.A NOT IN (1, 2)", "Q() :- R(A, B) | R: WHERE A NOT IN (1, 2)"),
    ("SELECT COUNT(*) FROM R WHERE R.A IS NULL", "Q() :- R(A, B) | R: WHERE A IS NULL"),
    ("SELECT COUNT(*) FROM R WHERE NOT R.A IS NULL", "Q() :- R(A, B) | R: WHERE A IS NOT NULL"),
    ("SELECT COUNT(*) FROM R WHERE R.A = 1 OR R.B <> 2", "Q() :- R(A, B) | R: WHERE A = 1 OR B <> 2"),
    ("SELECT COUNT(*) FROM R WHERE NOT R.A = 1", "Q() :- R(A, B) | R: WHERE NOT A = 1"),
    ("SELECT COUNT(*) FROM R WHERE R.A + 1 = R.B * 2", "Q() :- R(A, B) | R: WHERE (A + 1) = (B * 2)"),
    # the equalities that join and fix constants stay in the atoms; the rest is R's and S's selection
    (
        "SELECT R.A, COUNT(*) FROM R JOIN S ON R.B = S.B AND S.C >= 2 WHERE S.D = 7 AND R.A < 3 GROUP BY R.A",
        "Q(A) :- R(A, B), S(B, C, 7) | R: WHERE A < 3 | S: WHERE C >= 2",
    ),
    # a selection with a constant of the atom: both hold
    ("SELECT COUNT(*) FROM R WHERE R.A = 1 AND R.B > R.A", "Q() :- R(1, B) | R: WHERE B > A"),
    # the same selection on every occurrence of a self-joined relation is the relation's
    (
        "SELECT COUNT(*) FROM E e1 JOIN E e2 ON e1.dst = e2.src WHERE e1.src > 1 AND e2.src > 1",
        "Q() :- E(src, dst), E(dst, e2_dst) | E: WHERE src > 1",
    ),
    # expressions in aggregates: computed attributes of one relation each
    ("SELECT SUM(R.A * R.B) FROM R", "Q(SUM(A * B)) :- R(A, B)"),
    ("SELECT SUM(R.A - R.B) FROM R", "Q(SUM(expr1)) :- R(A, B, expr1) | R: expr1 := (A - B)"),
    (
        "SELECT R.A, SUM(R.A * (S.C - 1)) FROM R JOIN S USING (B) GROUP BY R.A",
        "Q(A, SUM(A * expr1)) :- R(A, B), S(B, C, D, expr1) | S: expr1 := (C - 1)",
    ),
    (
        "SELECT SUM(2 * (R.A + 1) * (S.C / S.D)) FROM R JOIN S USING (B)",
        "Q(SUM(2 * expr1 * expr2)) :- R(A, B, expr1), S(B, C, D, expr2) | R: expr1 := (A + 1) | S: expr2 := (C / D)",
    ),
    ("SELECT AVG(-R.A) FROM R", "Q(AVG(expr1)) :- R(A, B, expr1) | R: expr1 := -A"),
    ("SELECT MIN(R.A % 3) FROM R", "Q(MIN(expr1)) :- R(A, B, expr1) | R: expr1 := (A % 3)"),
    (
        "SELECT R.A, MAX(S.C + S.D) FROM R JOIN S USING (B) GROUP BY R.A",
        "Q(A, MAX(expr1)) :- R(A, B), S(B, C, D, expr1) | S: expr1 := (C + D)",
    ),
    # COUNT(col): SQL counts the rows whose col is not NULL
    (
        "SELECT R.A, COUNT(S.D) FROM R JOIN S USING (B) GROUP BY R.A",
        "Q(A, SUM(count_D)) :- R(A, B), S(B, C, D, count_D) | S: count_D := CASE WHEN D IS NULL THEN 0 ELSE 1 END",
    ),
    # the same expression twice (SELECT and HAVING) is computed once
    (
        "SELECT R.A, SUM(R.B - 1) FROM R GROUP BY R.A HAVING SUM(R.B - 1) > 2",
        "Q(A, SUM(expr1)) :- R(A, B, expr1) HAVING SUM(expr1) > 2 | R: expr1 := (B - 1)",
    ),
    # a computed attribute of a self-joined relation: the other occurrence binds a variable of its own
    (
        "SELECT SUM(e1.src + 1) FROM E e1 JOIN E e2 ON e1.dst = e2.src",
        "Q(SUM(expr1)) :- E(src, dst, expr1), E(dst, e2_dst, e2_expr1) | E: expr1 := (src + 1)",
    ),
]


@pytest.mark.parametrize(("sql", "query"), READ)
def test_reads_selections_and_expressions(sql: str, query: str) -> None:
    assert str(parse_sql(sql, SCHEMA)) == query


def test_a_selection_keeps_the_structure_of_the_join() -> None:
    """The atoms of a query with selections are those of the query without them: same analysis, same plan."""
    plain = parse_sql("SELECT R.A, COUNT(*) FROM R JOIN S USING (B) GROUP BY R.A", SCHEMA)
    selected = parse_sql(
        "SELECT R.A, COUNT(*) FROM R JOIN S USING (B) WHERE S.C > 2 OR S.D IS NULL GROUP BY R.A", SCHEMA
    )
    assert selected.atoms == plain.atoms and selected.free == plain.free
    assert selected.entry and not plain.entry
    a, b = explain(plain, registered=None), explain(selected, registered=None)
    for key in ("acyclic", "free_connex", "q_hierarchical", "engine", "guarantee"):
        assert a[key] == b[key], key


def test_explain_shows_the_selection_and_the_computed_attributes() -> None:
    q = parse_sql("SELECT R.A, SUM(S.C * S.D) FROM R JOIN S USING (B) WHERE S.C BETWEEN 1 AND 3 GROUP BY R.A", SCHEMA)
    d = explain(q)
    assert d["entry"] == {"S": {"where": "C >= 1 AND C <= 3", "computed": {}}}
    text = render_text(d)
    assert "selection on S: C >= 1 AND C <= 3 (applied where S's updates enter" in text
    assert "the engine and the guarantee below are unchanged" in text
    d = explain(parse_sql("SELECT COUNT(R.B) FROM R", SCHEMA))
    assert d["entry"] == {"R": {"where": None, "computed": {"count_B": "CASE WHEN B IS NULL THEN 0 ELSE 1 END"}}}
    assert "computed attribute R.count_B := CASE WHEN B IS NULL THEN 0 ELSE 1 END" in render_text(d)


# SQL's three-valued logic: (row, condition, the value SQL gives: True, False or None for unknown)
LOGIC = [
    ((None,), "A > 1", None),
    ((None,), "NOT A > 1", None),
    ((None,), "A > 1 OR A IS NULL", True),
    ((None,), "A > 1 AND A IS NULL", None),
    ((0,), "A > 1 AND A IS NULL", False),
    ((None,), "A IN (1, 2)", None),
    ((None,), "A NOT IN (1, 2)", None),
    ((3,), "A NOT IN (1, 2)", True),
    ((2,), "A NOT IN (1, 2)", False),
    ((2,), "A BETWEEN 2 AND 2", True),
    ((None,), "A IS NOT NULL", False),
    ((7,), "A % 4 = 3", True),
    ((-7,), "A % 4 = -3", True),  # the sign of the dividend, as DuckDB's %
    ((7,), "A / 2 = 3.5", True),  # / divides as floats
    ((7,), "A / 0 IS NULL", True),  # a division by zero is NULL
    ((7,), "A % 0 IS NULL", True),
    (("b",), "A > 'a' AND A < 'c'", True),
]


@pytest.mark.parametrize(("row", "condition", "want"), LOGIC)
def test_three_valued_logic(row: tuple, condition: str, want: bool | None) -> None:
    q = parse_sql(f"SELECT COUNT(*) FROM X WHERE {condition}", {"X": ["A"]})
    (entry,) = q.entry
    assert entry.where is not None
    assert entry.where.evaluate(row) is want
    assert (entry.enter(row) is not None) is (want is True)


def test_a_value_that_does_not_fit_its_operation_is_an_error_naming_it() -> None:
    (entry,) = parse_sql("SELECT COUNT(*) FROM R WHERE R.A > 5", SCHEMA).entry
    with pytest.raises(ex.EntryError, match=r"'x' does not compare with 5 in A > 5 \(string and number\)") as error:
        entry.enter(("x", 1))
    assert error.value.kind == "not_comparable"
    (entry,) = parse_sql("SELECT SUM(R.A + 1) FROM R", SCHEMA).entry
    with pytest.raises(ex.EntryError, match=r"'x' \(A\) is not a number in \(A \+ 1\)") as error:
        entry.enter(("x", 1))
    assert error.value.kind == "not_a_number"


# (sql, the exact message without its position, the text at the reported position)
REFUSALS = [
    (
        "SELECT COUNT(*) FROM R, S WHERE R.A < S.C",
        "unsupported SQL: R.A < S.C in WHERE compares columns of R and S (a theta join: only equalities join "
        "tables; any other condition is over one table's columns)",
        "< S.C",
    ),
    (
        "SELECT COUNT(*) FROM R JOIN S ON R.B = S.B OR R.A = S.C",
        "unsupported SQL: R.B = S.B OR R.A = S.C in JOIN ... ON compares columns of R and S (a theta join: only "
        "equalities join tables; any other condition is over one table's columns)",
        "OR R.A",
    ),
    (
        "SELECT SUM(R.A + S.C) FROM R JOIN S USING (B)",
        "unsupported SQL: R.A + S.C inside SUM spans R and S (only products of expressions over one table each, "
        "SUM(f(R) * g(S)), which F-IVM lifts per relation)",
        "+ S.C",
    ),
    (
        "SELECT AVG(R.A * S.C) FROM R JOIN S USING (B)",
        "unsupported SQL: R.A * S.C inside AVG spans R and S (only an expression over one table's columns)",
        "* S.C",
    ),
    (
        "SELECT COUNT(*) FROM E e1 JOIN E e2 ON e1.dst = e2.src WHERE e1.src > 1",
        "unsupported SQL: different selections on the occurrences e1, e2 of E (a selection is applied where the "
        "relation's updates enter, so every occurrence of a relation must have the same one)",
        "> 1",
    ),
    (
        "SELECT R.A + 1, COUNT(*) FROM R GROUP BY R.A",
        "unsupported SQL: arithmetic '+' in SELECT (an expression in SELECT only inside SUM, AVG, MIN, MAX or "
        "COUNT: computed per row where updates enter)",
        "+ 1",
    ),
    (
        "SELECT COUNT(*) FROM R WHERE R.A = NULL",
        "unsupported SQL: NULL in WHERE (a comparison with NULL is never true: write IS NULL or IS NOT NULL)",
        "NULL",
    ),
    (
        "SELECT COUNT(*) FROM R WHERE R.A IN (SELECT S.B FROM S)",
        "unsupported SQL: IN in WHERE (a subquery; only IN (value, ...) with literals)",
        "IN (SELECT",
    ),
    (
        "SELECT COUNT(*) FROM R LEFT JOIN S ON R.B = S.B",
        "unsupported SQL: LEFT JOIN (outer joins are not maintained: the NULL-padded rows of the unmatched side are "
        "no join of the relations; write [INNER] JOIN, or maintain the inner join and each side's own query)",
        "LEFT JOIN",
    ),
    ("SELECT COUNT(*) FROM R WHERE 1 < 2", "unsupported SQL: 1 < 2 in WHERE (a condition without columns)", "< 2"),
    ("SELECT COUNT(*) FROM R WHERE R.A LIKE 'x%'", "unsupported SQL: LIKE in WHERE", "LIKE"),
    (
        "SELECT COUNT(*) FROM R WHERE R.A <=> 1",
        "unsupported SQL: comparison '<=>' in WHERE (only =, <>, <, <=, >, >=)",
        "<=>",
    ),
    (
        "SELECT R.A, COUNT(*) FROM R GROUP BY R.A HAVING COUNT(*) > 1 OR R.A = 2",
        "unsupported SQL: OR in HAVING (only conjunctions of comparisons)",
        "OR R.A",
    ),
    ("SELECT SUM(R.A || 'x') FROM R", "unsupported SQL: arithmetic '||' inside SUM (only +, -, *, / and %)", "|| 'x'"),
    ("SELECT SUM(R.A * 'x') FROM R", "unsupported SQL: the string 'x' inside SUM (not a number)", "'x'"),
    (
        "SELECT COUNT(*) FROM R WHERE R.A",
        "unsupported SQL: COLUMN in WHERE where a condition is expected (comparisons, "
        "BETWEEN, IN, IS NULL, combined with AND, OR, NOT)",
        "R.A",
    ),
]


@pytest.mark.parametrize(("sql", "message", "there"), REFUSALS)
def test_refusals_are_exact_and_say_where(sql: str, message: str, there: str) -> None:
    with pytest.raises(QuerySyntaxError) as error:
        parse_sql(sql, SCHEMA)
    text = str(error.value)
    found = re.fullmatch(r"(.*) at line (\d+), column (\d+)", text)
    assert found, text
    assert found[1] == message
    line, column = int(found[2]), int(found[3])
    assert sql.split("\n")[line - 1][column - 1 :].startswith(there), text
