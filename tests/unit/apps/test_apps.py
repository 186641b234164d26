"""Applications (F-IVM §6): regression vs numpy least squares on the join, Chow-Liu vs brute force,
mutual information of T6, matrix chains vs numpy (T11)."""

from __future__ import annotations

import itertools
import math
import random
from collections import Counter

import numpy as np
import pytest

import ivm
from ivm.apps import ChowLiuTree, LinearRegression, MatrixChain, mutual_information
from ivm.engines.fivm import FIVM

QUERY = "Q(COVAR(x1, x2, y1, y2, z)) :- R(k, x1, x2), S(k, j, y1, y2), T(j, z)"
VARIABLES = ("x1", "x2", "y1", "y2", "z")


def stream(rng: random.Random, n: int) -> list[ivm.Update]:
    live: list[ivm.Update] = []
    out = []
    for _ in range(n):
        if live and rng.random() < 0.25:
            u = live.pop(rng.randrange(len(live)))
            out.append(ivm.Update(u.relation, u.row, -u.mult))
            continue
        rel = rng.choice("RST")
        if rel == "R":
            row = (rng.randrange(4), rng.randint(-5, 5), rng.randint(0, 9))
        elif rel == "S":
            row = (rng.randrange(4), rng.randrange(3), rng.randint(-3, 3), rng.randint(0, 20))
        else:
            row = (rng.randrange(3), rng.randint(-9, 9))
        u = ivm.Update(rel, row, 1)
        live.append(u)
        out.append(u)
    return out


def join_rows(db: dict[str, Counter]) -> list[tuple[int, ...]]:
    """The join's tuples (x1, x2, y1, y2, z) with bag multiplicity, by brute force."""
    rows = []
    for (k, x1, x2), m1 in db["R"].items():
        for (k2, j, y1, y2), m2 in db["S"].items():
            for (j2, z), m3 in db["T"].items():
                if k == k2 and j == j2:
                    rows += [(x1, x2, y1, y2, z)] * (m1 * m2 * m3)
    return rows


def fold(db: dict[str, Counter], batch: list[ivm.Update]) -> None:
    for rel, row, m in batch:
        db[rel][row] += m


def test_regression_matches_numpy_least_squares_after_every_batch() -> None:
    rng = random.Random(4)
    engine = FIVM(ivm.parse(QUERY))
    closed = LinearRegression(engine, VARIABLES, label="y2")
    bgd = LinearRegression(engine, VARIABLES, label="y2", method="gradient_descent", tol=1e-12)
    db = {r: Counter() for r in "RST"}
    checked = 0
    updates = stream(rng, 400)
    for start in range(0, len(updates), 40):
        batch = updates[start : start + 40]
        engine.apply(batch)
        fold(db, batch)
        rows = np.array(join_rows(db), dtype=float)
        a, b = closed.update(), bgd.update()
        if len(rows) < 12:
            continue
        X = np.column_stack([np.ones(len(rows)), rows[:, [0, 1, 2, 4]]])
        if np.linalg.matrix_rank(X) < X.shape[1]:
            continue
        theta = np.linalg.lstsq(X, rows[:, 3], rcond=None)[0]
        assert (a["method"], a["converged"]) == ("closed_form", True)
        assert (b["method"], b["converged"]) == ("gradient_descent", True)
        assert b["gradient_norm"] <= 1e-12
        for model in (a, b):
            got = [model["intercept"], *model["coefficients"].values()]
            assert np.allclose(got, theta, rtol=1e-6, atol=1e-6), (model, theta)
        checked += 1
    assert checked >= 5


def test_gradient_descent_resumes_from_previous_parameters() -> None:
    rng = random.Random(9)
    engine = FIVM(ivm.parse(QUERY))
    updates = stream(rng, 600)
    engine.apply(updates[:500])
    warm = LinearRegression(engine, VARIABLES, label="y2", method="gradient_descent", tol=1e-10)
    warm.update()
    engine.apply(updates[500:505])
    warm.update()
    scratch = LinearRegression(engine, VARIABLES, label="y2", method="gradient_descent", tol=1e-10)
    scratch.update()
    assert warm.iterations < scratch.iterations
    assert np.allclose(list(warm.model()["coefficients"].values()), list(scratch.model()["coefficients"].values()))


def test_gradient_descent_at_its_cap_reports_it_is_not_converged() -> None:
    rng = random.Random(5)
    engine = FIVM(ivm.parse(QUERY))
    engine.apply(stream(rng, 300))
    capped = LinearRegression(engine, VARIABLES, label="y2", method="gradient_descent", tol=1e-14, max_iter=3)
    model = capped.update()
    assert (model["converged"], model["iterations"], model["max_iterations"]) == (False, 3, 3)
    assert model["gradient_norm"] > 1e-14
    assert LinearRegression(engine, VARIABLES, label="y2").update()["method"] == "closed_form"


def mi_brute(rows: list[tuple], i: int, j: int) -> float:
    n = len(rows)
    cx, cy = Counter(r[i] for r in rows), Counter(r[j] for r in rows)
    cxy = Counter((r[i], r[j]) for r in rows)
    return sum(c / n * math.log(n * c / (cx[x] * cy[y])) for (x, y), c in cxy.items())


def max_spanning_weight(variables: tuple[str, ...], w: dict[tuple[str, str], float]) -> float:
    """Brute force: the best weight over all spanning trees (Prüfer-free: all edge subsets of size m-1)."""
    edges = list(itertools.combinations(variables, 2))
    best = -1.0
    for subset in itertools.combinations(edges, len(variables) - 1):
        parent = {v: v for v in variables}

        def find(v: str, parent: dict[str, str] = parent) -> str:
            while parent[v] != v:
                v = parent[v]
            return v

        ok = True
        for a, b in subset:
            ra, rb = find(a), find(b)
            if ra == rb:
                ok = False
                break
            parent[ra] = rb
        if ok:
            best = max(best, sum(w[e] for e in subset))
    return best


def test_t6_mutual_information_on_the_running_example() -> None:
    q = ivm.parse("Q(COVAR(A,B,C,D,E)) :- R(A,B), S(A,C,E), T(C,D)")
    engine = FIVM(q, categorical="ABCDE")
    num = [("R", (1, 1)), ("R", (1, 2)), ("R", (2, 3)), ("R", (3, 4))]
    num += [("S", (1, 1, 1)), ("S", (1, 1, 2)), ("S", (1, 2, 3)), ("S", (2, 2, 4))]
    num += [("T", (1, 1)), ("T", (2, 2)), ("T", (2, 3)), ("T", (3, 4))]
    engine.apply([ivm.Update(r, row, 1) for r, row in num])
    mi = mutual_information(engine.result(), tuple("ABCDE"))
    expected = {("A", "B"): 0.5004, ("A", "C"): 0.1185, ("C", "D"): 0.6730, ("C", "E"): 0.6730}
    expected |= {("B", "E"): 0.5004, ("A", "A"): 0.5004, ("B", "B"): 1.0549, ("C", "C"): 0.6730}
    expected |= {("D", "D"): 1.0889, ("E", "E"): 1.3322}
    for pair, value in expected.items():
        assert mi[pair] == pytest.approx(value, abs=5e-5), pair


@pytest.mark.parametrize("seed", range(4))
def test_chow_liu_tree_is_a_maximum_spanning_tree_of_the_join_mi(seed: int) -> None:
    rng = random.Random(seed)
    engine = FIVM(ivm.parse(QUERY), categorical=VARIABLES)
    model = ChowLiuTree(engine, VARIABLES)
    db = {r: Counter() for r in "RST"}
    updates = stream(rng, 240)
    for start in range(0, len(updates), 60):
        batch = updates[start : start + 60]
        engine.apply(batch)
        fold(db, batch)
        params = model.update()
        rows = join_rows(db)
        if not rows:
            continue
        w = {(a, b): mi_brute(rows, i, j) for (i, a), (j, b) in itertools.combinations(enumerate(VARIABLES), 2)}
        for (a, b), value in w.items():
            assert model.mi[(a, b)] == pytest.approx(value, abs=1e-9)
        assert len(params["edges"]) == len(VARIABLES) - 1
        got = sum(e["mutual_information"] for e in params["edges"])
        assert got == pytest.approx(max_spanning_weight(VARIABLES, w), abs=1e-9)
        assert params["rows"] == len(rows)


def test_matrix_chain_rank1_and_general_updates_match_numpy() -> None:
    rng = np.random.default_rng(0)
    p, k = 6, 5
    mats = [rng.integers(-3, 4, size=(p, p)) for _ in range(k)]
    chain = MatrixChain(mats)
    for step in range(20):
        i = int(rng.integers(k))
        if step % 2:
            u, v = rng.integers(-2, 3, size=p), rng.integers(-2, 3, size=p)
            before = np.linalg.multi_dot([m.astype(object) for m in mats])
            chain.update_rank1(i, u, v)
            mats[i] = mats[i] + np.outer(u, v)
            # T11: the change is (A_1..A_{i-1} u)(vᵀ A_{i+1}..A_k)
            left = np.linalg.multi_dot([np.eye(p, dtype=int), *mats[:i], u.reshape(-1, 1)])
            right = np.linalg.multi_dot([v.reshape(1, -1), *mats[i + 1 :], np.eye(p, dtype=int)])
            assert (chain.result() - before).tolist() == (left @ right).tolist()
        else:
            d = rng.integers(-1, 2, size=(p, p))
            chain.update(i, d)
            mats[i] = mats[i] + d
        assert chain.result().tolist() == np.linalg.multi_dot([m.astype(object) for m in mats]).tolist()
    assert chain.model()["product"] == chain.result().tolist()
