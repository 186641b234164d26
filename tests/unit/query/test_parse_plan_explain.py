"""Parsers, the planner's choices and the explain output (dict, text and the CLI command)."""

from __future__ import annotations

import json
import random

import pytest

import ivm
from ivm.engines.qhier_compact import compact_available
from ivm.processor.commands import explain as explain_command
from ivm.query import parse
from ivm.query.explain import explain, render_text
from ivm.query.parse import QuerySyntaxError
from ivm.query.plan import plan
from tests.oracles import apply_stream, count, count_answers

SCHEMA = {"R": ["A", "B"], "S": ["B", "C"], "T": ["C", "A"]}


def test_sql_triangle_equals_rule_triangle():
    sql = parse("SELECT COUNT(*) FROM R, S, T WHERE R.B = S.B AND S.C = T.C AND T.A = R.A", SCHEMA)
    assert sql == parse("Q() :- R(A, B), S(B, C), T(C, A)")


def test_sql_group_by_sum_and_covariance():
    q = parse("SELECT R.A, SUM(2 * R.B * S.C) FROM R JOIN S ON R.B = S.B GROUP BY R.A", SCHEMA)
    assert q.free == ("A",)
    assert (q.aggregate.kind, q.aggregate.variables, q.aggregate.coefficient) == ("sum", ("B", "C"), 2)
    cov = parse("SELECT COVAR(R.A, R.B, S.C) FROM R, S WHERE R.B = S.B", SCHEMA)
    assert cov.aggregate.kind == "covariance" and cov.aggregate.variables == ("A", "B", "C")
    assert cov.aggregate.ring == "covariance ring of degree 3"


def test_sql_constants_become_selections():
    q = parse("SELECT COUNT(*) FROM R, S WHERE R.B = S.B AND S.C = 'x'", SCHEMA)
    assert q.atoms[1].constants == ((1, "x"),)
    assert q.atoms[1].matches((1, "x")) and not q.atoms[1].matches((1, "y"))


@pytest.mark.parametrize(
    ("sql", "construct"),
    [
        ("SELECT COUNT(*) FROM R WHERE R.A = 1 OR R.B = 2", "OR in WHERE"),
        ("SELECT COUNT(*) FROM R LEFT JOIN S ON R.B = S.B", "LEFT JOIN"),
        ("SELECT COUNT(*) FROM R WHERE R.A > 3", "comparison '>'"),
        ("SELECT MEDIAN(R.A) FROM R", "MEDIAN in SELECT"),
        ("SELECT COUNT(*) FROM R ORDER BY R.A", "ORDER BY"),
        ("SELECT COUNT(*) FROM (SELECT * FROM R) AS x", "SUBQUERY in FROM"),
        ("SELECT R.A, COUNT(*) FROM R GROUP BY R.A HAVING COUNT(*) > 1 OR R.A = 2", "OR in HAVING"),
        ("SELECT SUM(R.A + R.B) FROM R", "inside SUM"),
        ("SELECT COUNT(*) FROM U", "unknown relation 'U'"),
    ],
)
def test_unsupported_sql_names_the_construct(sql, construct):
    with pytest.raises(QuerySyntaxError) as error:
        parse(sql, SCHEMA)
    assert construct in str(error.value)


def test_rule_errors():
    with pytest.raises(QuerySyntaxError, match="unsupported aggregate MEDIAN"):
        parse("Q(MEDIAN(a)) :- R(a)")
    with pytest.raises(QuerySyntaxError, match="do not occur in the body"):
        parse("Q(z) :- R(a)")
    with pytest.raises(QuerySyntaxError, match="two arities"):
        parse("Q() :- R(a), R(a, b)")


QHIER_OR_FIVM = "qhier" if compact_available() else "fivm"
CHOICES = [
    ("Q() :- R(a,b), S(b,c), T(c,a)", [], "ivm_eps", "O(N^0.5) amortized", False),
    ("Q() :- E(a,b), E(b,c), E(c,a)", [], "ivm_eps", "O(N^0.5) amortized", False),
    ("Q(x,y) :- R(x,y), S(x,z), T(x)", [], "qhier", "expected O(1) (hash tables)", True),
    # measured (bench/choices.py): qhier's compact state when built, else fivm (F-IVM Thm 13)
    ("Q(x) :- R(x,y), S(x,z), T(x)", [], QHIER_OR_FIVM, "expected O(1) (hash tables)", True),
    # 002 §8 D; its atoms read as copies are a 3R^2 path (x in the first two, y in the last two): IVM^ε App. H
    ("Q() :- E(x,x), E(x,y), E(y,y)", [], "ivm_eps_3r", "O(N^0.5) amortized", False),
    (
        "Q(x1) :- R1(x1,x2), R2(x2,x3), R3(x3)",
        ["R2=insert-only", "R3=insert-only"],
        "propagation",
        "O(1) amortized",
        True,
    ),
    ("Q(x1) :- R1(x1,x2), R2(x2,x3), R3(x3)", [], "fivm", "O(N) per single-tuple update", False),
    ("Q() :- R(a), S(a,b), T(b)", [], "ivm_eps_3r", "O(N^0.5) amortized", False),  # 3R^2 path
    ("Q() :- R(a,b,c), S(b,c,d), T(a,c,d), U(a,b,d)", [], "ivm_eps_lw", "O(N^0.5) amortized", False),  # App. F
    ("Q() :- R(a), S(a,b), T(b,c), U(c)", [], "ivm_eps_path4", "O(N^0.5) amortized", False),  # App. G
    ("Q(a, c) :- R(a,b), S(b,c)", ["R=insert-only", "S=insert-only"], "fivm", "O(N) per single-tuple update", False),
]


@pytest.mark.parametrize(("text", "patterns", "engine", "update", "constant"), CHOICES)
def test_planner_choices(text, patterns, engine, update, constant):
    p = plan(parse(text), patterns, registered={})
    assert (p.best_engine, p.guarantee.update, p.constant_time) == (engine, update, constant)
    assert p.engine is None  # nothing registered: the plan says so
    assert any("cannot run here" in note for note in p.notes)


def test_core_only_q_hierarchical_is_not_planned_on_qhier():
    """002 §8 D: only the core E(x,x) is q-hierarchical; the bag count needs the query itself."""
    p = plan(parse("Q() :- E(x,x), E(x,y), E(y,y)"))
    assert p.best_engine != "qhier" and p.engine in ("fivm", "first_order_delta", "ivm_eps_3r", "ivm_eps_hybrid")
    assert not p.constant_time
    assert any("semantics='set'" in note and "expected O(1)" in note for note in p.notes)
    assert "OV" in p.guarantee.lower_bound


SELF_JOIN_EXAMPLES = [
    # 002 §8 D: E = {(1,2),(2,3)} is false, +E(3,3) true, -E(3,3) false; then on
    # E = {(1,1),(1,2),(2,2),(2,3)} the query counts 3 valuations, its core E(x,x) only 2
    (
        "Q() :- E(x,x), E(x,y), E(y,y)",
        [(1, [(1, 2), (2, 3)]), (1, [(3, 3)]), (-1, [(3, 3)]), (1, [(1, 1), (2, 2)])],
        [0, 1, 0, 3],
    ),
    # 002 §8 F: bag count 5, +E(2,2) 9, -E(1,1) 5
    (
        "Q(x,y) :- E(x,y), E(x,z), E(x,x)",
        [(1, [(1, 1), (1, 2), (2, 3), (3, 3)]), (1, [(2, 2)]), (-1, [(1, 1)])],
        [5, 9, 5],
    ),
]


@pytest.mark.parametrize(("text", "steps", "bag_counts"), SELF_JOIN_EXAMPLES)
def test_maintain_self_join_examples_match_the_oracle(text, steps, bag_counts):
    """002 §8 D and F under ``engine="auto"``: the bag count of the query itself, not of its core."""
    query = parse(text)
    view = ivm.maintain(text)
    stream: list[tuple[str, tuple[int, int], int]] = []
    present: set[tuple[int, int]] = set()

    def step(updates: list[tuple[str, tuple[int, int], int]]) -> None:
        stream.extend(updates)
        view.apply(updates)
        db, rejected = apply_stream(stream)
        assert not rejected
        expected = count_answers(query, db) if query.free else count(query, db)
        assert view.result() == expected

    for (sign, rows), bag in zip(steps, bag_counts, strict=True):
        step([("E", row, sign) for row in rows])
        present ^= set(rows)
        assert count(query, apply_stream(stream)[0]) == bag
    rng = random.Random(7)
    for _ in range(200):
        row = (rng.randint(1, 4), rng.randint(1, 4))
        step([("E", row, -1 if row in present else 1)])
        present ^= {row}


def test_planner_falls_back_to_a_registered_engine():
    from ivm.engines import ENGINES

    p = plan(parse("Q() :- R(a,b), S(b,c), T(c,a)"), registered={"first_order": ENGINES["first_order"]})
    assert (p.best_engine, p.papers_best, p.engine) == ("first_order", "ivm_eps", "first_order")
    assert p.guarantee.update == "O(N) worst-case"
    assert "not optimal" in p.guarantee.lower_bound


def test_explain_json_keys():
    d = explain("Q(x) :- E(x,y), T(y)", registered={})
    for key in ("acyclic", "free_connex", "hierarchical", "q_hierarchical", "weak_q_hierarchical", "constant_time"):
        assert isinstance(d[key], bool)
    assert set(d["guarantee"]) >= {"update", "delay", "space", "preprocessing"}
    assert d["q_hierarchical"] is False and "condition (ii)" in d["witness"]["q_hierarchical"]
    assert "engine" in d
    assert "guarantee (N = database size)" in render_text(d)


def test_cli_explain_json(capsys):
    import argparse

    parser = argparse.ArgumentParser()
    explain_command.add_parser(parser.add_subparsers())
    args = parser.parse_args(
        ["explain", "SELECT COUNT(*) FROM R, S, T WHERE R.B = S.B AND S.C = T.C AND T.A = R.A",
         "--schema", "R=A,B", "--schema", "S=B,C", "--schema", "T=C,A", "--json"]
    )  # fmt: skip
    assert explain_command.run(args) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["acyclic"] is False and d["best_engine"] == "ivm_eps"


def test_cli_explain_bad_sql_exits_2(capsys):
    from ivm.processor.cli import main

    assert main(["explain", "SELECT COUNT(*) FROM R WHERE R.A < 1", "--schema", "R=A"]) == 2
    (line,) = capsys.readouterr().err.splitlines()  # one line: the construct and where it is
    assert line.startswith("ivm explain: ") and "comparison '<'" in line and "line 1, column 34" in line
