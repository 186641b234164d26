"""A group whose SUM is 0 is still a row, as in SQL: every engine that serves SUM, sharded or not, against DuckDB.

``SELECT a, SUM(x) FROM R GROUP BY a`` has a row for every ``a`` with rows in ``R``, whatever its sum; a
group disappears only when its last row does.  The engines keep the Z × Z/R payload (the count beside
the sum, F-IVM Remark 18), so the group's presence is its count, not its sum.  Values are drawn from a
small set that cancels (±1, ±2, ±0.5, ±2^40) so that sums of 0 with rows behind them are common.
"""

from __future__ import annotations

import random
import zlib
from typing import Any

import duckdb
import pytest

import ivm

QUERIES = {
    "one relation": ("Q(a, SUM(x)) :- R(a, x)", "SELECT a, SUM(x) FROM R GROUP BY a"),
    "a join": ("Q(a, SUM(x)) :- R(a, x), S(a, y)", "SELECT R.a, SUM(R.x) FROM R JOIN S ON R.a = S.a GROUP BY R.a"),
}
HOW = [
    {"engine": "fivm"},
    {"engine": "fivm", "options": {"implementation": "python"}},
    {"engine": "first_order_delta"},
    {"engine": "aggregates"},
    {"engine": "fivm", "shards": 2},
    {},
]
VALUES = {
    "ints": [1, -1, 2, -2, 3],
    "floats": [0.5, -0.5, 1.25, -1.25, 2.0**40, -(2.0**40)],  # sums exact in binary64: DuckDB is the oracle
}


def recount(con: duckdb.DuckDBPyConnection, rows: dict[str, list[tuple]], sql: str) -> dict[tuple, Any]:
    for rel, table in rows.items():
        con.execute(f"DELETE FROM {rel}")
        if table:
            con.executemany(f"INSERT INTO {rel} VALUES (?, ?)", table)
    return {(a,): s for a, s in con.execute(sql).fetchall()}


@pytest.mark.parametrize("kind", sorted(VALUES))
@pytest.mark.parametrize("how", HOW, ids=lambda h: "-".join(f"{k}={v}" for k, v in h.items()) or "auto")
@pytest.mark.parametrize("name", sorted(QUERIES))
def test_a_group_with_rows_is_a_row_even_when_its_sum_is_0(name: str, how: dict[str, Any], kind: str) -> None:
    rule, sql = QUERIES[name]
    view = ivm.maintain(rule, **how)  # each of HOW serves both queries: a refusal fails
    rng = random.Random(zlib.crc32(f"{name}/{kind}".encode()))
    con = duckdb.connect()
    ftype = "DOUBLE" if kind == "floats" else "BIGINT"
    con.execute(f"CREATE TABLE R (a BIGINT, x {ftype})")
    con.execute("CREATE TABLE S (a BIGINT, y BIGINT)")
    rows: dict[str, list[tuple]] = {"R": [], "S": []}
    zero_groups_seen = 0
    for _ in range(40):
        batch = []
        for _ in range(rng.choice([1, 3, 8])):
            rel = "R" if "S(" not in rule or rng.random() < 0.7 else "S"
            if rows[rel] and rng.random() < 0.3:
                row = rows[rel].pop(rng.randrange(len(rows[rel])))
                batch.append((rel, row, -1))
            else:
                row = (rng.randrange(4), rng.choice(VALUES[kind]) if rel == "R" else rng.randrange(2))
                rows[rel].append(row)
                batch.append((rel, row, 1))
        view.apply(batch)
        want = recount(con, rows, sql)
        got = view.result()
        assert got.keys() == want.keys(), (rule, how)
        for group, value in want.items():
            assert got[group] == value, (rule, how, group)
            zero_groups_seen += value == 0
    assert zero_groups_seen, "the stream never made a group sum to 0 over its rows: the test proves nothing"
