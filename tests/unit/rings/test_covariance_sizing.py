"""Covariance payloads sized per view (F-IVM §6.2): a view's element holds only its subtree's variables.

Block products over disjoint supports are checked against the full-degree
product rule of Def. 32, exactly on integers and to 1e-12 on floats; inside
the engine every stored payload's support is its view's subtree variables and
the root's is the full matrix.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

import ivm
from ivm.engines.fivm import FIVM
from ivm.rings.covariance import Covariance, CovarianceRing

VARS = ("a", "b", "c", "d", "e", "f")


def full_product(ring: CovarianceRing, x: Covariance, y: Covariance) -> Covariance:
    """Def. 32's product on full-degree elements (the rule before sizing)."""
    a, b = ring.expand(x), ring.expand(y)
    cross = np.outer(a.s, b.s)
    return Covariance(a.c * b.c, b.c * a.s + a.c * b.s, b.c * a.Q + a.c * b.Q + cross + cross.T)


def random_element(ring: CovarianceRing, rng: random.Random, variables: list[str], floats: bool) -> Covariance:
    out = ring.zero
    for _ in range(rng.randint(1, 3)):
        values = [rng.uniform(-5, 5) if floats else rng.randint(-5, 5) for _ in variables]
        out = out + ring.lift_tuple(variables, values) * rng.choice([-2, 1, 3])
    return out


@pytest.mark.parametrize("floats", [False, True])
@pytest.mark.parametrize("seed", range(20))
def test_block_product_equals_full_product(seed: int, floats: bool) -> None:
    rng = random.Random(seed)
    ring = CovarianceRing(VARS, exact=not floats)
    shuffled = rng.sample(VARS, len(VARS))
    cut = rng.randint(0, len(VARS))
    x = random_element(ring, rng, shuffled[:cut], floats)
    y = random_element(ring, rng, shuffled[cut:], floats)
    product = x * y
    assert product.idx == tuple(sorted(ring.index[v] for v in VARS))  # the union of the disjoint supports
    assert len(x.s) == len(x.idx) == cut and x.Q.shape == (cut, cut)
    expected = full_product(ring, x, y)
    if floats:
        assert product.is_close(expected, rel=1e-12, abs_=1e-12)
        assert not product.is_close(expected * 2, rel=1e-12, abs_=1e-12) or ring.is_zero(expected)
    else:
        assert product == expected
        assert all(type(v) is int for v in product.Q.ravel())
    # overlapping supports fall back to the general rule on the union
    z = random_element(ring, rng, shuffled[: max(1, cut)], floats)
    w = x * z
    assert w.is_close(full_product(ring, x, z), rel=1e-12, abs_=1e-12) if floats else w == full_product(ring, x, z)


def test_engine_views_hold_only_their_subtree_variables() -> None:
    q = ivm.parse("Q(COVAR(A,B,C,D,E)) :- R(A,B), S(A,C,E), T(C,D)")
    engine = FIVM(q)
    rng = random.Random(4)
    for _ in range(40):
        rel = rng.choice(["R", "S", "T"])
        arity = 3 if rel == "S" else 2
        engine.apply([(rel, tuple(rng.randint(1, 3) for _ in range(arity)), rng.choice([1, 1, 2, -1]))])
    ring = engine.ring
    supports = {}
    for node in engine.tree.materialized():
        subtree = {v for n in node.walk() for v in n.lifted}
        for payload in node.store.data.values():
            assert payload.idx == tuple(sorted(ring.index[v] for v in subtree)), node.name
            assert payload.s.shape == (len(payload.idx),) and payload.Q.shape == (len(payload.idx),) * 2
        supports[node.name] = len(engine._support(node))
    assert supports["V^{@A}_{R,S,T}"] == 5 and supports["V^{@B}_{R}"] == 1 and supports["V^{@C}_{S,T}"] == 3
    stats = engine.stats()
    assert stats["bytes_per_payload[V^{@B}_{R}]"] < stats["bytes_per_payload[V^{@A}_{R,S,T}]"]
    assert stats["view_bytes"] == sum(v for k, v in stats.items() if k.startswith("view_bytes["))
    # the result and views() are full-degree elements
    assert len(engine.result().s) == 5 and engine.views()["V^{@B}_{R}"]
    assert all(len(p.s) == 5 for view in engine.views().values() for p in view.values())


def test_old_full_payload_pickles_restore() -> None:
    import pickle

    x = Covariance(2, np.array([1.0, 2.0]), np.eye(2))
    state = (None, {"c": 2, "s": x.s, "Q": x.Q})  # the slots state of payloads pickled before sizing
    y = Covariance.__new__(Covariance)
    y.__setstate__(state)
    assert y.idx == (0, 1) and y == x and pickle.loads(pickle.dumps(x)) == x
