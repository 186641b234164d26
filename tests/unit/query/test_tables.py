"""The classification tables of the digests, row by row.

002 §8 ("Classifier expectations"), 003 §5.1 (classification) and 003 §5.2
(MixDetect expectations).
"""

from __future__ import annotations

import pytest

from ivm.query import parse
from ivm.query.acyclic import acyclic
from ivm.query.core import core
from ivm.query.free_connex import free_connex
from ivm.query.hierarchical import hierarchical
from ivm.query.mixdetect import mixdetect
from ivm.query.patterns import parse_patterns
from ivm.query.q_hierarchical import q_hierarchical
from ivm.query.weak_q_hierarchical import trim, weak_q_hierarchical

# ---------------------------------------------------------------- 002 §8
# (query, q-hierarchical?, condition when not, violating pair or None, core q-hierarchical?)
QHIER_ROWS = [
    ("Q(x,y) :- S(x), E(x,y), T(y)", False, "i", ("x", "y"), False),
    ("Q() :- S(x), E(x,y), T(y)", False, "i", ("x", "y"), False),
    ("Q(x) :- E(x,y), T(y)", False, "ii", ("x", "y"), False),
    ("Q(y) :- E(x,y), T(y)", True, None, None, True),
    ("Q(x,y) :- E(x,y), T(y)", True, None, None, True),
    ("Q() :- E(x,y), T(y)", True, None, None, True),
    ("Q() :- E(x,x), E(x,y), E(y,y)", False, None, None, True),
    ("Q(x,y) :- E(x,x), E(x,y), E(y,y)", False, None, None, False),
    ("Q() :- E(x,y), E(y,z), E(z,w)", False, "i", ("y", "z"), False),
    ("Q(x,y,z,w) :- E(x,y), E(y,z), E(z,w)", False, "i", ("y", "z"), False),
    ("Q(x,y,z) :- E(x,y), E(y,z)", True, None, None, True),
    ("Q(y) :- E(x,y), E(y,z)", True, None, None, True),
    ("Q(x,z) :- E(x,y), E(y,z)", False, "ii", ("x", "y"), False),
    ("Q(x) :- R(x,y), S(x,z), T(x)", True, None, None, True),
    ("Q(x,y,z) :- R(x,y), S(x,z), T(x)", True, None, None, True),
    ("Q(y) :- R(x,y), S(x,z), T(x)", False, "ii", ("y", "x"), False),
    ("Q() :- R(a,b), S(b,c), T(c,a)", False, "i", None, False),
    ("Q(z) :- R(x,y), S(x,y,z)", False, "ii", ("z", "x"), False),
]


@pytest.mark.parametrize(("text", "qh", "condition", "pair", "core_qh"), QHIER_ROWS)
def test_002_classifier_expectations(text, qh, condition, pair, core_qh):
    query = parse(text)
    verdict = q_hierarchical(query)
    assert bool(verdict) is qh
    if condition is not None:
        assert verdict.witness.condition == condition
    if pair is not None:
        assert (verdict.witness.x, verdict.witness.y) == pair
    assert bool(q_hierarchical(core(query).query)) is core_qh


def test_002_core_examples():
    assert str(core(parse("Q() :- E(x,x), E(x,y), E(y,y)")).query) == "Q() :- E(x, x)"
    assert len(core(parse("Q(x,y) :- E(x,x), E(x,y), E(y,y)")).query.atoms) == 3
    assert str(core(parse("Q(x,y) :- E(x,y), E(x,z), E(x,x)")).query) == "Q(x, y) :- E(x, y), E(x, x)"


# ---------------------------------------------------------------- 003 §5.1
Q1 = (
    "Q(x1,x2,x3,x4,x5,x6,x7,x8,x9) :- R1(x1,x2,x3), R2(x1,x2), R3(x1,x4), R4(x4,x5), R5(x2,x3), "
    "R6(x2,x6), R7(x3,x7), R8(x3,x8), R9(x3,x9)"
)
Q_CX = "Q(z,x,u) :- R1(z,x,w,a), R7(a), R6(z,x,w,p), R8(p), R3(z,q), R9(q), R2(x,u)"
# (query, acyclic, free-connex, hierarchical, q-hierarchical, skeleton (relation names) or size, weak-q)
HU_WANG_ROWS = [
    (Q1, True, True, False, False, {"R1", "R3"}, True),
    ("Q(x2,x3) :- R1(x1,x2,x3), R2(x2,x3,x4), R3(x3,x5)", True, True, True, True, 1, True),
    ("Q(x2) :- R1(x1,x2), R2(x2,x4), R3(x2,x5), R4(x1), R5(x3,x6)", True, True, False, False, {"R1"}, True),
    ("Q(x2) :- R1(x1,x2), R2(x2,x4), R3(x2,x5), R4(x1), R5(x4,x6)", True, True, False, False, {"R1", "R2"}, True),
    (
        "Q(x1,x2,x3,x4,x5,x6) :- R1(x1,x2), R2(x1,x2,x3), R3(x2,x3,x4), R4(x2,x3,x5), R5(x4,x6)",
        True,
        True,
        False,
        False,
        {"R2", "R3"},
        True,
    ),
    ("Q(x1,x2,x3,x4) :- R1(x1,x2), R2(x2,x3), R3(x2,x4)", True, True, True, True, 1, True),
    ("Q(x1) :- R1(x1,x2), R2(x2,x3), R3(x3)", True, True, False, False, {"R1", "R2"}, False),
    ("Q() :- R1(x1), R2(x1,x2), R3(x2,x3), R4(x3,x4), R5(x4)", True, True, False, False, {"R2", "R3", "R4"}, False),
    ("Q(x1) :- R1(x1,x2), R2(x2)", True, True, True, False, {"R1"}, True),
    ("Q() :- R1(x1,x2), R2(x2), R3(x1)", True, True, False, False, {"R1"}, True),
    ("Q() :- R1(x1), R2(x1,x2), R3(x2,x3), R4(x3)", True, True, False, False, {"R2", "R3"}, True),
    ("Q(x1,x3) :- R1(x1,x2), R2(x2,x3)", True, False, True, False, None, None),
    ("Q(a,b,c) :- R(a,b), S(b,c), T(c,a)", False, False, False, False, None, None),
    ("Q(pk,sk) :- PART(pk), PARTSUPP(pk,sk), SUPPLIER(sk)", True, True, False, False, {"PARTSUPP"}, True),
    ("Q(x1,x2,x3,x4,x5) :- R1(x1,x2), R2(x2,x3), R3(x3,x4), R4(x4,x5)", True, True, False, False, None, True),
    (
        "Q(x1,x2,x3,x4,x5,x6) :- R1(x1,x2), R2(x2,x3), R3(x3,x4), R4(x4,x5), R5(x5,x6)",
        True,
        True,
        False,
        False,
        {"R2", "R3", "R4"},
        False,
    ),
    (Q_CX, True, True, False, False, {"R1", "R6", "R3"}, True),
]


@pytest.mark.parametrize(("text", "acyc", "fc", "hier", "qh", "skeleton", "weak"), HU_WANG_ROWS)
def test_003_classification(text, acyc, fc, hier, qh, skeleton, weak):
    query = parse(text)
    assert bool(acyclic(query)) is acyc
    assert bool(free_connex(query)) is fc
    assert bool(hierarchical(query)) is hier
    assert bool(q_hierarchical(query)) is qh
    if weak is None:
        assert not weak_q_hierarchical(query)
        return
    assert bool(weak_q_hierarchical(query)) is weak
    result = trim(query)
    names = {query.atoms[i].relation for i in result.skeleton}
    if isinstance(skeleton, int):
        assert len(names) == skeleton
    elif skeleton is not None:
        assert names == skeleton
    # the skeleton's q-hierarchy is the verdict, whichever twin TRIM keeps
    assert bool(q_hierarchical(query.induced(result.skeleton))) is weak


def test_trim_uses_v_bullet_of_the_original_query():
    """Recomputing V• inside TRIM would call the full 5-path weak-q-hierarchical (003 §1.6)."""
    five_path = parse("Q(x1,x2,x3,x4,x5,x6) :- R1(x1,x2), R2(x2,x3), R3(x3,x4), R4(x4,x5), R5(x5,x6)")
    assert trim(five_path).skeleton == (1, 2, 3)
    assert not weak_q_hierarchical(five_path)


# ---------------------------------------------------------------- 003 §5.2
Q_HOOK = "Q(x1) :- R1(x1,x2), R2(x2,x3), R3(x3)"
Q_PATH = "Q() :- R1(x1), R2(x1,x2), R3(x2,x3), R4(x3,x4), R5(x4)"
Q_QCORE = "Q(x1) :- R1(x1,x2), R2(x2)"
Q_HIER = "Q() :- R1(x1,x2), R2(x2), R3(x1)"
Q_SWING = "Q() :- R1(x1), R2(x1,x2), R3(x2,x3), R4(x3)"
TPCH = "Q(pk,sk) :- PART(pk), PARTSUPP(pk,sk), SUPPLIER(sk)"
FOUR_PATH = "Q(x1,x2,x3,x4,x5) :- R1(x1,x2), R2(x2,x3), R3(x3,x4), R4(x4,x5)"
FIVE_PATH = "Q(x1,x2,x3,x4,x5,x6) :- R1(x1,x2), R2(x2,x3), R3(x3,x4), R4(x4,x5), R5(x5,x6)"

MIX_ROWS = [
    (Q1, ["R1=arbitrary", "R8=arbitrary", "R9=arbitrary", "R2=I", "R3=I", "R4=I", "R5+R6+R7=fifo"], True),
    (Q1, ["R1=arbitrary", "R8=arbitrary", "R9=arbitrary", "R2=I", "R3=I", "R4=A", "R5+R6+R7=fifo"], False),
    (Q1, ["R1=I", "R2=I", "R3=I", "R5=I", "R6=I", "R8=I", "R9=I"], False),
    (TPCH, ["PART=I", "SUPPLIER=I"], True),
    (TPCH, ["SUPPLIER=I"], True),
    (TPCH, [], False),
    (Q_HOOK, ["R2=I", "R3=I"], True),
    (Q_HOOK, ["R3=I"], False),
    (Q_HOOK, ["R2=I"], False),
    (Q_PATH, ["R1=I", "R2=I", "R4=I", "R5=I"], True),
    (Q_PATH, ["R1=I", "R2=I"], False),
    (Q_QCORE, ["R1+R2=fifo"], True),
    (Q_QCORE, ["R2=fifo", "R1=fifo"], False),
    (Q_QCORE, ["R2=I"], True),
    (Q_HIER, ["R2=I"], True),
    (Q_HIER, ["R2=fifo", "R3=fifo", "R2+R3=fifo"], False),
    (Q_SWING, ["R1=I"], False),
    (Q_SWING, ["R1=I", "R4=I"], True),
    (Q_SWING, ["R1+R2=fifo", "R3+R4=fifo"], True),
    ("Q(x1) :- R1(x1,x2), R2(x2), R3(x2)", ["R2+R3=fifo"], False),
]


@pytest.mark.parametrize(("text", "pattern", "expected"), MIX_ROWS)
def test_003_mixdetect(text, pattern, expected):
    assert bool(mixdetect(parse(text), parse_patterns(pattern))) is expected


UNIFORM = {  # all I / all jointly FIFO / all A / per-relation FIFO never joint
    Q_HOOK: (True, False, False, False),
    Q_PATH: (True, False, False, False),
    FIVE_PATH: (True, False, False, False),
    Q_QCORE: (True, True, False, False),
    Q_HIER: (True, True, False, False),
    Q_SWING: (True, True, False, False),
    TPCH: (True, True, False, False),
    Q1: (True, True, False, False),
    FOUR_PATH: (True, True, False, False),
    Q_CX: (True, True, False, False),
}


@pytest.mark.parametrize("text", list(UNIFORM))
def test_003_mixdetect_uniform_patterns(text):
    query = parse(text)
    names = list(query.relations)
    patterns = [
        [f"{r}=I" for r in names],
        ["+".join(names) + "=fifo"],
        [],
        [f"{r}=fifo" for r in names],
    ]
    assert tuple(bool(mixdetect(query, parse_patterns(p))) for p in patterns) == UNIFORM[text]
