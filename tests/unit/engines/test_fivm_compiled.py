"""F-IVM's compiled covariance path and compact base relations (issue 24) against the references.

- ``implementation="compiled"`` (``_covar_kernel.pyx``: a batch's delta up a leaf-to-root path in C)
  against ``implementation="python"`` (ring objects) and ``"numpy"`` (the grouped array path): random
  insert/delete streams with multiplicities -3..3 (deletes to zero, counts crossing zero, a tuple
  inserted and deleted in one batch, several relations in one batch), int keys and float features,
  batches of 1 to 400, on a star, the chain R(a,b), S(b,c), T(c,d) (index joins: the numpy path
  there, compiled elsewhere), group-by covariance with free variables, a self-join and random
  queries; after every batch the result, ``enumerate()``, ``drain_delta()`` and every stored view
  (floats to 1e-9 relative), a snapshot round trip in the middle; spies assert the kernel ran;
- :class:`RowTable` (the compact base relation) against a dict under random batches: the
  consolidated deltas, the old multiplicities, the contents and their order, lookups under Python
  equality (``1.0`` and ``True`` find ``1``, ``-0.0`` finds ``0.0``, NaN and ``"1"`` find nothing),
  compaction and pickles; the engine moves a relation to a dict for good at a row the table cannot
  hold (a string, an int in a float column, ``True``, an int beyond int64, a huge multiplicity);
- int-keyed column stores: lookups with the dict's equality, the dict for good at the first new
  key of another kind;
- snapshots that load without the extension, and snapshots written by the code before this change
  (``data/fivm_covariance_7091176.pickle``: dict base relations, full-matrix column stores);
- without any compiled extension: the numpy path and dicts, the same results;
- ``stats()`` and ``explain()``: bytes per payload and per view equal the arrays' sizes.

Under ``CI=true`` a missing extension fails the tests that need it instead of skipping them.
"""

from __future__ import annotations

import math
import os
import pickle
import random
import sys
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import ivm
from ivm.engines.fivm import FIVM, base_relation, columnar
from ivm.engines.fivm import engine as fivm_engine
from ivm.query.model import Query
from ivm.rings.covariance import Covariance
from tests.unit.engines.test_fivm_columnar import check
from tests.unit.engines.test_fivm_duckdb import random_query

DATA = Path(__file__).parent / "data"
CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
BUILT = fivm_engine.Path is not None and base_relation.RowTable is not None and columnar.Int64Index is not None
needs_kernel = pytest.mark.skipif(not BUILT and not CI, reason="the compiled kernels are not built (pip install -e .)")

STAR = "Q(COVAR(a1, a2, b1, c1, c2, c3)) :- A(k, a1, a2), B(k, b1), C(k, c1, c2, c3)"
CHAIN = "Q(COVAR(a, b, c, d)) :- R(a, b), S(b, c), T(c, d)"
GROUP_BY = "Q(k, COVAR(a, b, c)) :- R(k, a), S(k, b, c)"
SELF_JOIN = "Q(b, COVAR(a, c)) :- E(a, b), E(b, c), F(c)"


def test_the_kernels_are_built_under_ci() -> None:
    """CI builds the extensions with ``pip install -e .``: a missing build must fail there, not skip."""
    if not CI and not BUILT:
        pytest.skip("not under CI and the kernels are not built")
    assert BUILT


class KernelSpy:
    """Counts the batches that went up a compiled path (``FIVM._run_path``)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.runs = 0
        run = FIVM._run_path

        def counted(engine: FIVM, *args: Any) -> bool:
            self.runs += 1
            return run(engine, *args)

        monkeypatch.setattr(FIVM, "_run_path", counted)


def updates(query: Query, rng: random.Random, n: int, domain: int = 5) -> list[ivm.Update]:
    """Inserts and deletes of live tuples: first column an int key, the others floats; multiplicities -3..3."""
    live: dict[tuple[str, tuple[Any, ...]], int] = {}
    out = []
    rels = dict(query.relations)
    for _ in range(n):
        if live and rng.random() < 0.35:
            (rel, row), m = rng.choice(sorted(live.items()))
            mult = -m if rng.random() < 0.6 else rng.choice([-2, -1, 1, 2])  # to zero, or across it
        else:
            rel = rng.choice(sorted(rels))
            row = tuple(
                rng.randrange(domain) if i == 0 else rng.choice([0.5, 1.25, -2.0, 3.0, 0.0]) for i in range(rels[rel])
            )
            mult = rng.choice([1, 1, 2, 3, -1])
        live[(rel, row)] = live.get((rel, row), 0) + mult
        if not live[(rel, row)]:
            del live[(rel, row)]
        out.append(ivm.Update(rel, row, mult))
    return out


def int_updates(query: Query, rng: random.Random, n: int) -> list[ivm.Update]:
    """:func:`updates` with every value an int (every column a possible key of a compiled path)."""
    return [ivm.Update(u.relation, tuple(int(x * 4) for x in u.row), u.mult) for u in updates(query, rng, n)]


def drained(engine: FIVM) -> dict[tuple[Any, ...], float]:
    return {k: float(d) for k, d in engine.drain_delta()}


def same_drain(a: dict[tuple[Any, ...], float], b: dict[tuple[Any, ...], float]) -> bool:
    return a.keys() == b.keys() and all(math.isclose(a[k], b[k], rel_tol=1e-9, abs_tol=1e-9) for k in a)


def run_differential(query: Query, stream: list[ivm.Update], rng: random.Random, sizes: tuple[int, ...]) -> FIVM:
    fast = FIVM(query, implementation="compiled", exact=False)
    ref = FIVM(query, implementation="python", exact=False)
    numpy_ = FIVM(query, implementation="numpy", exact=False)
    assert fast.drain_delta() == ref.drain_delta()
    start, restored = 0, False
    while start < len(stream):
        batch = stream[start : start + rng.choice(sizes)]
        start += len(batch)
        for engine in (fast, ref, numpy_):
            engine.apply(batch)
        where = f"{query} after {start}"
        check(fast, ref, True, where)
        check(numpy_, ref, True, where)
        assert same_drain(drained(fast), drained(ref)), where
        for rel in query.relations:
            assert base_relation.to_dict(fast.base[rel]) == ref.base[rel], where
        if not restored and start > len(stream) // 2:
            fast, restored = FIVM.restore(fast.snapshot()), True
            assert fast.implementation == "compiled"
    return fast


@needs_kernel
@pytest.mark.parametrize("text", [STAR, CHAIN, GROUP_BY, SELF_JOIN])
@pytest.mark.parametrize("seed", range(4))
def test_compiled_equals_python_and_numpy(text: str, seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    spy = KernelSpy(monkeypatch)
    rng = random.Random(8100 + seed)
    query = ivm.parse(text)
    stream = int_updates(query, rng, 700) if text in (CHAIN, SELF_JOIN) else updates(query, rng, 700)
    run_differential(query, stream, rng, (1, 2, 7, 40, 150, 400))
    assert spy.runs > 0, "the compiled path never ran"


@needs_kernel
@pytest.mark.parametrize("text", [STAR, GROUP_BY])
@pytest.mark.parametrize("seed", range(3))
def test_compiled_equals_python_when_the_key_index_leaves_the_direct_layout(text: str, seed: int) -> None:
    """Keys 0..49, a seventh of them moved past 2^41: the views' indexes start direct (keyed by the
    code itself) and turn to hash tables at the first far key, mid-stream, with live keys in them."""
    rng = random.Random(8200 + seed)
    query = ivm.parse(text)

    def far(row: tuple[Any, ...]) -> tuple[Any, ...]:
        return (row[0] + 2**41 if row[0] % 7 == 3 else row[0], *row[1:])

    stream = [ivm.Update(u.relation, far(u.row), u.mult) for u in updates(query, rng, 600, domain=50)]
    fast = run_differential(query, stream, rng, (1, 5, 40, 200))
    indexes = [v.store.codes for v in fast.tree.nodes() if v.store is not None and v.store.codes is not None]
    assert indexes and not all(ix.direct for ix in indexes)


@needs_kernel
@pytest.mark.parametrize("seed", range(24))
def test_compiled_equals_python_on_random_queries(seed: int) -> None:
    rng = random.Random(8300 + seed)
    query = random_query(rng, "covariance")
    run_differential(query, int_updates(query, rng, 300), rng, (1, 3, 25, 90))


@needs_kernel
def test_the_chain_runs_compiled_paths_and_the_numpy_path() -> None:
    """R(a,b), S(b,c), T(c,d): R's path is direct (compiled); S's leaf is stored and T's view joins S by an
    index: both take the numpy path, over the same stores."""
    engine = FIVM(ivm.parse(CHAIN), implementation="compiled", exact=False)
    leaves = [leaf for occurrences in engine.tree.leaves.values() for leaf in occurrences]
    assert {leaf.name: engine._compiled_path(leaf) is not None for leaf in leaves} == {
        "R": True,
        "S": False,
        "T": False,
    }


@needs_kernel
def test_housing_star_compiled_matches_a_numpy_oracle_over_many_batches() -> None:
    """Counts crossing zero per key: a key's whole group deleted and inserted again, in batches of 500."""
    rng = np.random.default_rng(4)
    query = ivm.parse(STAR)
    engine = FIVM(query, exact=False)
    assert engine.implementation == "compiled"
    width = {"A": 2, "B": 1, "C": 3}
    live: dict[tuple[str, tuple[Any, ...]], int] = {}
    for step in range(12):
        batch = []
        for rel, k in width.items():
            for key in rng.integers(0, 200, 300).tolist():
                row = (key, *np.round(rng.uniform(-5, 5, k), 2).tolist())
                m = int(rng.integers(1, 3))
                batch.append((rel, row, m))
                live[(rel, row)] = live.get((rel, row), 0) + m
        if step % 3 == 2:  # delete everything of a third of the keys
            for (rel, row), m in list(live.items()):
                if row[0] % 3 == step % 3:
                    batch.append((rel, row, -m))
                    del live[(rel, row)]
        random.Random(step).shuffle(batch)
        engine.apply(batch)
    by_key: dict[str, dict[int, list[tuple[Any, ...]]]] = {rel: {} for rel in width}
    for (rel, row), m in live.items():
        by_key[rel].setdefault(row[0], []).extend([row[1:]] * m)
    design = [
        [1.0, *a, *b, *c]
        for key in by_key["A"]
        for a in by_key["A"][key]
        for b in by_key["B"].get(key, [])
        for c in by_key["C"].get(key, [])
    ]
    M = np.array(design)
    np.testing.assert_allclose(engine.result().matrix(), M.T @ M, rtol=1e-9, atol=1e-6)


# ---------------------------------------------------------------------------------- the compact base relation
@needs_kernel
@pytest.mark.parametrize("seed", range(6))
def test_row_table_equals_a_dict(seed: int) -> None:
    rng = random.Random(seed)
    table, ref = base_relation.RowTable(3), {}
    ints = [*range(-4, 5), 2**62, -(2**63), 2**63 - 1]
    floats = [0.5, -0.0, 0.0, 1.25, -2.5, 1e300, math.inf]
    for step in range(300):
        batch = []
        for _ in range(rng.choice([1, 4, 40])):
            row = (rng.choice(ints), rng.choice(floats), rng.choice(ints))
            if ref and rng.random() < 0.4:
                row = rng.choice(list(ref))
            batch.append((row, rng.choice([-2, -1, 1, 1, 3])))
        parsed = table.parse(batch)
        assert parsed is not None
        rows, nets, olds, big = table.apply_cells(*parsed)
        net: dict[tuple[Any, ...], int] = {}
        for row, m in batch:
            net[row] = net.get(row, 0) + m
        net = {row: m for row, m in net.items() if m}
        assert nets.tolist() == list(net.values()) and olds.tolist() == [ref.get(r, 0) for r in net], step
        assert table.tuples(rows) == list(net) and not big
        for row, m in net.items():
            new = ref.get(row, 0) + m
            if new:
                ref[row] = new
            else:
                del ref[row]
        if rng.random() < 0.2:
            table.compact(force=rng.random() < 0.5)
        assert table.to_dict() == ref and list(table) == list(ref) and len(table) == len(ref), step
        probes = [*list(ref)[:4], (1, 0.5, 2), (1.0, 0.5, 2.0), (True, 0.5, 2), (Fraction(1), Fraction(1, 2), 2)]
        probes += [(1, math.nan, 2), ("1", 0.5, 2), (2**64, 0.5, 2), (1, 0.5), (0, 0.0, 0), (0, -0.0, 0)]
        assert table.get_many(probes) == [ref.get(p, 0) for p in probes], step
    restored = pickle.loads(pickle.dumps(table))
    assert restored.to_dict() == ref and list(restored) == list(ref)
    with pytest.raises(TypeError):
        table.get((1, [2], 3))  # unhashable, as a dict lookup


@needs_kernel
@pytest.mark.parametrize(
    "odd",
    [("x", 1.5), (1, 2), (True, 1.5), (2**64, 1.5), (1, math.nan)],
    ids=["string", "int-in-float-column", "bool", "beyond-int64", "nan"],
)
def test_a_row_the_table_cannot_hold_moves_the_relation_to_a_dict_for_good(odd: tuple[Any, ...]) -> None:
    query = ivm.parse("Q(COVAR(x, y)) :- R(k, x), S(k, y)")
    engine = FIVM(query, exact=False)
    ref = FIVM(query, implementation="python", exact=False)
    first = [("R", (k, 0.5 * k), 1) for k in range(20)] + [("S", (k, 1.5), 2) for k in range(0, 20, 2)]
    for e in (engine, ref):
        e.apply(first)
    assert base_relation.is_table(engine.base["R"])
    more = [("R", odd, 1), ("R", (3, 1.5), 1), ("S", (3, 0.25), -2)]
    for e in (engine, ref):
        e.apply(more)
    assert type(engine.base["R"]) is dict and base_relation.is_table(engine.base["S"])
    nan = isinstance(odd[1], float) and math.isnan(odd[1])  # (payloads with NaN equal nothing, itself included)
    assert list(engine.base["R"]) == list(ref.base["R"]) and list(engine.base["R"].values()) == list(
        ref.base["R"].values()
    )
    if not nan:
        check(engine, ref, True, str(odd))
    engine.apply([("R", (30, 2.0), 1)])
    ref.apply([("R", (30, 2.0), 1)])
    assert type(engine.base["R"]) is dict  # for good
    if not nan:
        check(engine, ref, True, "after")
    assert engine.multiplicity("R", odd) == ref.multiplicity("R", odd) == 1  # (the same NaN object: found)


@needs_kernel
def test_a_huge_multiplicity_moves_the_relation_to_a_dict() -> None:
    query = ivm.parse("Q(COVAR(x, y)) :- R(k, x), S(k, y)")
    engine = FIVM(query, exact=False)
    engine.apply([("R", (1, 0.5), 2**31), ("S", (1, 1.0), 1)])  # the largest multiplicity one update may carry
    assert base_relation.is_table(engine.base["R"])
    engine.apply([("R", (1, 0.5), 2**40)])  # beyond it: the general route, a dict
    assert type(engine.base["R"]) is dict and engine.multiplicity("R", (1, 0.5)) == 2**31 + 2**40
    engine.apply([("S", (1, 1.0), 2**31)] * 3)
    assert base_relation.is_table(engine.base["S"])
    engine.apply_deltas({"S": {(1, 1.0): 2**62 - 3 * 2**31}})  # a table's multiplicity reaching 2^62 leaves it
    assert type(engine.base["S"]) is dict and engine.multiplicity("S", (1, 1.0)) == 1 + 2**62
    assert math.isclose(engine.result().c, (2**31 + 2**40) * (1 + 2**62), rel_tol=1e-12)


@needs_kernel
def test_lookups_answer_as_the_dict_does_through_the_view_policy() -> None:
    view = ivm.maintain("Q(COVAR(x, y)) :- R(k, x), S(k, y)", engine="fivm", options={"exact": False})
    view.apply([("R", (1, 2.0), 1), ("R", (2, -0.0), 3)])
    assert base_relation.is_table(view.engine.base["R"])
    assert view.engine.multiplicities("R", [(1, 2.0), (1.0, 2), (True, 2.0), (2, 0.0), (1, 2.5), ("1", 2.0)]) == [
        1,
        1,
        1,
        3,
        0,
        0,
    ]
    outcome = view.apply([("R", (1.0, 2.0), -1), ("R", (2, 0.0), -4)])  # the second would go below zero
    assert outcome.applied == 1 and [r.kind for r in outcome.rejected] == ["negative_multiplicity"]
    assert view.engine.multiplicity("R", (1, 2.0)) == 0


# ---------------------------------------------------------------------------------- int-keyed column stores
@needs_kernel
def test_int_keyed_store_finds_equal_keys_and_moves_to_a_dict_for_a_new_kind() -> None:
    store = columnar.ColumnStore(1, np.float64, True, arity=1)
    assert store.codes is not None
    block = columnar.Block([(3,), (7,)], np.array([1.0, 2.0]), np.array([[1.0], [2.0]]), np.array([[1.0], [4.0]]))
    store.add(block)
    assert store.row_of((3.0,)) == store.row_of((3,)) >= 0 and store.row_of((True,)) == -1
    assert store.lookup([(7.0,), (7,), ("7",), (2**64,)]).tolist()[:2] == [store.row_of((7,))] * 2
    assert store.lookup([("7",), (2**64,)]).tolist() == [-1, -1]
    store.add(columnar.Block([(3.0,)], np.array([1.0]), np.array([[0.5]]), np.array([[0.25]])))  # equal to 3
    assert store.codes is not None and store.payload(store.row_of((3,))).c == 2.0
    store.add(columnar.Block([("a",)], np.array([1.0]), np.array([[0.5]]), np.array([[0.25]])))  # a new kind
    assert store.codes is None and set(store.rows) == {(3,), (7,), ("a",)}
    restored = pickle.loads(pickle.dumps(store))
    assert restored.codes is None and dict(restored.rows).keys() == {(3,), (7,), ("a",)}


# ---------------------------------------------------------------------------------- snapshots
@needs_kernel
def test_a_snapshot_loads_without_the_extensions(monkeypatch: pytest.MonkeyPatch) -> None:
    query = ivm.parse(STAR)
    rng = random.Random(3)
    stream = updates(query, rng, 400)
    engine = FIVM(query, exact=False)
    engine.apply(stream[:300])
    blob = engine.snapshot()
    for module, name in ((base_relation, "RowTable"), (columnar, "Int64Index"), (fivm_engine, "Path")):
        monkeypatch.setattr(module, name, None)
    monkeypatch.setattr(fivm_engine, "parse_batch", None)
    restored = FIVM.restore(blob)
    assert all(type(b) is dict for b in restored.base.values())
    assert all(n.store.codes is None for n in restored.tree.nodes() if n.store is not None)
    restored.apply(stream[300:])
    monkeypatch.undo()
    engine.apply(stream[300:])
    check(restored, engine, True, "restored without the extensions")
    assert {r: base_relation.to_dict(b) for r, b in engine.base.items()} == restored.base


@needs_kernel
def test_snapshots_of_the_earlier_layout_restore() -> None:
    """Snapshots written by commit 7091176 (dict base relations; column stores with full ``k × k`` matrices
    and a dict of keys): restored, their base relations compacted and their stores int-keyed, they go on
    as an engine of this code fed the same updates would."""
    sys.path.insert(0, str(DATA))
    try:
        from make_fivm_covariance_snapshots import QUERIES, stream
    finally:
        sys.path.remove(str(DATA))
    snapshots = pickle.loads((DATA / "fivm_covariance_7091176.pickle").read_bytes())
    for name, (text, exact) in QUERIES.items():
        query = ivm.parse(text)
        old = FIVM.restore(snapshots[name])
        ref = FIVM(query, implementation="python", exact=exact)
        ref.apply(stream(dict(query.relations), len(name), 300, not exact))
        assert all(base_relation.is_table(b) for b in old.base.values()), name
        assert any(n.store.codes is not None for n in old.tree.nodes() if n.store is not None), name
        check(old, ref, not exact, name)
        more = stream(dict(query.relations), 99, 150, not exact)
        for start in range(0, len(more), 30):
            old.apply(more[start : start + 30])
            ref.apply(more[start : start + 30])
            check(old, ref, not exact, f"{name} after {start}")


# ---------------------------------------------------------------------------------- no extension
@pytest.mark.parametrize("text", [STAR, CHAIN, GROUP_BY])
def test_without_any_extension_the_numpy_path_and_dicts_give_the_same(
    text: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for module, name in ((base_relation, "RowTable"), (columnar, "Int64Index"), (fivm_engine, "Path")):
        monkeypatch.setattr(module, name, None)
    monkeypatch.setattr(fivm_engine, "parse_batch", None)
    query = ivm.parse(text)
    rng = random.Random(11)
    fast = FIVM(query, exact=False)
    ref = FIVM(query, implementation="python", exact=False)
    assert fast.implementation == "numpy"
    with pytest.raises(ValueError, match="compiled"):
        FIVM(query, implementation="compiled", exact=False)
    stream = int_updates(query, rng, 400)
    for start in range(0, len(stream), 37):
        fast.apply(stream[start : start + 37])
        ref.apply(stream[start : start + 37])
        check(fast, ref, True, f"{text} after {start}")
    assert all(type(b) is dict for b in fast.base.values())
    assert all(n.store.codes is None for n in fast.tree.nodes() if n.store is not None)
    assert FIVM.restore(fast.snapshot()).result().is_close(fast.result()) if not query.free else True


@needs_kernel
def test_exact_payloads_take_the_exact_cells_with_compact_bases() -> None:
    query = ivm.parse(GROUP_BY)
    fast = FIVM(query)  # exact=True: exact cells in C (_covar_kernel.ExactPath), ints read back as ints
    ref = FIVM(query, implementation="python")
    assert fast.implementation == "compiled" and all(base_relation.is_table(b) for b in fast.base.values())
    rng = random.Random(5)
    stream = int_updates(query, rng, 300)
    for start in range(0, len(stream), 29):
        fast.apply(stream[start : start + 29])
        ref.apply(stream[start : start + 29])
        check(fast, ref, False, f"after {start}")
    for payload in fast.result().values():
        assert all(type(x) is int for x in payload.Q.ravel())


# ---------------------------------------------------------------------------------- memory reported
@needs_kernel
def test_stats_and_explain_report_the_packed_arrays() -> None:
    view = ivm.maintain(STAR, engine="fivm", options={"exact": False})
    rng = random.Random(2)
    view.apply(updates(view.query, rng, 500))
    engine = view.engine
    memory = view.explain()["memory"]
    stats = engine.stats()
    for node in engine.tree.materialized():
        store = node.store
        keys, total, per, support = engine.view_memory()[node.name]
        k = len(store.support)
        assert per == (1 + k + k * (k + 1) // 2) * 8 == stats[f"bytes_per_payload[{node.name}]"]
        assert keys == len(store) == memory[node.name]["keys"] and support == k
        arrays = store.A.nbytes + store.keycode.nbytes + store.free.nbytes + store.codes.nbytes
        assert arrays <= total == stats[f"view_bytes[{node.name}]"] <= arrays + 4096
        assert len(store.A) <= max(16, store.top + store.top // 2)  # capacity: grown by half at most
    assert stats["base_tuples"] == sum(len(b) for b in engine.base.values()) > 0
    assert stats["base_bytes"] == sum(b.nbytes for b in engine.base.values())


def test_results_are_covariance_payloads() -> None:
    engine = FIVM(ivm.parse(STAR), exact=False)
    engine.apply([("A", (1, 1.0, 2.0), 1), ("B", (1, 3.0), 2), ("C", (1, 0.5, 0.25, 4.0), 1)])
    result = engine.result()
    assert isinstance(result, Covariance) and result.c == 2.0
    assert result.matrix()[1:3, 1:3].tolist() == [[2.0, 4.0], [4.0, 8.0]]


@needs_kernel
@pytest.mark.parametrize("value", [float("nan"), "x", True])
def test_a_relation_that_leaves_its_table_after_the_path_is_compiled(value: Any) -> None:
    """A row the table cannot store (NaN, a string, a bool in a float column), arriving after the
    compiled path was built, moves its relation to a dict and the batch still propagates: the
    compiled path's column lists are arrays (a regression: ``if not value_cols`` raised on them)."""
    text = "Q(COVAR(k, a1, a2, b1)) :- A(k, a1, a2), B(k, b1)"
    seed = [("A", (k, 0.25 * k, 1.0), 1) for k in range(4)] + [("B", (1, 2.0), 1), ("B", (2, 4.0), 1)]
    batch = [("A", (1, value, 1.0), 1), ("A", (2, 0.5, 1.0), 1)]
    compiled = FIVM(ivm.parse(text), exact=False, implementation="compiled")
    python = FIVM(ivm.parse(text), exact=False, implementation="python")
    for engine in (compiled, python):
        engine.apply(seed)
    assert compiled._paths and all(p is not None for p in compiled._paths.values())
    if isinstance(value, str):  # a string feature cannot be lifted into the ring: refused by both alike
        for engine in (compiled, python):
            with pytest.raises((TypeError, ValueError)):
                engine.apply(batch)
        return
    for engine in (compiled, python):
        engine.apply(batch)
    assert not base_relation.is_table(compiled.base["A"])
    got, want = compiled.result().matrix(), python.result().matrix()
    assert np.allclose(got, want, rtol=1e-12, equal_nan=True)
    assert math.isnan(got[2, 2]) == (value != value)
