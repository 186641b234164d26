"""Generated join trees are valid (003 §3.3: "validate every generated tree in tests")."""

from __future__ import annotations

import pytest
from test_tables import HU_WANG_ROWS, MIX_ROWS, Q_CX, QHIER_ROWS

from ivm.query import parse
from ivm.query.join_tree import compatible_tree, fifo_tree, height_one_tree, validate_join_tree
from ivm.query.mixdetect import mixdetect
from ivm.query.patterns import parse_patterns
from ivm.query.q_hierarchical import q_hierarchical
from ivm.query.weak_q_hierarchical import weak_q_hierarchical


@pytest.mark.parametrize("text", [row[0] for row in QHIER_ROWS + HU_WANG_ROWS])
def test_height_one_tree_iff_q_hierarchical(text):
    query = parse(text)
    if not q_hierarchical(query):
        with pytest.raises(ValueError, match=r"Lemma 2\.2"):
            height_one_tree(query)
        return
    tree = height_one_tree(query)
    assert validate_join_tree(tree, query) == []
    assert tree.height == 1


@pytest.mark.parametrize("text", [row[0] for row in HU_WANG_ROWS])
def test_fifo_tree_has_height_two(text):
    query = parse(text)
    if not weak_q_hierarchical(query):
        with pytest.raises(ValueError):
            fifo_tree(query)
        return
    tree = fifo_tree(query)
    assert tree.height <= 2
    assert validate_join_tree(tree, query) == []


def test_q_cx_needs_an_extender():
    query = parse(Q_CX)
    tree = fifo_tree(query)
    roles = {query.atoms[n.atom].relation: n.role for n in tree.nodes if n.atom is not None}
    assert roles["R2"] == "extender"
    assert validate_join_tree(tree, query) == []


@pytest.mark.parametrize(("text", "pattern", "expected"), MIX_ROWS)
def test_compatible_tree_exists_iff_mixdetect(text, pattern, expected):
    query, patterns = parse(text), parse_patterns(pattern)
    assert bool(mixdetect(query, patterns)) is expected
    if not expected:
        with pytest.raises(ValueError, match="MixDetect false"):
            compatible_tree(query, patterns)
        return
    tree = compatible_tree(query, patterns)
    assert validate_join_tree(tree, query, patterns) == []
