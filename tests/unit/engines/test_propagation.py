"""The propagation engine (Hu & Wang §3; 003 §3-§4) against brute force, on streams that
start insert-only or FIFO and then violate the pattern; plans, rebuilds, Ex. 2.8 flips."""

from __future__ import annotations

import random

import pytest

import ivm
from ivm.engines.propagation import PropagationEngine, choose_tree, rooted_tree
from ivm.patterns.streams import break_fifo, ex28_stream, hook_omv_stream, windowed_stream
from ivm.query.join_tree import validate_join_tree
from ivm.query.patterns import UpdatePatterns, parse_patterns
from ivm.updates import Update
from tests.oracles import apply_stream, count_answers
from tests.seeds import stable_seed

# free-connex queries of 003 §5.1 (Q3 with R5(x4,x6), the digest's reading)
QUERIES = {
    "Q1": "Q(x1,x2,x3,x4,x5,x6,x7,x8,x9) :- R1(x1,x2,x3), R2(x1,x2), R3(x1,x4), R4(x4,x5), R5(x2,x3), "
    "R6(x2,x6), R7(x3,x7), R8(x3,x8), R9(x3,x9)",
    "Q2": "Q(x2,x3) :- R1(x1,x2,x3), R2(x2,x3,x4), R3(x3,x5)",
    "Q3": "Q(x2) :- R1(x1,x2), R2(x2,x4), R3(x2,x5), R4(x1), R5(x4,x6)",
    "Q5": "Q(x1,x2,x3,x4,x5,x6) :- R1(x1,x2), R2(x1,x2,x3), R3(x2,x3,x4), R4(x2,x3,x5), R5(x4,x6)",
    "Q_hook": "Q(x1) :- R1(x1,x2), R2(x2,x3), R3(x3)",
    "Q_path": "Q() :- R1(x1), R2(x1,x2), R3(x2,x3), R4(x3,x4), R5(x4)",
    "Q_qcore": "Q(x1) :- R1(x1,x2), R2(x2)",
    "Q_hier": "Q() :- R1(x1,x2), R2(x2), R3(x1)",
    "Q_swing": "Q() :- R1(x1), R2(x1,x2), R3(x2,x3), R4(x3)",
    "TPCH": "Q(p,s) :- PART(p), PARTSUPP(p,s), SUPPLIER(s)",
    "path4": "Q(a,b,c,d,e) :- R1(a,b), R2(b,c), R3(c,d), R4(d,e)",
    "Q_cx": "Q(z,x,u) :- R1(z,x,w,a), R7(a), R6(z,x,w,p), R8(p), R3(z,q), R9(q), R2(x,u)",
}
WEAK_Q = {"Q1", "Q2", "Q3", "Q5", "Q_qcore", "Q_hier", "Q_swing", "TPCH", "path4", "Q_cx"}


def _check(engine: PropagationEngine, query: ivm.Query, applied: list) -> None:
    db, rejected = apply_stream(applied)
    assert rejected == []
    expected = count_answers(query, db)
    got = list(engine.enumerate())
    assert len(got) == len({row for row, _ in got}), "duplicate answers"
    assert dict(got) == expected
    distinct = list(engine.answers())
    assert len(distinct) == len(set(distinct)) and set(distinct) == set(expected)
    assert engine.answer() == bool(expected)


def _run(query: ivm.Query, stream: list[Update], engine: PropagationEngine, applied: list, every: int = 7) -> None:
    for k in range(0, len(stream), every):
        batch = stream[k : k + every]
        engine.apply(batch)
        applied += batch
        _check(engine, query, applied)
    assert validate_join_tree(engine.plan.tree, query) == []


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_joint_fifo_then_violated_matches_brute_force(name: str) -> None:
    query = ivm.parse(QUERIES[name])
    rng = random.Random(stable_seed(name))
    stream = windowed_stream(query, rng, 160, 5, 15)
    cut = len(stream) // 2
    stream = stream[:cut] + break_fifo(stream[cut:], rng, 0.1)
    engine = PropagationEngine(query)
    applied: list = []
    _run(query, stream[:cut], engine, applied)
    if name in WEAK_Q:  # still jointly FIFO: the O(1) plan holds, never rebuilt after the I -> F step
        assert engine.plan.constant_time and engine.plan.kind in ("mixdetect", "q-hierarchical")
    _run(query, stream[cut:], engine, applied)
    assert engine.monitor.stats()["pattern_events"] > 0


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_insert_only_then_arbitrary_with_multiplicities(name: str) -> None:
    query = ivm.parse(QUERIES[name])
    rng = random.Random(7)
    relations = dict(query.relations)
    stream = []
    live: dict = {}
    for k in range(220):
        if k > 120 and live and rng.random() < 0.4:
            (rel, row), m = rng.choice(sorted(live.items()))
            d = -rng.randint(1, m)
        else:
            rel = rng.choice(sorted(relations))
            row = tuple(rng.randrange(3) for _ in range(relations[rel]))
            d = rng.choice([1, 1, 2])
        live[(rel, row)] = live.get((rel, row), 0) + d
        if not live[(rel, row)]:
            del live[(rel, row)]
        stream.append(Update(rel, row, d))
    engine = PropagationEngine(query)
    applied: list = []
    _run(query, stream[:120], engine, applied, every=11)
    assert engine.plan.constant_time and engine.rebuilds == 0  # insert-only: every free-connex query is O(1)
    _run(query, stream[120:], engine, applied, every=5)
    assert engine.patterns.level(query.atoms[0].relation) in "IFA"


def test_violation_rebuilds_before_the_update_and_changes_the_guarantee() -> None:
    query = ivm.parse(QUERIES["Q_hier"])
    seen = []
    view = ivm.maintain(query, engine="propagation")  # inferred: starts insert-only
    view.engine.monitor.on_event = seen.append
    view.apply([("R1", (1, 2), 1), ("R2", (2,), 1), ("R3", (1,), 1), ("R1", (3, 2), 1), ("R3", (3,), 1)])
    assert view.explain()["constant_time"] is True and view.engine.plan.tree.height == 3  # Cor 1.6: any tree
    view.apply([("R1", (1, 2), -1)])  # FIFO delete: R1 I -> F, the FIFO tree of height 2 (Lemma 3.8)
    assert view.engine.rebuilds == 1 and view.engine.plan.tree.height == 2
    assert view.explain()["constant_time"] is True
    view.apply([("R3", (3,), -1)])  # R3(1) is older: R3 becomes arbitrary, (R1, R3) not jointly FIFO
    assert {(e.relations, e.after) for e in seen} >= {(("R3",), "arbitrary")}
    assert view.explain()["constant_time"] is True  # §5.2: R2 insert-only, R1 and R3 arbitrary is O(1)
    view.apply([("R2", (5,), 1), ("R2", (5,), -1)])  # R2(2) is older: R2 arbitrary too
    d = view.explain()
    assert d["constant_time"] is False and d["patterns"]["R3"] == "arbitrary"
    assert view.engine.plan.kind == "fallback"
    assert view.result() == 0
    view.apply([("R1", (1, 2), 1)])
    assert view.result() == 1
    stats = view.stats()
    assert stats["constant_time"] == 0 and stats["pattern_level.R3"] == 2 and stats["rebuilds"] >= 1


def test_declared_patterns_are_verified_and_reported() -> None:
    tpch = "Q(p,s) :- PART(p), PARTSUPP(p,s), SUPPLIER(s)"
    view = ivm.maintain(tpch, patterns=["PART=insert-only", "SUPPLIER=insert-only"])
    assert view.engine.name == "propagation"
    assert view.explain()["constant_time"] is True
    view.apply([("PART", (1,), 1), ("SUPPLIER", (2,), 1), ("PARTSUPP", (1, 2), 1), ("PARTSUPP", (1, 2), -1)])
    assert view.engine.monitor.stats()["pattern_violations_declared"] == 0  # PARTSUPP is arbitrary anyway
    view.apply([("PART", (1,), -1)])
    assert view.engine.monitor.stats()["pattern_violations_declared"] == 1
    assert view.explain()["patterns"]["PART"] == "fifo"
    assert view.explain()["constant_time"] is True  # §5.2: SUPP I, PART and PS A is still O(1)
    view.apply([("SUPPLIER", (3,), 1), ("SUPPLIER", (3,), -1)])  # not the oldest: SUPPLIER arbitrary
    assert view.explain()["patterns"]["SUPPLIER"] == "arbitrary"
    assert view.explain()["constant_time"] is False  # all arbitrary: no O(1) plan


def test_explain_pattern_aware_plan_for_insert_only() -> None:
    from ivm.query.explain import explain

    q = "Q() :- R1(x1,x2), R2(x2), R3(x1)"
    aware = explain(q, ["R1=insert-only", "R2=insert-only", "R3=insert-only"])
    oblivious = explain(q)
    assert aware["constant_time"] and aware["engine"] == "propagation"
    assert "MixDetect accepts" in aware["plan"]["why"]
    assert not oblivious["constant_time"]


@pytest.mark.parametrize(
    ("name", "sigma", "constant"),
    [
        ("TPCH", ["PART=I", "SUPPLIER=I"], True),
        ("TPCH", ["SUPPLIER=I"], True),
        ("TPCH", [], False),
        ("Q_hook", ["R2=I", "R3=I"], True),
        ("Q_hook", ["R3=I"], False),
        ("Q_qcore", ["R1+R2=fifo"], True),
        ("Q_qcore", ["R2=fifo"], False),
        ("Q_hier", ["R2=I"], True),
        ("Q_swing", ["R1+R2=fifo", "R3+R4=fifo"], True),
        ("Q_path", ["R1=I", "R2=I", "R4=I", "R5=I"], True),
    ],
)
def test_chosen_tree_is_compatible_with_the_patterns(name: str, sigma: list[str], constant: bool) -> None:
    query = ivm.parse(QUERIES[name])
    patterns = parse_patterns(sigma)
    plan = choose_tree(query, patterns)
    assert plan.constant_time is constant
    assert validate_join_tree(plan.tree, query, patterns if constant else None) == []
    if constant and plan.kind == "mixdetect":
        assert plan.tree.height <= 2 or any(patterns.level(r) == "I" for r in query.relations)


def test_deletion_only_plan() -> None:
    query = ivm.parse(QUERIES["Q_hook"])
    engine = PropagationEngine(query, deletion_only=True)
    rng = random.Random(5)
    rows = {r: {tuple(rng.randrange(4) for _ in range(k)) for _ in range(30)} for r, k in query.relations.items()}
    prefix = [Update(r, row, 1) for r in rows for row in sorted(rows[r])]
    engine.apply(prefix)
    engine.end_prefix()
    assert engine.plan.kind == "deletion-only" and engine.plan.constant_time
    deletes = [Update(u.relation, u.row, -1) for u in prefix]
    rng.shuffle(deletes)
    applied = list(prefix)
    for u in deletes[:40]:  # arbitrary order: deletion-only is not FIFO, still O(1)
        engine.apply([u])
        applied.append(u)
    _check(engine, query, applied)
    assert engine.plan.kind == "deletion-only"
    engine.apply([Update("R1", (9, 9), 1)])
    assert engine.plan.kind == "fallback" and not engine.plan.constant_time


def test_hook_omv_stream_answers_mv_and_is_jointly_fifo() -> None:
    rng = random.Random(3)
    n = 6
    matrix = [[rng.randint(0, 1) for _ in range(n)] for _ in range(n)]
    vectors = [[rng.randint(0, 1) for _ in range(n)] for _ in range(n)]
    stream, probes = hook_omv_stream(matrix, vectors)
    query = ivm.parse(QUERIES["Q_hook"])
    engine = PropagationEngine(query)
    pos = 0
    for i, p in enumerate(probes):
        engine.apply(stream[pos:p])
        pos = p
        expected = {(a + 1,) for a in range(n) if any(matrix[a][j] and vectors[i][j] for j in range(n))}
        assert set(engine.answers()) == expected
    engine.apply(stream[pos:])
    assert all(e.kind == "relation" and e.after == "fifo" for e in engine.monitor.events)  # jointly FIFO
    assert engine.plan.kind == "fallback"  # Q_hook is not weak-q-hierarchical: no O(1) plan under FIFO


def test_ex28_status_flips_tell_height_two_from_height_three() -> None:
    query = ivm.parse(QUERIES["Q_hier"])
    stream = ex28_stream(3)
    height3 = PropagationEngine(query, tree=rooted_tree(query, 1))  # R2 <- R1 <- R3 (Fig. 4)
    height2 = PropagationEngine(query, ["R1+R2+R3=fifo"])  # FIFO plan: R1 on top, R2 and R3 filters
    assert height3.plan.tree.height == 3 and height2.plan.tree.height == 2
    for u in stream:
        height3.apply([u])
        height2.apply([u])
        assert height3.answer() == height2.answer()
    assert height3.flips("R2")[0] == 3  # R2(b) turns on three times: λ = 3
    assert height2.flips("R2")[0] == 1  # a leaf: on once


def test_ex28_wide_fan_out_grows_on_height_three_only() -> None:
    query = ivm.parse("Q() :- R1(x1,x2), R2(x2,w), R3(x1)")
    work = {}
    for m in (20, 80):
        stream = ex28_stream(m, width=m)
        tall = PropagationEngine(query, tree=rooted_tree(query, 1))
        flat = PropagationEngine(query, ["R1+R2+R3=fifo"])
        tall.apply(stream)
        flat.apply(stream)
        assert tall.result() == flat.result() == 0
        work[m] = (tall.stats()["work"] / len(stream), flat.stats()["work"] / len(stream))
    assert work[80][0] > 3 * work[20][0]  # Θ(m) per update
    assert work[80][1] < 1.2 * work[20][1]  # O(1) per update


def test_snapshot_restores_plan_monitors_and_counters() -> None:
    query = ivm.parse(QUERIES["Q_hook"])
    engine = PropagationEngine(query)
    engine.apply([Update("R1", (1, 2), 1), Update("R2", (2, 3), 1), Update("R3", (3,), 1), Update("R1", (1, 2), -1)])
    restored = PropagationEngine.restore(engine.snapshot())
    assert restored.plan == engine.plan and restored.patterns == engine.patterns
    assert restored.stats()["work"] == engine.stats()["work"]
    restored.apply([Update("R1", (5, 2), 1)])
    assert dict(restored.enumerate()) == {(5,): 1}


def test_refuses_non_free_connex_and_self_joins() -> None:
    assert "free-connex" in PropagationEngine.refuses(ivm.parse("Q(a,c) :- R(a,b), S(b,c)"))
    assert PropagationEngine.refuses(ivm.parse("Q() :- R(a,b), S(b,c), T(c,a)"))
    assert "self-join" in PropagationEngine.refuses(ivm.parse("Q(a) :- E(a,b), E(b,c)"))


def test_selections_are_filters_on_the_stream() -> None:
    query = ivm.parse("Q(a) :- R(a, 5), S(a)")
    engine = PropagationEngine(query)
    engine.apply([Update("R", (1, 5), 1), Update("R", (2, 6), 1), Update("S", (1,), 1), Update("S", (2,), 1)])
    assert dict(engine.enumerate()) == {(1,): 1}
    assert engine.multiplicity("R", (2, 6)) == 1


def test_drain_delta_reports_answer_changes() -> None:
    engine = PropagationEngine(ivm.parse("Q(x1) :- R1(x1,x2), R2(x2)"))
    engine.apply([Update("R1", (1, 2), 1), Update("R2", (2,), 1)])
    assert engine.drain_delta() == [((1,), 1)]
    engine.apply([Update("R1", (3, 2), 2), Update("R1", (1, 2), -1)])
    assert sorted(engine.drain_delta()) == [((1,), -1), ((3,), 2)]
    assert engine.drain_delta() == []


def test_patterns_property_is_update_patterns() -> None:
    engine = PropagationEngine(ivm.parse(QUERIES["TPCH"]), ["PART=I"], infer=False)
    assert isinstance(engine.patterns, UpdatePatterns) and engine.patterns.level("SUPPLIER") == "A"
