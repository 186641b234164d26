"""The skew hybrid shares F-IVM's base relations while F-IVM is in force (issue 24, the line-3 target).

One copy of the base relations: F-IVM writes it (:meth:`FIVM.apply_deltas`) and hands back the old
multiplicities, from which the hybrid keeps its degrees.  Checked against a brute-force fold of
the stream: the count, every multiplicity and every degree, after each batch, on both of the
hybrid's paths (the batch path and the per-update loop, which must not write the shared copy),
across switches to the hot engine and back, and through snapshots, including one taken when both
engines kept a copy.
"""

from __future__ import annotations

import pickle
import random
from typing import Any

import pytest

from ivm.engines.fivm import FIVM
from ivm.engines.ivm_eps.hybrid import SkewHybrid
from ivm.query.parse import parse
from tests.oracles import apply_stream, count

QUERIES = ["Q() :- R1(a,b), R2(b,c), R3(c,d)", "Q() :- E(a,b), E(b,c), E(c,d)", "Q() :- R(a), S(a,b), T(b)"]


def stream_of(query: str, seed: int, n: int, hub: bool) -> list[tuple[str, tuple[Any, ...], int]]:
    """Random inserts and deletes (multiplicities 1-3, deletes of live and of absent tuples, repeats)."""
    q = parse(query)
    arity = dict(q.relations)
    names = sorted(arity)
    rng = random.Random(seed)
    out: list[tuple[str, tuple[Any, ...], int]] = []
    for _ in range(n):
        rel = rng.choice(names)
        if hub:  # value 0 in the first column, many values in the others
            row = (0, *(rng.randrange(300) for _ in range(arity[rel] - 1)))
        else:
            row = tuple(rng.randrange(9) for _ in range(arity[rel]))
        out.append((rel, row, rng.choice([1, 1, 2, 3, -1, -1, -2])))
        if rng.random() < 0.1 and out:  # the same tuple again in the batch
            out.append(out[rng.randrange(len(out))])
    return out


def degrees_of(engine: SkewHybrid, db: dict[str, dict[tuple[Any, ...], int]]) -> dict[tuple[int, int], dict]:
    """Each watched (atom, position)'s degrees by brute force: distinct live tuples per value."""
    out: dict[tuple[int, int], dict] = {}
    for relation, watched in engine.watch.items():
        for w in watched:
            column: dict[Any, int] = {}
            for row, m in db.get(relation, {}).items():
                if m:
                    column[row[w[1]]] = column.get(row[w[1]], 0) + 1
            out[w] = column
    return out


def check(engine: SkewHybrid, query: str, stream: list[tuple[str, tuple[Any, ...], int]], full: bool = True) -> None:
    db, _ = apply_stream(stream, reject_negative=False)
    if full:  # the brute-force count (nested loops) is the slow part
        assert engine.result() == count(parse(query), db)
    assert {r: t for r, t in engine.base.items() if t} == {r: t for r, t in db.items() if t}
    assert engine.degrees == degrees_of(engine, db)
    assert engine.size == sum(len(t) for t in db.values())
    if engine.mode == "fivm":
        assert engine._shared and engine.base is engine.engine.base  # one copy
    else:
        assert not engine._shared


@pytest.mark.parametrize("query", QUERIES)
@pytest.mark.parametrize("path", ["batch", "loop"])
def test_shared_base_matches_brute_force_across_switches(query: str, path: str) -> None:
    stream = stream_of(query, seed=len(query), n=900, hub=False) + stream_of(query, seed=7, n=900, hub=True)
    stream += [(rel, row, -m) for rel, row, m in stream[:900]]  # the skew fades: back to F-IVM
    engine = SkewHybrid(parse(query), skew=2.0, dwell=0.0, floor=6)
    engine.min_check = 16
    modes = []
    for i in range(0, len(stream), 50):
        batch = stream[i : i + 50]
        if path == "loop":  # a generator of list rows: the per-update loop
            engine.apply(((r, list(row), m) for r, row, m in batch))  # type: ignore[arg-type]
        else:
            engine.apply(batch)
        full = engine.mode != (modes[-1] if modes else "fivm") or i % 500 == 0
        modes.append(engine.mode)
        check(engine, query, stream[: i + 50], full)
    check(engine, query, stream)
    assert "fivm" in modes and len(set(modes)) == 2, modes
    assert engine.promotions >= 1


def test_batch_path_equals_fivm_alone() -> None:
    query = QUERIES[0]
    engine = SkewHybrid(parse(query))
    alone = FIVM(parse(query))
    stream = stream_of(query, seed=3, n=3000, hub=False)
    for i in range(0, len(stream), 200):
        engine.apply(stream[i : i + 200])
        alone.apply(stream[i : i + 200])
        assert engine.result() == alone.result()
        assert engine.engine.views() == alone.views()
    assert engine.mode == "fivm"
    check(engine, query, stream)


def test_snapshots_keep_one_copy_and_old_snapshots_share_again() -> None:
    query = QUERIES[0]
    stream = stream_of(query, seed=5, n=1200, hub=False)
    engine = SkewHybrid(parse(query))
    engine.apply(stream[:600])
    restored = SkewHybrid.restore(engine.snapshot())
    assert restored.base is restored.engine.base
    # a snapshot of the former layout: the hybrid's own copy beside F-IVM's, no ``_shared``
    old = SkewHybrid(parse(query))
    old.apply(stream[:600])
    del old.__dict__["_shared"]
    old.base = pickle.loads(pickle.dumps(old.base))
    revived = pickle.loads(pickle.dumps(old))
    assert revived._shared and revived.base is revived.engine.base
    for copy in (restored, revived):
        for i in range(600, len(stream), 100):
            copy.apply(stream[i : i + 100])
        check(copy, query, stream)


def test_distinct_delta_is_by_relation_or_declines() -> None:
    from ivm.updates import by_relation, distinct_delta

    rng = random.Random(17)
    taken = 0
    for _ in range(500):
        n = rng.randrange(0, 12)
        relations = rng.choice([["R"], ["R", "S"]])
        mults = rng.choice([[1], [-1], [3], [1, -1], [0], [True], [1, True]])
        batch = [(rng.choice(relations), (rng.randrange(30),), rng.choice(mults)) for _ in range(n)]
        got = distinct_delta(batch)
        if got is None:
            continue
        taken += 1
        want = by_relation(batch)
        assert got == want and all(type(m) is int for d in got.values() for m in d.values())
        assert [list(d) for d in got.values()] == [list(d) for d in want.values()]  # first-occurrence order
    assert taken > 50
    assert distinct_delta([("R", (1,), 1)]) is None  # by_relation's own single-update path
    assert distinct_delta(iter([("R", (1,), 1), ("R", (2,), 1)])) is None  # type: ignore[arg-type]
