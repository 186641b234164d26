"""The hybrid that ``engine="auto"`` runs for IVM^eps beyond the triangle (ivm/engines/ivm_eps/hybrid.py).

F-IVM while every join value's degree is below the cutoff, the IVM^eps engine of
the query's appendix once one reaches it, back when the skew fades.  Checked
against the brute-force oracle after every batch, across switches both ways.
"""

from __future__ import annotations

import math
import pickle
import random

import pytest

import ivm
from ivm.engines import ENGINES
from ivm.engines.base import EngineRefused
from ivm.engines.ivm_eps import hybrid
from ivm.engines.ivm_eps.hybrid import SkewHybrid, hot_engine_name
from ivm.query.parse import parse
from ivm.query.plan import _SKEW_CUTOFF, plan
from tests.oracles import apply_stream, count, logical_stats

QUERIES = [
    "Q() :- R(a,b), S(b,c), T(c,d)",  # 3R^2 path, private end variables
    "Q() :- R(a), S(a,b), T(b)",  # 3R^2 path
    "Q() :- E(x,x), E(x,y), E(y,y)",  # 3R^2 read as copies, repeated variables
    "Q() :- E(a,b), E(b,c), E(c,d)",  # self-join path
    "Q() :- R(a,b), S(b,c), T(c,a,5)",  # 3R^3 with a constant
    "Q() :- R(a,b,z), S(b,c,z), T(c,a,z)",  # 3R^3 with A_RST
]


def _hub_stream(query: str, seed: int, n: int = 1500) -> list[tuple[str, tuple, int]]:
    """Uniform updates on a small domain, a burst on value 0 of the first column (skew), the deletion
    of nearly everything (the skew fades), then a uniform tail with deletes on a wider domain."""
    q = parse(query)
    rnd = random.Random(seed)
    arity = dict(q.relations)
    names = sorted(arity)
    live: dict[tuple[str, tuple], int] = {}
    out = []

    def emit(rel: str, row: tuple, m: int) -> None:
        out.append((rel, row, m))
        live[(rel, row)] = live.get((rel, row), 0) + m

    for _ in range(n // 3):
        rel = rnd.choice(names)
        emit(rel, tuple(rnd.choice([rnd.randrange(12), 5]) for _ in range(arity[rel])), rnd.choice([1, 1, 2]))
    for _ in range(n // 2):
        rel = rnd.choice(names)
        emit(rel, (0, *(rnd.choice([rnd.randrange(1000), 5]) for _ in range(arity[rel] - 1))), 1)
    for (rel, row), m in list(live.items()):
        if m and rnd.random() < 0.95:
            emit(rel, row, -m)
    for _ in range(n // 2):
        rel = rnd.choice(names)
        emit(rel, tuple(rnd.randrange(30) for _ in range(arity[rel])), rnd.choice([1, 1, -1]))
    return out


@pytest.mark.parametrize("query", QUERIES)
def test_hybrid_matches_brute_force_across_switches_both_ways(query: str) -> None:
    q = parse(query)
    engine = SkewHybrid(q, skew=4.0, dwell=0.0, floor=4)
    engine.min_check = 32
    stream = _hub_stream(query, seed=len(query), n=1500 if q.self_join_free else 450)
    modes = set()
    for i in range(0, len(stream), 37):
        engine.apply(stream[i : i + 37])
        modes.add(engine.mode)
        if i % 5 == 0 or engine.mode != "fivm":
            db, _ = apply_stream(stream[: i + 37], reject_negative=False)
            assert engine.result() == count(q, db), (query, i)
    db, _ = apply_stream(stream, reject_negative=False)
    assert engine.result() == count(q, db)
    assert engine.promotions >= 1 and engine.demotions >= 1, engine.stats()
    for relation, table in db.items():
        for row, m in table.items():
            assert engine.multiplicity(relation, row) == m


def test_the_hot_engine_keeps_its_own_guarantee_and_the_cold_one_is_dropped() -> None:
    engine = SkewHybrid(parse("Q() :- R(a,b), S(b,c), T(c,d)"), skew=1.0, floor=4)
    engine.apply([("S", (1, c), 1) for c in range(40)])
    assert engine.mode == "ivm_eps_3r" and type(engine.engine).__name__ == "IVMEps3R"
    assert engine.stats()["hot"] == 1 and engine.choice()["engine"] == "ivm_eps_3r"
    assert engine.stats()["ivm_eps_3r.plan_path"] == 1


def test_no_switch_while_every_degree_is_below_the_cutoff() -> None:
    """A uniform stream: F-IVM throughout, no promotion (the degree bookkeeping is exact)."""
    q = parse("Q() :- R(a,b), S(b,c), T(c,d)")
    engine = SkewHybrid(q)
    rnd = random.Random(3)
    stream = [(r, (rnd.randrange(200), rnd.randrange(200)), 1) for _ in range(3000) for r in "RST"]
    engine.apply(stream)
    assert engine.mode == "fivm" and engine.promotions == 0
    largest = engine._max_degree()
    cutoff = max(hybrid.DEFAULT_FLOOR, math.ceil(hybrid.DEFAULT_SKEW * math.sqrt(engine.N)))
    assert largest < engine.hot_cutoff == cutoff
    db, _ = apply_stream(stream)
    by_b: dict[int, int] = {}
    for b, _c in db["S"]:
        by_b[b] = by_b.get(b, 0) + 1
    assert largest >= max(by_b.values())  # S's first column (b) is watched


def test_batch_equals_one_by_one_and_snapshot_roundtrips() -> None:
    query = "Q() :- R(a), S(a,b), T(b)"
    stream = _hub_stream(query, seed=11, n=900)
    whole = SkewHybrid(parse(query), skew=1.0, floor=4, dwell=0.0)
    single = SkewHybrid(parse(query), skew=1.0, floor=4, dwell=0.0)
    whole.apply(stream[:700])
    for u in stream[:700]:
        single.apply([u])
    assert whole.result() == single.result() and whole.mode == single.mode
    restored = SkewHybrid.restore(whole.snapshot())
    restored.apply(stream[700:])
    whole.apply(stream[700:])
    assert restored.result() == whole.result()
    assert logical_stats(pickle.loads(pickle.dumps(restored)).stats()) == logical_stats(restored.stats())


def test_auto_plans_the_hybrid_and_names_the_papers_engine() -> None:
    view = ivm.maintain("Q() :- R(a,b), S(b,c), T(c,d)")
    assert view.engine.name == "ivm_eps_hybrid"
    d = view.explain()
    assert d["best_engine"] == "ivm_eps_3r" and d["choice"]["engine"] == "fivm"
    assert "Prop. 38" in d["guarantee"]["lower_bound"]
    assert any("ivm_eps_3r" in c["choice"] for c in d["runtime_choices"])
    # an explicit eps is the hot engine's; a named engine runs alone
    assert ivm.maintain("Q() :- R(a,b), S(b,c), T(c,d)", eps=0.3).engine.eps == 0.3
    assert ivm.maintain("Q() :- R(a,b), S(b,c), T(c,d)", engine="ivm_eps_3r").engine.name == "ivm_eps_3r"


def test_the_plan_states_the_hybrids_cutoff() -> None:
    assert _SKEW_CUTOFF == (hybrid.DEFAULT_SKEW, hybrid.DEFAULT_FLOOR)
    p = plan(parse("Q() :- R(a,b), S(b,c), T(c,d)"))
    assert p.engine == "ivm_eps_hybrid" and f"max({hybrid.DEFAULT_SKEW:g}·√N" in p.guarantee.update


@pytest.mark.parametrize(
    ("query", "hot"),
    [
        ("Q() :- R(a,b), S(b,c), T(c,d)", "ivm_eps_3r"),
        ("Q() :- R(a,b), S(b,c), T(c,a,5)", "ivm_eps_3r"),
        ("Q() :- R(a), S(a,b), T(b,c), U(c)", "ivm_eps_path4"),
        ("Q() :- R(b,c,d), S(a,c,d), T(a,b,d), U(a,b,c)", "ivm_eps_lw"),
        ("Q() :- R(a,b), S(b,c), T(c,a)", "ivm_eps_3r"),  # a 3R^3 query too (auto plans ivm_eps_auto)
        ("Q() :- R(a,b), S(a,c)", None),  # q-hierarchical
        ("Q(a) :- R(a,b), S(b,c), T(c,d)", None),  # free variables
        ("Q(SUM(d)) :- R(a,b), S(b,c), T(c,d)", None),  # not a count
    ],
)
def test_hot_engine_by_shape(query: str, hot: str | None) -> None:
    assert hot_engine_name(parse(query)) == hot
    if hot is None:
        with pytest.raises(EngineRefused, match=r"none of them|it computes COUNT"):
            SkewHybrid(parse(query))


def test_registered_with_the_other_engines() -> None:
    assert ENGINES["ivm_eps_hybrid"] is SkewHybrid


@pytest.mark.parametrize(
    ("query", "best", "bound"),
    [
        ("Q() :- R(a), S(a,b), T(b,c), U(c)", "ivm_eps_path4", "Prop. 28"),
        ("Q() :- R1(b,c,d), R2(a,c,d), R3(a,b,d), R4(a,b,c)", "ivm_eps_lw", "Prop. 26"),
        ("Q() :- R(b,c,d,e), S(a,c,d,e), T(a,b,d,e), U(a,b,c,e), V(a,b,c,d)", "ivm_eps_lw", "Prop. 26"),
        ("Q() :- R(a,b), S(b,c), T(c,d)", "ivm_eps_3r", "Prop. 38"),
    ],
)
def test_explain_states_the_appendix_engine_and_its_omv_bound(query: str, best: str, bound: str) -> None:
    d = ivm.maintain(query).explain()
    assert (d["engine"], d["best_engine"]) == ("ivm_eps_hybrid", best)
    assert bound in d["guarantee"]["lower_bound"] and "OMv" in d["guarantee"]["lower_bound"]
    assert d["guarantee"]["update"].startswith("O(N^0.5) amortized")
    assert d["guarantee"]["delay"] == "O(1) answer time"
