"""The positions an aggregate lifts into its ring, and the refusal of values that are not numbers.

A value at such a position that is not a number (a string, ``None``) has no payload in the ring; before
this check a View handed it to the engine, which raised midway through the batch with the base
relation already updated and the result not (a wrong result afterwards, without a word).  Now:
``View.apply`` refuses it by name (``not_a_number``), index and reason and applies the rest of the
batch; the processor refuses at planning a query whose lifted attribute has a schema field that may
hold something else (``ivm check`` names the field).
"""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

import ivm
from ivm.query.lifted import Lifted, is_number, lifted_positions
from ivm.updates import from_columns


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Q() :- R(a, b), S(b, c)", {}),
        ("Q(a, MIN(b)) :- R(a, b)", {}),
        ("Q(SUM(b)) :- R(a, b), S(b, c)", {"R": ((1, "b"),), "S": ((0, "b"),)}),
        ("Q(a, SUM(b * c)) :- R(a, b), S(a, c)", {"R": ((1, "b"),), "S": ((1, "c"),)}),
        ("Q(a, AVG(b)) :- R(a, b)", {"R": ((1, "b"),)}),
        ("Q(COVAR(a, c)) :- E(a, b), E(b, c)", {"E": ((0, "a"), (1, "c"))}),  # a self-join: both positions
        ("Q(a) :- R(a, b) HAVING SUM(b) > 2", {"R": ((1, "b"),)}),
    ],
)
def test_lifted_positions(text: str, expected: dict) -> None:
    got = lifted_positions(ivm.parse(text))
    assert {r: tuple((x.position, x.variable) for x in found) for r, found in got.items()} == expected
    assert all(isinstance(x, Lifted) and x.aggregate for found in got.values() for x in found)


def test_is_number() -> None:
    assert all(map(is_number, [1, 2.5, True, Fraction(1, 3), Decimal("1.5"), np.float32(1), np.int8(3)]))
    assert not any(map(is_number, ["1", None, b"1", (1,), 1j, [1]]))


@pytest.mark.parametrize("mixed", [False, True])
def test_the_view_refuses_values_that_are_not_numbers_and_applies_the_rest(mixed: bool) -> None:
    """In a batch of one relation (the C-level pass) and of several (the loop), values that are not
    numbers at a lifted position are refused by name; the state is that of the other updates alone."""
    text = "Q(COVAR(a1, b1)) :- A(k, a1), B(k, b1)"
    view, clean = ivm.maintain(text), ivm.maintain(text)
    good = [("A", (k, 0.5 * k), 1) for k in range(6)]
    others = [("B", (k, 2.0 + k), 1) for k in range(6)]
    bad = [("A", (1, "x"), 1), ("A", (2, None), 1)]
    batch = [*good[:3], bad[0], *good[3:], bad[1]] + (others if mixed else [])
    outcome = view.apply(batch)
    assert [(r.index, r.kind) for r in outcome.rejected] == [(3, "not_a_number"), (7, "not_a_number")]
    assert outcome.rejected[0].reason == "A position 1 (a1) is lifted by COVAR(a1, b1): 'x' is not a number"
    assert outcome.applied == len(batch) - 2
    if not mixed:
        view.apply(others)
    clean.apply(good + others)
    assert np.array_equal(view.result().matrix(), clean.result().matrix())
    assert view.engine.multiplicity("A", (1, "x")) == 0 and view.engine.multiplicity("A", (2, None)) == 0
    # Fractions, Decimals and numpy numbers are numbers: taken (the loop checks them one by one)
    exact = ivm.maintain("Q(SUM(b)) :- R(a, b)")
    assert exact.apply([("R", (1, Fraction(1, 3)), 1), ("R", (2, np.int64(2)), 1)]).rejected == []
    assert exact.result() == Fraction(7, 3)


def test_columns_of_strings_take_the_rows_and_are_refused() -> None:
    view = ivm.maintain("Q(SUM(b)) :- R(a, b)")
    columns = [np.array([1, 2, 3]), np.array([1.5, "x", 2.5], dtype=object)]
    outcome = view.apply_columns("R", columns)
    assert outcome == ivm.maintain("Q(SUM(b)) :- R(a, b)").apply(from_columns("R", columns))
    assert [(r.index, r.kind) for r in outcome.rejected] == [(1, "not_a_number")]
    assert view.result() == 4.0


def test_a_query_lifting_a_string_field_is_refused_at_planning(tmp_path: Path, capsys) -> None:
    from ivm.processor.cli import main

    schema = tmp_path / "P.avsc"
    schema.write_text(
        '{"type": "record", "name": "P", "fields": [{"name": "k", "type": "long"}, '
        '{"name": "price", "type": "string"}, {"name": "qty", "type": ["null", "double"]}, '
        '{"name": "w", "type": "double"}, {"name": "mult", "type": "long"}]}'
    )
    config = tmp_path / "p.toml"
    config.write_text(
        f'[[relations]]\nname = "P"\nschema = "{schema}"\n'
        '[[queries]]\nname = "ok"\nquery = "Q(k, SUM(w)) :- P(k, price, qty, w)"\n'
        '[[queries]]\nname = "bad"\nquery = "Q(k, SUM(price * qty)) :- P(k, price, qty, w)"\n'
    )
    assert main(["check", "-c", str(config)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("ivm check: [queries.bad] query: "), err
    assert 'SUM(price * qty) lifts price, bound to P.price of Avro type "string"' in err[0]
    assert 'lifts qty, bound to P.qty of Avro type ["null", "double"]' in err[0]


@pytest.mark.parametrize("mixed", [False, True])
def test_min_and_max_refuse_values_that_do_not_compare(mixed: bool) -> None:
    """MIN and MAX keep each group's values ordered: a value of another kind than the variable's first
    (a string among numbers) or one with no order (None) is refused by name, in a batch of one
    relation (the C-level pass) and of several (the loop); before, the inner view took the update
    and the ordered multiset raised, leaving the two apart."""
    text = "Q(a, MIN(b)) :- R(a, b), S(a)"
    view = ivm.maintain(text)
    assert view.apply([("R", (1, 2), 1), ("S", (1,), 1), ("S", (5,), 1)]).rejected == []
    batch = [("R", (5, 7), 1), ("R", (1, "x"), 1), ("R", (1, None), 1), ("R", (5, 2.5), 1)]
    batch += [("S", (3,), 1)] if mixed else []
    outcome = view.apply(batch)
    assert [(r.index, r.kind) for r in outcome.rejected] == [(1, "not_comparable"), (2, "not_comparable")]
    assert "'x' does not compare with its other values (number)" in outcome.rejected[0].reason
    assert "None has no order" in outcome.rejected[1].reason
    assert view.result() == {(1,): 2, (5,): 2.5}
    strings = ivm.maintain("Q(a, MAX(b)) :- R(a, b)")
    assert strings.apply([("R", (1, "pear"), 1), ("R", (1, "apple"), 1)]).rejected == []
    assert [r.kind for r in strings.apply([("R", (2, 3), 1)]).rejected] == ["not_comparable"]
    assert strings.result() == {(1,): "pear"}


@pytest.mark.parametrize("text", ["Q(a, MIN(b)) :- R(a, b)", "Q() :- R(a, b), S(b, c)", "Q(SUM(b)) :- R(a, b)"])
def test_rows_that_cannot_be_keys_are_refused(text: str) -> None:
    """A list or dict in a row cannot be a key of the relation's state: refused by name, the rest applied
    (before, the engine raised midway through the batch, the earlier updates applied)."""
    view = ivm.maintain(text)
    outcome = view.apply([("R", (5, 7), 1), ("R", (1, [1]), 1), ("R", (2, {"x": 1}), 1)])
    assert [(r.index, r.kind) for r in outcome.rejected] == [(1, "unhashable"), (2, "unhashable")]
    assert outcome.applied == 1 and view.engine.multiplicity("R", (5, 7)) == 1


@pytest.mark.parametrize(
    ("field", "container"),
    [
        ({"type": "array", "items": "long"}, "array"),
        ({"type": "map", "values": "long"}, "map"),
        (["null", {"type": "record", "name": "In", "fields": [{"name": "x", "type": "long"}]}], "record"),
    ],
)
def test_a_relation_schema_with_containers_is_refused(field: object, container: str) -> None:
    from ivm.processor.codecs.avro import RelationCodec

    schema = {"type": "record", "name": "P", "fields": [{"name": "k", "type": "long"}, {"name": "t", "type": field}]}
    schema["fields"].append({"name": "mult", "type": "long"})  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match=f"attribute 't' is an Avro {container}"):
        RelationCodec.from_schema(schema)


def test_min_over_a_nullable_field_is_refused_at_planning(tmp_path: Path, capsys) -> None:
    from ivm.processor.cli import main

    schema = tmp_path / "P.avsc"
    schema.write_text(
        '{"type": "record", "name": "P", "fields": [{"name": "k", "type": "long"}, '
        '{"name": "v", "type": ["null", "long"]}, {"name": "w", "type": "string"}, {"name": "mult", "type": "long"}]}'
    )
    config = tmp_path / "p.toml"
    config.write_text(
        f'[[relations]]\nname = "P"\nschema = "{schema}"\n'
        '[[queries]]\nname = "ok"\nquery = "Q(k, MAX(w)) :- P(k, v, w)"\n'
        '[[queries]]\nname = "distinct"\nquery = "Q(k, COUNT(DISTINCT v)) :- P(k, v, w)"\n'
        '[[queries]]\nname = "bad"\nquery = "Q(k, MIN(v)) :- P(k, v, w)"\n'
    )
    assert main(["check", "-c", str(config)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("ivm check: [queries.bad] query: MIN(v) compares v, bound to P.v"), err


def test_categorical_variables_are_not_lifted_as_numbers(tmp_path: Path, capsys) -> None:
    """F-IVM's categorical covariance (a Chow-Liu model's) lifts its categorical variables as values:
    strings are taken there, by the View and at planning, while a continuous one must be a number."""
    from ivm.processor.cli import main

    view = ivm.maintain("Q(COVAR(a, b)) :- R(a, b)", engine="fivm", options={"categorical": ("b",)})
    assert view.engine.lifted_variables == {"a"}
    assert view.apply([("R", (1, "p"), 1), ("R", (2, "q"), 1)]).rejected == []
    assert [r.kind for r in view.apply([("R", ("x", "p"), 1)]).rejected] == ["not_a_number"]
    schema = tmp_path / "P.avsc"
    schema.write_text(
        '{"type": "record", "name": "P", "fields": [{"name": "c", "type": "string"}, '
        '{"name": "d", "type": "string"}, {"name": "mult", "type": "long"}]}'
    )
    config = tmp_path / "p.toml"
    config.write_text(
        f'[[relations]]\nname = "P"\nschema = "{schema}"\n'
        '[[queries]]\nname = "tree"\nquery = "Q(COVAR(c, d)) :- P(c, d)"\nmodel = "chow_liu"\n'
    )
    assert main(["check", "-c", str(config)]) == 0, capsys.readouterr().err
