"""Where updates enter a view: SQL's selection on a relation and its computed attributes (ivm.query.expr).

An update failing its relation's selection is no change of the selected relation: dropped before the
engine, counted (``Outcome.filtered``, ``View.filtered``, ``stats()["entry_filtered"]``), never a
rejection; a delete of a filtered-out tuple is dropped the same way, so inserts and deletes cancel.
A value an expression cannot evaluate is a rejection naming the cause.  Every way into a view
(apply, apply_columns, apply_admitted, load, sharded views) enters the same way.
"""

from __future__ import annotations

import numpy as np
import pytest

import ivm
from ivm.engines import ENGINES
from ivm.query.parse import parse
from ivm.query.sql import parse_sql
from ivm.shards import ShardSlice

SCHEMA = {"orders": ["id", "product", "qty", "price"], "products": ["product", "category"]}
SQL = (
    "SELECT p.category, SUM(o.qty * (o.price - 1)) FROM orders o JOIN products p USING (product) "
    "WHERE o.qty > 5 AND p.category <> 'toys' GROUP BY p.category"
)


def test_a_filtered_update_is_dropped_counted_and_its_delete_cancels() -> None:
    view = ivm.maintain(parse_sql(SQL, SCHEMA))
    out = view.apply(
        [
            ("products", (1, "books"), 1),
            ("products", (2, "toys"), 1),  # filtered: category 'toys'
            ("orders", (10, 1, 6, 3.0), 1),  # 6 * (3 - 1) = 12
            ("orders", (11, 1, 2, 9.0), 1),  # filtered: qty 2
            ("orders", (12, 2, 7, 2.0), 1),  # passes, but joins only the filtered product
        ]
    )
    assert (out.applied, out.filtered, out.rejected) == (3, 2, [])
    assert view.result() == {("books",): 12.0}
    assert view.filtered == {"orders": 1, "products": 1}
    assert view.stats()["entry_filtered"] == 2
    # the delete of a filtered-out tuple is dropped as its insert was: not an absent delete
    out = view.apply([("orders", (11, 1, 2, 9.0), -1), ("products", (2, "toys"), -1), ("orders", (10, 1, 6, 3.0), -1)])
    assert (out.applied, out.filtered, out.rejected) == (1, 2, [])
    assert view.result() == {}


def test_refusals_keep_the_index_and_the_row_as_given() -> None:
    view = ivm.maintain(parse_sql(SQL, SCHEMA))
    out = view.apply(
        [
            ("orders", (1, 1, 9, 2.0), 1),
            ("orders", (2, 1, "many", 2.0), 1),  # 'many' > 5: a string compared with a number
            ("orders", (3, 1, 7), 1),  # the relation's own arity is 4
            ("orders", (4, 1, 8, "cheap"), 1),  # passes the selection; 'cheap' - 1 is no arithmetic
            ("orders", (5, 1, 8, None), 1),  # NULL - 1 is NULL: no number for SUM to lift
            ("orders", (6, 1, 9, 1.0), -1),  # a delete of an absent tuple (the engine sees the entered row)
            ("orders", (7, 1, 1, 1.0), 0),
        ]
    )
    assert out.applied == 1
    got = [(r.index, r.update.row, r.kind) for r in out.rejected]
    assert got == [
        (1, (2, 1, "many", 2.0), "not_comparable"),
        (2, (3, 1, 7), "arity"),
        (3, (4, 1, 8, "cheap"), "not_a_number"),
        (4, (5, 1, 8, None), "not_a_number"),
        (5, (6, 1, 9, 1.0), "absent_delete"),
        (6, (7, 1, 1, 1.0), "zero_multiplicity"),
    ]
    reasons = [r.reason for r in out.rejected]
    assert reasons[0] == (
        "orders row (2, 1, 'many', 2.0) cannot enter the query (orders: WHERE qty > 5; expr1 := (price - 1); NULL "
        "never joins at position 1): "
        "'many' does not compare with 5 in qty > 5 (string and number)"
    )
    assert reasons[1] == "relation orders has arity 4, tuple (3, 1, 7) has 3"
    assert "'cheap' (price) is not a number in (price - 1)" in reasons[2]
    assert reasons[3] == "orders position 4 (expr1) is lifted by SUM(qty * expr1): None is not a number"
    with pytest.raises(TypeError, match="multiplicity must be an int"):
        view.apply([("orders", (8, 1, 9, 1.0), "1")])


def test_every_way_in_enters_the_same_way() -> None:
    q = parse_sql("SELECT SUM(R.A + R.B) FROM R WHERE R.A BETWEEN 1 AND 3", {"R": ["A", "B"]})
    rows = [(a, b) for a in range(6) for b in range(3)]
    want = sum(a + b for a, b in rows if 1 <= a <= 3)
    ways = {}
    v = ivm.maintain(q)
    ways["apply"] = (v, v.apply([("R", r, 1) for r in rows]))
    v = ivm.maintain(q)
    ways["apply_columns"] = (v, v.apply_columns("R", [np.array([r[0] for r in rows]), np.array([r[1] for r in rows])]))
    v = ivm.maintain(q)
    ways["apply_admitted"] = (v, v.apply_admitted([("R", r, 1) for r in rows], finite=True))
    v = ivm.maintain(q)
    ways["load"] = (v, v.load([("R", r, 1) for r in rows]))
    v = ivm.maintain(q, shards=3)
    ways["sharded"] = (v, v.apply([("R", r, 1) for r in rows]))
    for way, (view, out) in ways.items():
        assert (out.applied, out.filtered, out.rejected) == (9, 9, []), way
        assert view.result() == want, way
        assert view.stats()["entry_filtered"] == 9, way
    # the executors' placement: each slice of a sharded view enters the whole batch and keeps its shard's share
    slices = [ShardSlice.of(ivm.maintain(q, shards=3), i) for i in range(3)]
    for piece in slices:
        assert piece.apply([("R", r, 1) for r in rows]).filtered == 9
    assert sum(piece.result() for piece in slices) == want


def test_count_of_a_column_counts_its_non_null_values() -> None:
    view = ivm.maintain("SELECT R.A, COUNT(R.B) FROM R GROUP BY R.A", schema={"R": ["A", "B"]})
    view.apply([("R", (1, None), 2), ("R", (1, 5), 1), ("R", (2, None), 1)])
    assert view.result() == {(1,): 1, (2,): 0}  # group 2 has a row, whose B is NULL: COUNT(B) = 0
    view.apply([("R", (2, None), -1)])
    assert view.result() == {(1,): 1}


def test_factorized_updates_of_an_entered_relation_are_refused_by_name() -> None:
    view = ivm.maintain(
        "SELECT COUNT(*) FROM R JOIN S USING (B) WHERE R.A > 1", schema={"R": ["A", "B"], "S": ["B"]}, engine="fivm"
    )
    with pytest.raises(TypeError, match=r"apply_factorized of R, which enters the query through R: WHERE A > 1"):
        view.apply_factorized("R", [[("A", {2: 1}), ("B", {1: 1})]])
    assert view.apply_factorized("S", [[("B", {1: 1})]]).applied == 1  # a relation without a selection


def test_a_view_with_entries_survives_a_snapshot() -> None:
    import pickle

    view = ivm.maintain(parse_sql(SQL, SCHEMA))
    view.apply([("products", (1, "books"), 1), ("orders", (10, 1, 6, 3.0), 1), ("orders", (11, 1, 2, 9.0), 1)])
    again = pickle.loads(pickle.dumps(view))
    assert again.result() == {("books",): 12.0} and again.filtered == {"orders": 1, "products": 0}
    out = again.apply([("orders", (11, 1, 2, 9.0), -1), ("orders", (12, 1, 10, 2.0), 1)])
    assert (out.applied, out.filtered) == (1, 1)
    assert again.result() == {("books",): 22.0}


def test_compiled_entries_agree_with_the_tree_on_every_value() -> None:
    """The closures' fast paths give what :meth:`Expr.evaluate` gives, errors included."""
    from ivm.query.expr import EntryError

    q = parse_sql(
        "SELECT SUM(R.A * (R.B - 1)) FROM R WHERE (R.A > 1 OR R.B IS NULL) AND NOT R.A IN (3, 4.5) "
        "AND R.A % 3 <> 2 AND R.B / 2 < 10",
        {"R": ["A", "B"]},
    )
    (entry,) = q.entry
    compiled = entry.compile()
    values = [None, 0, 1, 2, 3, 4.5, -7, 2.0, 25, "x", True]
    for a in values:
        for b in values:
            row = (a, b)
            try:
                want: object = entry.enter(row)
            except EntryError as error:
                want = (error.kind, str(error))
            try:
                got: object = compiled(row)
            except EntryError as error:
                got = (error.kind, str(error))
            assert got == want, row


# NULL never joins (as in SQL): a NULL join key is dropped where it enters, SQL and rule syntax alike


PATH = "Q(a) :- R(a, b), S(b, c)"


@pytest.mark.parametrize("engine", [n for n, cls in sorted(ENGINES.items()) if not cls.refuses(parse(PATH))])
def test_a_null_join_key_is_dropped_counted_and_its_delete_cancels(engine: str) -> None:
    view = ivm.maintain(PATH, engine=engine)
    out = view.apply([("R", (1, None), 1), ("S", (None, 5), 2), ("R", (None, 2), 1), ("S", (2, None), 1)])
    # None = None would join R(1, NULL) with S(NULL, 5); only R(NULL, 2) ⋈ S(2, NULL) joins (a NULL group key)
    assert (out.applied, out.filtered, out.rejected) == (2, 2, [])
    assert dict(view.enumerate()) == {(None,): 1}
    assert view.filtered == {"R": 1, "S": 1} and view.stats()["entry_filtered"] == 2
    out = view.apply([("S", (None, 5), -2), ("R", (1, None), -1), ("R", (None, 2), -1)])
    assert (out.applied, out.filtered, out.rejected) == (1, 2, [])
    assert dict(view.enumerate()) == {}


def test_a_null_join_key_under_the_reject_policy_is_dropped_not_an_absent_delete() -> None:
    view = ivm.maintain("Q() :- R(a, b), S(b, c)", policy=ivm.Policy(negative="reject"))
    assert view.apply([("R", (1, None), 1)]).filtered == 1
    out = view.apply([("R", (1, None), -1), ("R", (1, None), -1)])  # never applied: no absent delete either
    assert (out.applied, out.filtered, out.rejected) == (0, 2, [])


def test_a_variable_repeated_in_one_atom_is_a_join_variable_and_a_single_one_keeps_null() -> None:
    view = ivm.maintain("Q(c) :- S(b, b, c)")
    out = view.apply([("S", (None, None, 1), 1), ("S", (1, 1, None), 1), ("S", (2, 2, 7), 1)])
    assert (out.applied, out.filtered) == (2, 1)
    assert view.result() == {(None,): 1, (7,): 1}


def test_a_null_where_a_self_join_joins_in_one_occurrence_only_is_refused_by_name() -> None:
    view = ivm.maintain("Q(a) :- R(a, b), R(b, c)")
    out = view.apply([("R", (None, 1), 1), ("R", (1, 2), 1), ("R", (2, 3), 1)])
    assert out.applied == 2 and [(r.index, r.kind) for r in out.rejected] == [(0, "null_join_key")]
    assert "NULL at position 0 (a in R(a, b), b in R(b, c))" in out.rejected[0].reason
    assert view.result() == {(1,): 1}
    both = ivm.maintain("Q(a) :- R(a, b), R(b, a)")  # a join variable in both occurrences: dropped
    assert both.apply([("R", (None, 1), 1)]).filtered == 1


def test_sql_null_join_keys_with_a_selection_and_the_batch_path() -> None:
    view = ivm.maintain(parse_sql(SQL, SCHEMA))
    batch = [("products", (1, "books"), 1), ("products", (None, "games"), 1)]
    batch += [("orders", (i, None if i % 2 else 1, 7, 2.0), 1) for i in range(10)]
    out = view.apply(batch)
    assert (out.applied, out.filtered, out.rejected) == (6, 6, [])
    assert view.result() == {("books",): 5 * 7 * 1.0}
    assert view.filtered == {"orders": 5, "products": 1}


def test_a_factorized_update_drops_its_null_join_keys() -> None:
    view = ivm.maintain("Q() :- R(A,B), S(A,C,E), T(C,D)", engine="fivm")
    view.apply([("R", (1, 1), 1), ("R", (None, 1), 1), ("T", (1, 1), 1)])
    out = view.apply_factorized("S", [[("A", {1: 1, None: 1}), ("C", {1: 1}), ("E", {7: 1, None: 1})]])
    assert (out.applied, out.filtered, view.result()) == (2, 2, 2)


def test_a_refused_null_does_not_fix_the_kind_min_compares() -> None:
    view = ivm.maintain("Q(a, MIN(c)) :- R(a, b), S(b, c)")
    out = view.apply([("S", (1, None), 1), ("S", (1, 4), 1), ("R", (0, 1), 1)])
    assert [r.kind for r in out.rejected] == ["not_comparable"] and out.applied == 2
    assert view.result() == {(0,): 4}


def test_a_snapshot_keeps_the_null_join_keys() -> None:
    import pickle

    view = pickle.loads(pickle.dumps(ivm.maintain("Q() :- R(a, b), S(b, c)")))
    assert view.apply([("R", (1, None), 1)]).filtered == 1


def test_columns_with_null_join_keys_are_dropped_and_without_them_go_as_they_are() -> None:
    view = ivm.maintain("Q(a) :- R(a, b), S(b, c)", engine="fivm")
    out = view.apply_columns("R", [np.array([1, 2, 3]), [5, None, 6]])
    assert (out.applied, out.filtered) == (2, 1)
    out = view.apply_columns("S", [np.array([5, 6]), np.array([0, 0])])
    assert (out.applied, out.filtered) == (2, 0)
    assert view.result() == {(1,): 1, (3,): 1}
