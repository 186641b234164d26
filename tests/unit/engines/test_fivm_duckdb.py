"""F-IVM against DuckDB (an independent oracle): random queries, random insert/delete streams.

SUM/COUNT group-bys and covariance matrices over Z-relations: DuckDB stores
each relation with a multiplicity column ``m`` and evaluates
``SELECT free, SUM(m_1 * ... * m_n * coef * x * y ...) ... GROUP BY free``.
The engine's result must equal it exactly (integer inputs) after every batch.
"""

from __future__ import annotations

import random
from itertools import combinations_with_replacement

import duckdb
import pytest

import ivm
from ivm.engines.fivm import FIVM
from ivm.query.model import Aggregate, Atom, Query

VARS = "abcdef"


def random_query(rng: random.Random, kind: str) -> Query:
    n_atoms = rng.randint(2, 4)
    atoms = []
    names: dict[str, int] = {}
    for i in range(n_atoms):
        if names and rng.random() < 0.2:  # self-join
            name = rng.choice(sorted(names))
            arity = names[name]
        else:
            name, arity = f"R{i}", rng.randint(1, 3)
            names[name] = arity
        terms = tuple(rng.choice(VARS[:5]) for _ in range(arity))
        atoms.append(Atom(name, terms))
    variables = sorted({v for a in atoms for v in a.terms})
    free = tuple(sorted(rng.sample(variables, rng.randint(0, min(2, len(variables))))))
    if kind == "count":
        agg = Aggregate()
    elif kind == "sum":
        agg = Aggregate("sum", tuple(rng.choice(variables) for _ in range(rng.randint(1, 3))), rng.choice([1, 3]))
    else:
        agg = Aggregate("covariance", tuple(rng.sample(variables, min(len(variables), rng.randint(2, 4)))))
    return Query("Q", free, tuple(atoms), agg)


def random_stream(query: Query, rng: random.Random, n: int) -> list[ivm.Update]:
    live: dict[tuple[str, tuple], int] = {}
    out = []
    rels = dict(query.relations)
    for _ in range(n):
        if live and rng.random() < 0.3:
            (rel, row), m = rng.choice(sorted(live.items()))
            mult = -m if rng.random() < 0.6 else -1
        else:
            rel = rng.choice(sorted(rels))
            row = tuple(rng.randrange(4) for _ in range(rels[rel]))
            mult = rng.choice([1, 1, 2])
        live[(rel, row)] = live.get((rel, row), 0) + mult
        if not live[(rel, row)]:
            del live[(rel, row)]
        out.append(ivm.Update(rel, row, mult))
    return out


def duck_query(query: Query, select: list[str]) -> str:
    """``SELECT free..., <select> FROM atoms WHERE <joins> GROUP BY free``."""
    first: dict[str, str] = {}
    where = []
    for i, atom in enumerate(query.atoms):
        for p, v in enumerate(atom.terms):
            col = f"t{i}.c{p}"
            if v in first:
                where.append(f"{first[v]} = {col}")
            else:
                first[v] = col
    mult = " * ".join(f"t{i}.m" for i in range(len(query.atoms)))
    cols = [first[v] for v in query.free]
    exprs = [e.replace("$M", f"({mult})") for e in select]
    for v, col in first.items():
        exprs = [e.replace(f"${v}", col) for e in exprs]
    sql = f"SELECT {', '.join([*cols, *exprs])} FROM " + ", ".join(
        f"{a.relation} t{i}" for i, a in enumerate(query.atoms)
    )
    if where:
        sql += " WHERE " + " AND ".join(where)
    if cols:
        sql += " GROUP BY " + ", ".join(cols)
    return sql


def load_duckdb(query: Query, db: dict[str, dict[tuple, int]]) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    for rel, arity in query.relations.items():
        cols = ", ".join(f"c{p} BIGINT" for p in range(arity))
        con.execute(f"CREATE TABLE {rel} ({cols}, m HUGEINT)")
        rows = [(*row, m) for row, m in db.get(rel, {}).items()]
        if rows:
            con.executemany(f"INSERT INTO {rel} VALUES ({', '.join('?' * (arity + 1))})", rows)
    return con


def fold(db: dict[str, dict[tuple, int]], batch: list[ivm.Update]) -> None:
    for rel, row, m in batch:
        rows = db.setdefault(rel, {})
        rows[row] = rows.get(row, 0) + m
        if not rows[row]:
            del rows[row]


def oracle_sum(query: Query, db: dict[str, dict[tuple, int]]) -> dict[tuple, tuple[int, int]]:
    agg = query.aggregate
    factors = "".join(f" * ${v}" for v in agg.variables)
    con = load_duckdb(query, db)
    rows = con.execute(duck_query(query, ["SUM($M)", f"SUM($M{factors}) * {agg.coefficient}"])).fetchall()
    k = len(query.free)
    return {tuple(r[:k]): (int(r[k] or 0), int(r[k + 1] or 0)) for r in rows}


@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize("kind", ["count", "sum"])
def test_group_by_sum_and_count_match_duckdb(seed: int, kind: str) -> None:
    rng = random.Random(seed * 7 + (kind == "sum"))
    query = random_query(rng, kind)
    engine = FIVM(query)
    stream = random_stream(query, rng, 120)
    db: dict[str, dict[tuple, int]] = {}
    i = 0
    while i < len(stream):
        batch = stream[i : i + rng.choice([1, 3, 25])]
        i += len(batch)
        engine.apply(batch)
        fold(db, batch)
        if rng.random() < 0.5 and i < len(stream):
            continue
        expected = oracle_sum(query, db)
        counts = {k: c for k, (c, _) in expected.items() if c}
        if query.free:
            assert dict(engine.enumerate()) == counts, str(query)
            if kind == "sum":
                # SQL: a group with rows is a row, even when its SUM is 0
                assert engine.result() == {k: s for k, (c, s) in expected.items() if c}, str(query)
            else:
                assert engine.result() == counts
        else:
            c, s = expected.get((), (0, 0))
            assert engine.result() == (s if kind == "sum" else c), str(query)


@pytest.mark.parametrize("seed", range(15))
def test_covariance_matrix_matches_duckdb(seed: int) -> None:
    rng = random.Random(1000 + seed)
    query = random_query(rng, "covariance").with_free(())
    engine = FIVM(query)
    stream = random_stream(query, rng, 150)
    db: dict[str, dict[tuple, int]] = {}
    variables = query.aggregate.variables
    pairs = list(combinations_with_replacement(range(len(variables)), 2))
    select = ["SUM($M)"] + [f"SUM($M * ${v})" for v in variables]
    select += [f"SUM($M * ${variables[i]} * ${variables[j]})" for i, j in pairs]
    for start in range(0, len(stream), 30):
        batch = stream[start : start + 30]
        engine.apply(batch)
        fold(db, batch)
        row = [int(x or 0) for x in load_duckdb(query, db).execute(duck_query(query, select)).fetchone()]
        cov = engine.result()
        m = len(variables)
        assert cov.c == row[0], str(query)
        assert cov.s.tolist() == row[1 : 1 + m], str(query)
        for (i, j), value in zip(pairs, row[1 + m :], strict=True):
            assert cov.Q[i, j] == value and cov.Q[j, i] == value, str(query)


@pytest.mark.parametrize("seed", range(10))
def test_listing_matches_count_engine_and_batches(seed: int) -> None:
    """Listing ring (§6.4) and updatable subsets (μ + rebuilds) agree with the default engine."""
    rng = random.Random(500 + seed)
    query = random_query(rng, "count")
    if not query.free:
        query = query.with_free(sorted(query.variables)[:2])
    rels = sorted(query.relations)
    engines = [FIVM(query), FIVM(query, ring="listing"), FIVM(query, updatable=rels[:1])]
    stream = random_stream(query, rng, 150)
    for start in range(0, len(stream), 10):
        for e in engines:
            e.apply(stream[start : start + 10])
        expected = dict(engines[0].enumerate())
        assert dict(engines[1].enumerate()) == expected
        assert dict(engines[2].enumerate()) == expected


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("kind", ["sum", "covariance"])
def test_first_order_baseline_agrees_with_fivm(seed: int, kind: str) -> None:
    """The benchmark's 1-IVM baseline (one delta query per aggregate) computes the same results."""
    from ivm.engines.first_order.general import FirstOrderDelta

    rng = random.Random(3000 + seed)
    query = random_query(rng, kind)
    fivm, first = FIVM(query), FirstOrderDelta(query)
    stream = random_stream(query, rng, 100)
    for start in range(0, len(stream), 20):
        fivm.apply(stream[start : start + 20])
        first.apply(stream[start : start + 20])
        assert dict(first.enumerate()) == dict(fivm.enumerate()), str(query)
        if kind == "sum" or not query.free:
            assert first.result() == fivm.result(), str(query)
        else:
            assert first.result().keys() == fivm.result().keys()
            assert all(first.result()[k] == v for k, v in fivm.result().items())
