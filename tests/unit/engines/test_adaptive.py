"""The adaptive IVM^eps engine (``ivm_eps_auto``) against brute force, across mode switches.

Every update is followed by the §7.3 invariant check (which includes a
brute-force count); every switch is checked to leave the count unchanged and
equal to brute force.  Small ``skew`` factors force many promotions and
demotions on small random and skewed streams under the degree rule
(``promote="degree"``); the work rule (the default) is run beside it with a
small ``cost`` (c_p), and on a stream whose hubs meet, so that it switches too.
The work rule itself is tested in ``test_adaptive_work_rule.py``.
"""

from __future__ import annotations

import random

import pytest

import ivm
from ivm.engines import ENGINES
from ivm.engines.ivm_eps import check_invariants
from ivm.engines.ivm_eps.adaptive import IVMEpsAdaptive
from ivm.engines.ivm_eps.invariants import brute_force_triangles
from ivm.processor.data import facebook_edges
from ivm.query import parse

TRIANGLE = "Q() :- R(a,b), S(b,c), T(c,a)"
QUERIES = [TRIANGLE, "Q() :- R(a,b), S(c,b), T(c,a)", "Q() :- E(a,b), E(b,c), F(c,a)"]


def brute(engine: IVMEpsAdaptive) -> int:
    slots = [{(x, y): m for x, y, m in p.items()} for p in engine.parts]
    return sum(brute_force_triangles(slots).values())


def watch_switches(engine: IVMEpsAdaptive, log: list[tuple[int, int, list[float]]]) -> None:
    """Wrap ``_switch`` so that each switch asserts the count is unchanged and right."""
    inner = engine._switch

    def switch(slots, eps, code, detail):
        before = engine.count
        assert before == brute(engine), "count wrong just before a switch"
        inner(slots, eps, code, detail)
        assert engine.count == before, "a switch changed the count"
        log.append((before, code, engine.slot_eps()))

    engine._switch = switch  # type: ignore[method-assign]


def skewed_stream(rng: random.Random, relations: list[str], n: int, hubs: int = 1, domain: int = 40):
    """Inserts around hubs (both directions), random edges, then deletes of most hub tuples, mixed mults.
    With ``hubs > 1`` a spoke may be another hub: updates that join two hubs (the work rule's trigger)."""
    live: dict[tuple[str, tuple], int] = {}
    out = []

    def emit(rel: str, row: tuple, m: int) -> None:
        live[(rel, row)] = live.get((rel, row), 0) + m
        if not live[(rel, row)]:
            del live[(rel, row)]
        out.append((rel, row, m))

    for t in range(n):
        rel = rng.choice(relations)
        if rng.random() < 0.7:
            hub, v = rng.randrange(hubs), hubs + rng.randrange(domain)
            if hubs > 1 and rng.random() < 0.25:
                v = rng.randrange(hubs)  # a tuple that joins two hubs (or a hub to itself)
            row = (hub, v) if rng.random() < 0.5 else (v, hub)
        else:
            row = (rng.randrange(domain), rng.randrange(domain))
        emit(rel, row, rng.choice([1, 1, 1, 2, -1]) if t % 7 else 1)
    # the skew fades: delete the hub tuples, with some random churn in between
    for (rel, row), m in sorted(live.items(), key=lambda kv: rng.random()):
        if row[0] < hubs or row[1] < hubs or rng.random() < 0.7:
            emit(rel, row, -m)
        if rng.random() < 0.2:
            emit(rng.choice(relations), (rng.randrange(domain), rng.randrange(domain)), 1)
    return out


@pytest.mark.parametrize("text", QUERIES)
@pytest.mark.parametrize(("skew", "dwell"), [(0.75, 0.0), (1.0, 0.25), (1.25, 0.05)])
@pytest.mark.parametrize("promote", ["degree", "work"])
def test_brute_force_after_every_update_across_switches(text: str, skew: float, dwell: float, promote: str) -> None:
    query = parse(text)
    demotions = promoted_by_work = 0
    hubs = 1 if promote == "degree" else 2  # the work rule needs updates that join two hubs
    for seed in range(4):
        rng = random.Random(seed)
        engine = IVMEpsAdaptive(query, skew=skew, dwell=dwell, promote=promote, cost=1)
        engine.min_check = 8
        log: list = []
        watch_switches(engine, log)
        stream = skewed_stream(rng, sorted(query.relations), 260, hubs=hubs)
        for update in stream:
            engine.apply([update])
            check_invariants(engine)  # includes Q == brute force (inv. 6)
        assert engine.result() == brute(engine)
        stats = engine.stats()
        if promote == "degree":  # every seed's hub reaches the cutoff
            assert stats["promotions"] > 0, stats
            assert any(code == 1 for _, code, _ in log)
        promoted_by_work += sum(1 for _, code, _ in log if code == 4)
        assert sum(1 for _, code, _ in log if code == 2) <= stats["demotions"]
        demotions += stats["demotions"]
    assert demotions > 0, "no relation ever went back to first-order"
    assert (promoted_by_work > 0) == (promote == "work"), "the work rule never promoted (or the degree rule did so)"


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("promote", ["degree", "work"])
def test_batches_equal_one_by_one_and_snapshot(seed: int, promote: str) -> None:
    rng = random.Random(100 + seed)
    query = parse(TRIANGLE)
    stream = skewed_stream(rng, ["R", "S", "T"], 400, hubs=1 if promote == "degree" else 2)
    kw = {"skew": 1.0, "promote": promote, "cost": 1}
    batched, single = IVMEpsAdaptive(query, **kw), IVMEpsAdaptive(query, **kw)
    batched.min_check = single.min_check = 8
    i = 0
    while i < len(stream):
        size = rng.choice([1, 3, 17, 60])
        batched.apply(stream[i : i + size])
        i += size
        assert batched.result() == brute(batched)
    for update in stream:
        single.apply([update])
    assert batched.result() == single.result()
    assert batched.stats()["mode_switches"] > 0
    restored = IVMEpsAdaptive.restore(batched.snapshot())
    assert restored.result() == batched.result() and restored.slot_eps() == batched.slot_eps()
    assert restored.work == batched.work and restored.promote == promote
    restored.apply([("R", (0, 1), 1)])
    assert restored.result() == brute(restored)


@pytest.mark.slow  # ~13 s: the longest unit test (make test runs it, make test-fast does not)
def test_default_cutoff_partitions_a_hub_and_returns_when_it_fades() -> None:
    """The degree rule with its default cutoff (8·√N); the work rule does not partition this stream: a
    hub alone costs the first-order loop little (δR(0,v) walks S(v,·), a spoke's row)."""
    query = parse(TRIANGLE)
    work = IVMEpsAdaptive(query)
    engine = IVMEpsAdaptive(query, promote="degree")
    log: list = []
    watch_switches(engine, log)
    rng = random.Random(5)
    hub_tuples = [(r, (0, v), 1) for v in range(1, 3001) for r in "RST"]
    background = [(r, (rng.randrange(1, 3000), rng.randrange(1, 3000)), 1) for _ in range(3000) for r in "RST"]
    engine.apply(hub_tuples + background)
    work.apply(hub_tuples + background)
    assert work.promotions == 0 and work.result() == engine.result()
    stats = engine.stats()
    assert stats["partitioned"] == 1 and stats["eps"] == 0.5 and stats["promotions"] == 3
    assert engine.choice()["mode"] == "partitioned" and "degree" in engine.choice()["reason"]
    assert engine.result() == brute(engine)
    # delete the hub: after the dwell the relations return to first-order
    engine.apply([(r, row, -1) for r, row, _ in hub_tuples])
    engine.apply([(r, (rng.randrange(1, 3000), rng.randrange(1, 3000)), 1) for _ in range(2000) for r in "RST"])
    stats = engine.stats()
    assert stats["partitioned"] == 0 and stats["demotions"] == 3 and stats["switch_reason"] == 2
    assert engine.result() == brute(engine)
    check_invariants(engine)


def test_mild_degrees_stay_first_order() -> None:
    """A random graph (max degree far below 8·√N) never leaves first-order mode."""
    rng = random.Random(9)
    engine = IVMEpsAdaptive(parse(TRIANGLE))
    edges = {(rng.randrange(2000), rng.randrange(2000)) for _ in range(6000)}
    engine.apply([(r, e, 1) for e in edges for r in "RST"])
    engine.apply([(r, e, -1) for e in list(edges)[:3000] for r in "RST"])
    assert engine.stats()["mode_switches"] == 0 and engine.stats()["eps"] == 1.0
    assert engine.result() == brute(engine)


def test_facebook_prefix_stays_first_order_and_matches_first_order_engine() -> None:
    prefix = facebook_edges()[:5999]  # the first 6,000 lines of the file, its comment line included
    stream = [(r, row, 1) for u, v in prefix for row in ((u, v), (v, u)) for r in "RST"]
    auto = ivm.maintain(TRIANGLE)
    fo = ivm.maintain(TRIANGLE, engine="first_order")
    for view in (auto, fo):
        view.apply(stream)
        view.apply([(r, row, -1) for r, row, _ in stream[::3]])
    assert auto.result() == fo.result()
    assert auto.stats()["partitioned"] == 0


def test_planner_chooses_the_adaptive_engine_and_explain_shows_the_choice() -> None:
    assert "ivm_eps_auto" in ENGINES
    view = ivm.maintain(TRIANGLE)
    assert view.engine.name == "ivm_eps_auto"
    d = view.explain()
    assert d["engine"] == "ivm_eps_auto" and d["best_engine"] == "ivm_eps"
    assert d["choice"]["mode"] == "first_order" and d["choice"]["eps"] == {"R": 1.0, "S": 1.0, "T": 1.0}
    assert "amortized" in d["guarantee"]["update"]
    assert not any("was requested" in note for note in d["plan"]["notes"])
    # an explicit eps or engine keeps the plain IVM^eps engine
    assert ivm.maintain(TRIANGLE, engine="ivm_eps", eps=0.5).engine.name == "ivm_eps"
    # the direct self-join keeps its own engine
    assert type(ivm.maintain("Q() :- E(a,b), E(b,c), E(c,a)").engine).__name__ == "IVMEpsSelfJoin"
    assert all(isinstance(v, int | float) for v in view.stats().values())


@pytest.mark.parametrize("promote", ["degree", "work"])
def test_bulk_load_then_updates(promote: str) -> None:
    """The degree rule partitions after a bulk load when a key is over the cutoff; the work rule never
    does (the static count is preprocessing, Appendix A.3)."""
    rng = random.Random(3)
    query = parse(TRIANGLE)
    engine = IVMEpsAdaptive(query, skew=1.0, promote=promote, cost=1)
    stream = skewed_stream(rng, ["R", "S", "T"], 300, hubs=1 if promote == "degree" else 2)
    engine.bulk_load(stream[:200])
    assert engine.result() == brute(engine)
    assert engine.partitioned == (promote == "degree") and engine.work[0] == 0
    for update in stream[200:]:
        engine.apply([update])
        assert engine.result() == brute(engine)
