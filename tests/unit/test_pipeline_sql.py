"""A pipeline whose query is SQL with a selection, an expression in SUM and COUNT(col), in-process (no Spark).

The relations' records are all admitted to their contents (a filtered record is valid input, never a
dead letter); the selection drops the failing ones where they enter the view, and the result equals
DuckDB's over the same rows.  Queries whose selections or expressions every update would fail (by the
relations' Avro types) are refused when the pipeline is planned, naming the part.
"""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from ivm.processor.codecs.avro import RelationCodec, load_schema
from ivm.processor.config import load_config
from ivm.processor.pipeline import Pipeline, Record
from tests.unit.test_pipeline import MemorySink

ORDERS = {
    "type": "record",
    "name": "orders",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "product", "type": "long"},
        {"name": "qty", "type": "long"},
        {"name": "price", "type": "double"},
        {"name": "coupon", "type": ["null", "string"]},
        {"name": "mult", "type": "long"},
    ],
}
PRODUCTS = {
    "type": "record",
    "name": "products",
    "fields": [
        {"name": "product", "type": "long"},
        {"name": "category", "type": "string"},
        {"name": "mult", "type": "long"},
    ],
}
SQL = (
    "SELECT p.category, SUM(o.qty * (o.price - 1)) FROM orders o JOIN products p USING (product) "
    "WHERE (o.qty > 2 OR o.coupon IS NOT NULL) AND p.category NOT IN ('toys') GROUP BY p.category"
)
COUNT_SQL = "SELECT o.product, COUNT(o.coupon) FROM orders o WHERE o.qty BETWEEN 2 AND 8 GROUP BY o.product"


def write_config(folder: Path, queries: dict[str, str]) -> Path:
    (folder / "orders.avsc").write_text(json.dumps(ORDERS))
    (folder / "products.avsc").write_text(json.dumps(PRODUCTS))
    text = f'[processor]\nname = "shop"\nstate_dir = "{folder / "state"}"\n[kafka]\nbootstrap = "127.0.0.1:39092"\n'
    for name in ("orders", "products"):
        text += f'[[relations]]\nname = "{name}"\ntopic = "{name}"\nschema = "{name}.avsc"\n'
    for name, sql in queries.items():
        text += f"[[queries]]\nname = {json.dumps(name)}\nquery = {json.dumps(sql)}\n"
    (folder / "shop.toml").write_text(text)
    return folder / "shop.toml"


def test_a_sql_pipeline_filters_where_updates_enter_and_matches_duckdb(tmp_path: Path) -> None:
    config = load_config(write_config(tmp_path, {"revenue": SQL, "coupons": COUNT_SQL}))
    sink = MemorySink()
    pipeline = Pipeline(config, sink)
    codecs = {
        name: RelationCodec.from_schema(load_schema(tmp_path / f"{name}.avsc"), name) for name in ("orders", "products")
    }
    products = [(1, "books"), (2, "toys"), (3, "games")]
    orders = [
        (10, 1, 3, 2.5, None),
        (11, 1, 1, 9.0, None),  # filtered: qty 1 and no coupon
        (12, 1, 1, 4.0, "SPRING"),
        (13, 2, 9, 1.5, None),  # passes, joins the filtered product 'toys'
        (14, 3, 2, 3.0, "X"),
        (15, 3, 5, 1.0, None),
    ]
    stream = [("products", row, 1) for row in products] + [("orders", row, 1) for row in orders]
    stream += [("orders", orders[1], -1), ("orders", orders[0], -1), ("orders", (16, 3, 8, 0.5, "Y"), 2)]
    offsets = {"orders": 0, "products": 0}
    bags: dict[str, dict[tuple, int]] = {"orders": {}, "products": {}}
    con = duckdb.connect()
    con.execute("CREATE TABLE orders (id BIGINT, product BIGINT, qty BIGINT, price DOUBLE, coupon VARCHAR)")
    con.execute("CREATE TABLE products (product BIGINT, category VARCHAR)")
    for start in range(0, len(stream), 4):
        batch = []
        for relation, row, mult in stream[start : start + 4]:
            key, value = codecs[relation].encode(row, mult)
            batch.append(Record(relation, 0, offsets[relation], key, value))
            offsets[relation] += 1
            bags[relation][row] = bags[relation].get(row, 0) + mult
        report = pipeline.process(batch, start // 4)
        assert report.dead_letters == 0  # filtered updates are valid input, not dead letters
        for relation, bag in bags.items():
            con.execute(f"DELETE FROM {relation}")
            rows = [row for row, m in bag.items() for _ in range(m)]
            if rows:
                con.executemany(f"INSERT INTO {relation} VALUES ({', '.join('?' * len(rows[0]))})", rows)
        for name, sql in (("revenue", SQL), ("coupons", COUNT_SQL)):
            want = {tuple(r[:-1]): r[-1] for r in con.execute(sql).fetchall()}
            got = pipeline.views[name].result()
            assert got.keys() == want.keys(), (name, got, want)
            assert all(got[k] == pytest.approx(want[k]) for k in want), (name, got, want)
    assert pipeline.views["revenue"].filtered == {"orders": 2, "products": 1}  # 11 in and out; 'toys'
    assert pipeline.views["revenue"].stats()["entry_filtered"] == 3


@pytest.mark.parametrize(
    ("sql", "why"),
    [
        (
            "SELECT COUNT(*) FROM orders o WHERE o.coupon > 5",
            "the selection of orders: coupon > 5 compares number with string (by the Avro types of orders's "
            "fields): every update would be refused",
        ),
        (
            "SELECT SUM(o.qty + o.coupon) FROM orders o",
            'the computed attribute expr1 of orders: (qty + coupon) takes orders.coupon of Avro type ["null", '
            '"string"], not a number type: every update would be refused',
        ),
        (
            "SELECT SUM(o.price / o.qty) FROM orders o",
            "the computed attribute expr1 := (price / qty) of orders divides by a field: a zero divisor gives NULL, "
            "which the aggregate cannot take (the update would be refused); divide by a constant",
        ),
        (
            "SELECT SUM(o.price / (2 - 2)) FROM orders o",
            "the computed attribute expr1 := (price / (2 - 2)) of orders divides by zero: its value is always NULL, "
            "which the aggregate cannot take",
        ),
    ],
)
def test_selections_and_expressions_every_update_would_fail_are_refused_at_planning(
    tmp_path: Path, sql: str, why: str
) -> None:
    config = load_config(write_config(tmp_path, {"q": sql}))
    with pytest.raises(ValueError) as error:
        Pipeline(config, MemorySink())
    assert why in str(error.value)
