"""The defaults that depend on the data were set to the measured best (issue 10, ``bench/choices.py``).

These tests pin the *rules* (their decisions on constructed queries and
batches), never timings: if a rule changes, the benchmark must be re-run and
the table in bench/README.md updated with it.  Each rule also keeps results
identical: the engines are checked against brute force across the switch.
"""

from __future__ import annotations

import inspect
import random

import pytest

import ivm
from ivm.engines import ENGINES
from ivm.engines.fivm import FIVM
from ivm.engines.qhier.compact import compact_available
from ivm.engines.qhier.engine import CONSOLIDATE_AT, CONSOLIDATE_MIN_BATCH, QHierEngine, consolidates
from ivm.query import parse
from ivm.query.explain import explain, render_text
from ivm.query.plan import plan
from ivm.updates import Update, consolidate, duplicate_rate
from tests.oracles import apply_stream, count_answers

# -- rule 1: q-hierarchical queries whose F-IVM tree is O(1): qhier's compact state, or fivm ---------------

ON_FIVM = [
    "Q() :- R(a,b), S(a,c)",
    "Q() :- R(x,y), S(x,z), T(x)",
    "Q() :- R(x,y,w), S(x,y), T(x,z)",
    "Q() :- R(a,b), R(a,c)",  # self-join, q-hierarchical itself
    "Q() :- R(a,1), S(a,c)",  # a constant
    "Q() :- R(a), S(b)",  # two components
    "Q(a) :- R(a,b), S(a,c)",  # group-by on a variable of every atom
    "Q(x) :- R(x,y), S(x,z), T(x)",
    "Q(SUM(b)) :- R(a,b), S(a,c)",
]
ON_QHIER = [
    "Q(x,y) :- R(x,y), S(x,z)",  # a free variable below a bound branch: fivm's root would list the answers
    "Q(x,y) :- R(x,y), S(x,z), T(x)",
    "Q(x,y,z) :- R(x,y,w), S(x,y), T(x,z), U(x,u)",
    "Q(x,y) :- E(x,y), E(x,z), E(x,x)",
]


@pytest.mark.parametrize("text", ON_FIVM)
def test_q_hierarchical_with_constant_view_tree_runs_on_the_measured_best(text):
    """A COUNT runs on qhier's compact state when it is built (measured faster, bench/choices.py, 2026-11-25),
    else on fivm (qhier's Python reference was measured slower); other aggregates on fivm (qhier: COUNT only)."""
    p = plan(parse(text))
    counting = "SUM" not in text
    want = "qhier" if counting and compact_available() else "fivm"
    assert (p.best_engine, p.engine) == (want, want)
    assert p.guarantee.update == "expected O(1) (hash tables)" and not p.guarantee.amortized
    assert p.guarantee.space == "O(N)" and p.constant_time
    assert "Thm 13" in p.why
    assert ("bench/choices.py" in p.why) if counting else ("qhier maintains COUNT, not SUM(b)" in p.why)


def test_without_the_compact_state_a_count_stays_on_fivm(monkeypatch):
    monkeypatch.setattr("ivm.engines.qhier.compact.compact_available", lambda: False)
    p = plan(parse("Q() :- R(a,b), S(a,c)"))
    assert p.engine == "fivm" and "not built here" in p.why


@pytest.mark.parametrize("text", ON_QHIER)
def test_other_q_hierarchical_queries_stay_on_qhier(text):
    p = plan(parse(text))
    assert (p.best_engine, p.engine) == ("qhier", "qhier")
    assert p.guarantee.update == "expected O(1) (hash tables)" and p.constant_time


@pytest.mark.parametrize("text", ON_FIVM)
def test_every_fivm_delta_is_a_primary_key_lookup(text):
    """The O(1) claim in the code: every delta rule of the tree is a DirectPlan (no index scan, no fan-out)."""
    engine = FIVM(parse(text))
    plans = [p for node in engine.tree.nodes() for p in node.plans]
    assert plans and all(p.direct is not None for p in plans)
    assert engine.stats()["update_exponent"] == 0


def test_forcing_qhier_keeps_its_guarantee():
    p = plan(parse("Q() :- R(a,b), S(a,c)"), engine="qhier")
    assert p.engine == "qhier" and p.constant_time
    assert p.guarantee.update == "expected O(1) (hash tables)"


def random_stream(query: ivm.Query, n: int, seed: int, domain: int = 4) -> list[Update]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        rel = rng.choice(sorted(query.relations))
        row = tuple(rng.randrange(domain) for _ in range(query.relations[rel]))
        out.append(Update(rel, row, rng.choice((1, 1, 2, -1))))
    return out


def expected(query: ivm.Query, updates: list[Update]) -> object:
    db, _ = apply_stream(updates, reject_negative=False)
    answers = count_answers(query, db)
    if query.free:
        return answers
    return sum(answers.values())


@pytest.mark.parametrize("text", [t for t in ON_FIVM if "SUM" not in t])
@pytest.mark.parametrize("batch", [1, 3, 50])
def test_fivm_on_q_hierarchical_matches_brute_force(text, batch):
    """Z-relations (negative multiplicities too), single updates and batches; checked after every batch."""
    query = parse(text)
    engine = FIVM(query)
    oracle = QHierEngine(query)
    stream = random_stream(query, 240, seed=len(text) + batch)
    for i in range(0, len(stream), batch):
        chunk = stream[i : i + batch]
        engine.apply(chunk)
        oracle.apply(chunk)
        want = expected(query, stream[: i + batch])
        assert engine.result() == want == oracle.result()
        assert dict(engine.enumerate()) == dict(oracle.enumerate())
    restored = FIVM.restore(engine.snapshot())
    restored.apply(stream[:5])
    engine.apply(stream[:5])
    assert restored.result() == engine.result()


def test_scalar_q_hierarchical_on_shards():
    view = ivm.maintain("Q() :- R(a,b), S(a,c)", shards=3)
    stream = random_stream(parse("Q() :- R(a,b), S(a,c)"), 300, seed=7, domain=6)
    db, _ = apply_stream(stream)
    view.apply(stream)
    assert view.result() == sum(count_answers(parse("Q() :- R(a,b), S(a,c)"), db).values())


# -- rule 2: qhier folds a batch into a Z-set when its duplicate rate reaches CONSOLIDATE_AT ----------


def batch_with_rate(rate: float, size: int = 200) -> list[Update]:
    """``size`` updates of which ``round(rate · size)`` repeat the first tuple."""
    repeats = round(rate * size)
    rows = [Update("R", (i, i), 1) for i in range(size - repeats)]
    return rows + [Update("R", (0, 0), 1 if k % 2 else -1) for k in range(repeats)]


def test_consolidation_rule_is_the_measured_crossover():
    assert (CONSOLIDATE_AT, CONSOLIDATE_MIN_BATCH) == (0.25, 16)
    assert inspect.signature(QHierEngine.__init__).parameters["consolidate"].default == "auto"
    assert consolidates(batch_with_rate(0.30))[0] is True
    assert consolidates(batch_with_rate(0.25))[0] is True
    assert consolidates(batch_with_rate(0.20))[0] is False
    assert consolidates(batch_with_rate(0.0))[0] is False
    short = [Update("R", (0, 0), 1)] * (CONSOLIDATE_MIN_BATCH - 1)
    assert consolidates(short) == (False, None)  # too short to pay for the test
    assert consolidates(batch_with_rate(0.0), "always")[0] and not consolidates(batch_with_rate(0.9), "never")[0]


def test_duplicate_rate_and_consolidate():
    batch = [Update("R", (1,), 1), Update("S", (1,), 1), Update("R", (1,), -1), Update("R", (2,), 3)]
    assert duplicate_rate(batch) == 0.25
    assert consolidate(batch) == [Update("S", (1,), 1), Update("R", (2,), 3)]


def hot_stream(query: ivm.Query, n: int, seed: int, hot: float) -> list[Update]:
    """A share ``hot`` of the updates hits four tuples, +1/-1 (and +2); the rest spread out."""
    rng = random.Random(seed)
    hot_rows = [(rel, tuple(rng.randrange(3) for _ in range(query.relations[rel]))) for rel in sorted(query.relations)]
    out = []
    for _ in range(n):
        if rng.random() < hot:
            rel, row = rng.choice(hot_rows)
            out.append(Update(rel, row, rng.choice((1, -1, 2))))
        else:
            rel = rng.choice(sorted(query.relations))
            out.append(Update(rel, tuple(rng.randrange(40) for _ in range(query.relations[rel])), 1))
    return out


@pytest.mark.parametrize("text", ["Q(x,y) :- R(x,y), S(x,z)", "Q(x,y,z) :- R(x,y,w), S(x,y), T(x,z), U(x,u)"])
@pytest.mark.parametrize("hot", [0.0, 0.5, 0.95])
def test_folding_keeps_results_deltas_and_stats(text, hot):
    query = parse(text)
    stream = hot_stream(query, 600, seed=int(hot * 100), hot=hot)
    engines = {mode: QHierEngine(query, consolidate=mode) for mode in ("never", "always", "auto")}
    mirrors: dict[str, dict] = {mode: {} for mode in engines}
    for e in engines.values():
        e.drain_delta()
    for i in range(0, len(stream), 100):
        chunk = stream[i : i + 100]
        for mode, e in engines.items():
            e.apply(chunk)
            for row, d in e.drain_delta():
                mirrors[mode][row] = mirrors[mode].get(row, 0) + d
                if not mirrors[mode][row]:
                    del mirrors[mode][row]
        want = expected(query, stream[: i + 100])
        for mode, e in engines.items():
            assert dict(e.enumerate()) == want == mirrors[mode], mode
    stats = {mode: e.stats() for mode, e in engines.items()}
    assert len({s["updates_applied"] for s in stats.values()}) == 1
    assert stats["never"]["batches_folded"] == 0 and stats["always"]["batches_folded"] == 6
    folded = stats["auto"]["batches_folded"]
    assert folded == (6 if hot >= 0.5 else 0)  # ~0.47 and ~0.93 duplicate rates vs ~0.2 for hot=0
    choice = engines["auto"].choice()
    assert choice["consolidate"] == "auto" and choice["batches_folded"] == folded
    restored = QHierEngine.restore(engines["auto"].snapshot())
    assert restored.consolidate == "auto" and restored.stats() == engines["auto"].stats()


def test_view_explain_reports_the_live_folding_decision():
    view = ivm.maintain("Q(x,y) :- R(x,y), S(x,z)")
    assert view.engine.name == "qhier"
    view.apply([("R", (1, 2), 1), ("R", (1, 2), -1)] * 10 + [("S", (1, 3), 1)])
    choice = view.explain()["choice"]
    assert choice["batches_folded"] == 1 and choice["last_duplicate_rate"] == pytest.approx(19 / 21, abs=1e-3)


# -- rule 3: F-IVM materializes for every relation (all updatable) -------------------------------


def test_fivm_default_materialization_is_all_updatable():
    """Measured: declaring R and T static wins only while they never change (bench/choices.py, materialize)."""
    assert inspect.signature(FIVM.__init__).parameters["updatable"].default is None
    engine = FIVM(parse("Q() :- R(a,b), S(b,c), T(c,d)"))
    assert engine.updatable == {"R", "S", "T"}
    five_path = parse("Q() :- R(a,b), S(b,c), T(c,d), U(d,e), V(e,f)")
    assert plan(five_path).engine == "fivm" and not plan(five_path).runtime  # a static choice: nothing at run time


# -- ivm explain: which statistics decide the run-time choices --------------------------------------


def test_explain_states_the_runtime_rules():
    triangle = explain("Q() :- R(a,b), S(b,c), T(c,a)")
    (rule,) = triangle["runtime_choices"]
    assert "degree" in rule["statistic"] and "√N" in rule["statistic"]
    assert "8·√N" in rule["rule"] and "eps = 0.5" in rule["rule"]
    text = render_text(triangle)
    assert "decided at run time, from the data:" in text and "8·√N" in text
    (fold,) = explain("Q(x,y) :- R(x,y), S(x,z)")["runtime_choices"]
    assert "duplicate rate" in fold["statistic"] and "25%" in fold["rule"]
    assert explain("Q(SUM(b)) :- R(a,b), S(a,c)")["runtime_choices"] == []
    (tree,) = explain("Q(x1) :- R1(x1,x2), R2(x2,x3), R3(x3)", ["R2=insert-only", "R3=insert-only"])["runtime_choices"]
    assert "update pattern" in tree["statistic"]


def test_every_engine_describes_its_runtime_choices():
    for cls in ENGINES.values():
        for c in cls.runtime_choices(parse("Q() :- R(a,b), S(b,c), T(c,a)")):
            assert set(c) == {"choice", "statistic", "rule"}
