"""Batches given as columns (``View.apply_columns``, ``Engine.apply_columns``) against the same rows.

``apply_columns(relation, columns, mults)`` means :meth:`apply` of the rows the columns hold
(:func:`ivm.updates.from_columns`). Checked here:

- every engine on every sample query of the protocol test: random insert/delete streams cut into
  runs of one relation, given as numpy columns, leave the same result, answers and base
  multiplicities as the rows given to ``apply``, under the default policy (deletes checked against
  the state: the rows path) and under ``negative="allow"`` (the columns reach the engine);
- F-IVM's typed path (the columns read straight into the relation's table, no Python tuple):
  covariance over int and float columns of several dtypes, pyarrow arrays, multiplicities other
  than 1, deletes to zero and zero multiplicities, bit for bit the result and the tables of the
  rows path; a spy asserts the rows path was not taken; every case the table cannot store as given
  (NaN, bools, strings, a float in an int column, uint64 past int64, a multiplicity past 2^31)
  takes the rows and ends in the same state;
- the View's refusals are the rows': an unknown relation, a wrong arity, a delete of an absent
  tuple, zero multiplicities, each by name and row index; malformed columns raise.
"""

from __future__ import annotations

import math
import os
import random
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import ivm
from ivm.engines.fivm import FIVM, base_relation
from ivm.engines.fivm import engine as fivm_engine
from ivm.policy import Policy
from ivm.updates import from_columns
from tests.unit.test_engine_protocol import CASES, random_stream

CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
BUILT = fivm_engine.parse_batch is not None and base_relation.RowTable is not None
needs_kernel = pytest.mark.skipif(not BUILT and not CI, reason="the compiled kernels are not built (pip install -e .)")

STAR = "Q(COVAR(k, a1, a2, b1, c1)) :- A(k, a1, a2), B(k, b1), C(k, c1)"


def runs(stream: list[tuple[str, tuple, int]]) -> list[tuple[str, list[tuple], list[int]]]:
    """The stream cut into maximal runs of one relation: ``(relation, rows, mults)``."""
    out: list[tuple[str, list[tuple], list[int]]] = []
    for relation, row, mult in stream:
        if not out or out[-1][0] != relation:
            out.append((relation, [], []))
        out[-1][1].append(row)
        out[-1][2].append(mult)
    return out


def as_columns(rows: list[tuple], arity: int) -> list[np.ndarray]:
    return [np.array([row[j] for row in rows], dtype=np.int64) for j in range(arity)]


@pytest.mark.parametrize(("engine", "text"), CASES)
@pytest.mark.parametrize("negative", ["reject", "allow"])
def test_columns_equal_rows_for_every_engine(engine: str, text: str, negative: str) -> None:
    query = ivm.parse(text)
    stream = random_stream(query, random.Random(3), 300, domain=5)
    arity = dict(query.relations)
    by_rows = ivm.maintain(query, engine=engine, policy=Policy(negative=negative))
    by_columns = ivm.maintain(query, engine=engine, policy=Policy(negative=negative))
    for relation, rows, mults in runs(stream):
        want = by_rows.apply([(relation, row, m) for row, m in zip(rows, mults, strict=True)])
        got = by_columns.apply_columns(relation, as_columns(rows, arity[relation]), np.array(mults))
        assert got == want
    assert by_columns.result() == by_rows.result()
    assert sorted(by_columns.enumerate()) == sorted(by_rows.enumerate())
    for relation, row, _ in stream:
        assert by_columns.engine.multiplicity(relation, row) == by_rows.engine.multiplicity(relation, row)


def star_rows(rng: random.Random, relation: str, n: int) -> list[tuple]:
    width = {"A": 2, "B": 1, "C": 1}[relation]
    return [(rng.randrange(40), *(round(rng.uniform(-5, 5), 2) for _ in range(width))) for _ in range(n)]


def star_columns(rows: list[tuple], key_dtype: Any = np.int64, value_dtype: Any = np.float64) -> list[np.ndarray]:
    keys = np.array([row[0] for row in rows], dtype=key_dtype)
    values = [np.array([row[j] for row in rows], dtype=value_dtype) for j in range(1, len(rows[0]))]
    return [keys, *values]


def assert_same(a: FIVM, b: FIVM) -> None:
    assert np.array_equal(a.result().matrix(), b.result().matrix())  # bit for bit: the same arithmetic
    for relation in a.query.relations:
        assert base_relation.to_dict(a.base[relation]) == base_relation.to_dict(b.base[relation])
        assert list(base_relation.to_dict(a.base[relation])) == list(base_relation.to_dict(b.base[relation]))


@needs_kernel
@pytest.mark.parametrize("seed", range(4))
def test_fivm_reads_columns_into_its_tables(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The typed path: inserts and deletes (multiplicities -3..3, zeros among them), keys of several
    int dtypes and values of float64 or float32, a pyarrow batch; never the rows path."""
    rng = random.Random(seed)
    query = ivm.parse(STAR)
    by_rows, by_columns = FIVM(query, exact=False), FIVM(query, exact=False)
    live: dict[tuple[str, tuple], int] = {}

    def rows_path(*_: Any) -> None:
        raise AssertionError("apply_columns took the rows path")

    for step in range(60):
        relation = rng.choice("ABC")
        mine = [row for (r, row), m in live.items() if r == relation]
        fresh = star_rows(rng, relation, rng.randint(1, 120))
        value_dtype: Any = np.float64
        if step % 7 == 3:  # float32 columns: values that widen exactly to the doubles of the rows
            fresh = [(row[0], *(float(np.float32(v)) for v in row[1:])) for row in fresh]
            mine, value_dtype = [], np.float32
        rows = fresh + rng.sample(mine, min(len(mine), rng.randint(0, 30)))
        mults = [rng.choice([1, 2, 3]) for _ in fresh] + [-live[(relation, row)] for row in rows[len(fresh) :]]
        mults = [m if rng.random() > 0.05 else 0 for m in mults]  # zero multiplicities change nothing
        for row, m in zip(rows, mults, strict=True):
            live[(relation, row)] = live.get((relation, row), 0) + m
            if not live[(relation, row)]:
                del live[(relation, row)]
        by_rows.apply([(relation, row, m) for row, m in zip(rows, mults, strict=True)])
        key_dtype = [np.int64, np.int32, np.uint16, np.int8][step % 4] if max(r[0] for r in rows) < 127 else np.int64
        columns: list[Any] = star_columns(rows, key_dtype, value_dtype)
        if step % 5 == 4:
            columns = [pa.array(c) for c in columns]
        monkeypatch.setattr(FIVM, "apply", rows_path)
        by_columns.apply_columns(relation, columns, np.array(mults, dtype=np.int64))
        monkeypatch.undo()
        assert_same(by_rows, by_columns)
    assert all(base_relation.is_table(by_columns.base[r]) for r in "ABC")
    assert dict(live) == {(r, row): m for r in "ABC" for row, m in base_relation.to_dict(by_columns.base[r]).items()}


@needs_kernel
def test_one_multiplicity_for_every_row_and_an_empty_batch() -> None:
    query = ivm.parse(STAR)
    rows = star_rows(random.Random(1), "A", 50)
    by_rows, by_columns = FIVM(query, exact=False), FIVM(query, exact=False)
    by_rows.apply([("A", row, 2) for row in rows])
    by_columns.apply_columns("A", star_columns(rows), 2)
    by_columns.apply_columns("B", [np.array([], np.int64), np.array([], np.float64)], np.array([], np.int64))
    assert_same(by_rows, by_columns)
    assert base_relation.to_dict(by_columns.base["B"]) == {}
    assert by_columns.base["B"].kinds_of() == (None, None)  # an empty batch fixes no column's kind


def _cases_the_table_cannot_store() -> list[tuple[str, list[Any], Any]]:
    keys = np.arange(4, dtype=np.int64)
    values = np.array([0.5, 1.5, 2.5, 3.5])
    return [
        ("nan", [keys, np.array([0.5, np.nan, 1.0, 2.0]), values], 1),
        ("bool", [keys, np.array([True, False, True, True]), values], 1),
        ("str", [np.array(["a", "b", "c", "d"], dtype=object), values, values], 1),
        ("int in a float column", [keys, np.arange(4), values], 1),
        ("uint64 past int64", [np.array([2**63 + 1, 1, 2, 3], dtype=np.uint64), values, values], 1),
        ("multiplicity past 2^31", [keys, values, values], np.array([1, 2**40, 1, 1])),
        ("one multiplicity past 2^31", [keys, values, values], 2**40),
    ]


@needs_kernel
@pytest.mark.parametrize(("case", "columns", "mults"), _cases_the_table_cannot_store())
def test_columns_the_table_cannot_store_take_the_rows(case: str, columns: list[Any], mults: Any) -> None:
    """Each such batch ends as its rows do (the relation moves to a dict where the rows path moves it)."""
    query = ivm.parse(STAR)
    seed_rows = [(k, 0.25 * k, 1.0) for k in range(4)]
    by_rows, by_columns = FIVM(query, exact=False), FIVM(query, exact=False)
    for engine in (by_rows, by_columns):
        engine.apply([("A", row, 1) for row in seed_rows] + [("B", (1, 2.0), 1), ("C", (1, 3.0), 1)])
    assert base_relation.column_cells(by_columns.base["A"], columns, mults) is None, case
    by_rows.apply(from_columns("A", columns, mults))
    by_columns.apply_columns("A", columns, mults)
    want_rows, got_rows = base_relation.to_dict(by_rows.base["A"]), base_relation.to_dict(by_columns.base["A"])
    assert {repr(k): m for k, m in got_rows.items()} == {repr(k): m for k, m in want_rows.items()}  # (NaN != NaN)
    assert base_relation.is_table(by_rows.base["A"]) == base_relation.is_table(by_columns.base["A"])
    got, want = by_columns.result().matrix(), by_rows.result().matrix()
    assert np.array_equal(got, want, equal_nan=True), case
    if case == "nan":
        assert math.isnan(got[2, 2])  # the NaN reached the result: the batch was applied, not dropped


@needs_kernel
@pytest.mark.parametrize(
    "dtype", ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", ">i8", "float16"]
)
@pytest.mark.parametrize("value_dtype", ["float32", "float64", ">f8", "float16", "int64"])
def test_every_dtype_means_its_python_values(dtype: str, value_dtype: str) -> None:
    """Native ints and float32/64 are read in C; other element types (big-endian, halves, an int in a
    float column) make the rows; each ends in the state of the rows its ``tolist()`` gives."""
    query = ivm.parse("Q(COVAR(k, a)) :- A(k, a), B(k)")
    keys = np.arange(0, 100, 3).astype(dtype)[::2]  # (strided)
    values = (np.arange(len(keys)) * 0.75 - 3).astype(value_dtype)
    by_rows, by_columns = FIVM(query, exact=False), FIVM(query, exact=False)
    for engine in (by_rows, by_columns):
        engine.apply([("A", (1, 0.5), 1), ("B", (1,), 1), ("B", (3,), 2), ("B", (6,), 1)])
    by_rows.apply(from_columns("A", [keys, values], 2))
    by_columns.apply_columns("A", [keys, values], 2)
    assert base_relation.to_dict(by_columns.base["A"]) == base_relation.to_dict(by_rows.base["A"])
    assert [type(v) for v in next(iter(base_relation.to_dict(by_columns.base["A"])))] == [int, float]
    assert base_relation.is_table(by_columns.base["A"]) == base_relation.is_table(by_rows.base["A"])
    assert np.array_equal(by_columns.result().matrix(), by_rows.result().matrix())
    native = dtype[0] != ">" and dtype != "float16" and value_dtype in ("float32", "float64")
    table = by_columns.base["A"]
    assert (base_relation.column_cells(table, [keys, values], 1) is not None) == (native and dtype != "float16")


def test_from_columns_is_the_meaning() -> None:
    assert from_columns("R", [np.array([1, 2], np.int32), pa.array([0.5, 1.5])], np.array([1, -1])) == [
        ("R", (1, 0.5), 1),
        ("R", (2, 1.5), -1),
    ]
    assert [type(v) for v in from_columns("R", [np.array([1], np.uint8), np.array([1.0], np.float32)])[0][1]] == [
        int,
        float,
    ]
    assert from_columns("R", [], np.array([1, 2])) == [("R", (), 1), ("R", (), 2)]
    with pytest.raises(ValueError, match="differ in length"):
        from_columns("R", [np.arange(3), np.arange(2)])
    with pytest.raises(ValueError, match="3 multiplicities for 2 rows"):
        from_columns("R", [np.arange(2)], [1, 1, 1])
    with pytest.raises(TypeError, match="multiplicity must be an int"):
        from_columns("R", [np.arange(2)], np.array([1.0, 2.0]))
    with pytest.raises(ValueError, match="one-dimensional"):
        from_columns("R", [np.zeros((2, 2))])


def test_the_view_refuses_what_the_rows_would_be_refused() -> None:
    text = "Q(COVAR(a, b)) :- R(k, a), S(k, b)"
    view = ivm.maintain(text)
    rows = ivm.maintain(text)
    keys, values = np.array([1, 2, 3]), np.array([0.5, 1.5, 2.5])
    # unknown relation and wrong arity: every row refused by name
    for relation, columns in (("Zz", [keys, values]), ("R", [keys]), ("R", [keys, values, values])):
        got = view.apply_columns(relation, columns)
        assert got == rows.apply(from_columns(relation, columns))
        assert got.applied == 0 and len(got.rejected) == 3
        assert {r.kind for r in got.rejected} == {"unknown_relation" if relation == "Zz" else "arity"}
    assert view.apply_columns("R", [keys, values]).applied == 3
    rows.apply(from_columns("R", [keys, values]))
    # deletes: the absent one refused by its row index, the others applied
    got = view.apply_columns("R", [np.array([1, 9, 3]), values], np.array([-1, -1, -1]))
    assert got == rows.apply(from_columns("R", [np.array([1, 9, 3]), values], np.array([-1, -1, -1])))
    assert [(r.index, r.kind) for r in got.rejected] == [(1, "absent_delete")] and got.applied == 2
    # a zero multiplicity is refused as by apply
    got = view.apply_columns("S", [keys, values], np.array([1, 0, 1]))
    assert got == rows.apply(from_columns("S", [keys, values], np.array([1, 0, 1])))
    assert [r.index for r in got.rejected] == [1]
    assert view.result().matrix().tolist() == rows.result().matrix().tolist()
    with pytest.raises(ValueError, match="differ in length"):
        view.apply_columns("R", [np.arange(3), np.arange(2.0)])
