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


EDGES = {
    "type": "record",
    "name": "edges",
    "fields": [
        {"name": "src", "type": ["null", "long"]},
        {"name": "dst", "type": ["null", "long"]},
        {"name": "w", "type": ["null", "long", "string"]},  # a number or a string: `w > 2` is planned
        {"name": "mult", "type": "long"},
    ],
}
EDGE_QUERIES = {
    "heavy": "SELECT e.src, COUNT(*) FROM edges e WHERE e.w > 2 GROUP BY e.src",  # a string w: not_comparable
    # a self-join: src joins in e2 only, dst in e1 only, so a NULL in either is refused (null_join_key)
    "paths": "SELECT e1.src, COUNT(*) FROM edges e1 JOIN edges e2 ON e1.dst = e2.src GROUP BY e1.src",
    "all": "SELECT e.src, COUNT(*) FROM edges e GROUP BY e.src",  # refuses nothing: NULL is a group
}


def test_an_update_a_query_cannot_evaluate_is_dead_lettered_and_the_batch_applies_the_rest(tmp_path: Path) -> None:
    (tmp_path / "edges.avsc").write_text(json.dumps(EDGES))
    text = f'[processor]\nname = "g"\nstate_dir = "{tmp_path / "state"}"\n[kafka]\nbootstrap = "127.0.0.1:39092"\n'
    text += '[[relations]]\nname = "edges"\ntopic = "edges"\nschema = "edges.avsc"\n'
    for name, sql in EDGE_QUERIES.items():
        text += f"[[queries]]\nname = {json.dumps(name)}\nquery = {json.dumps(sql)}\n"
    (tmp_path / "g.toml").write_text(text)
    config = load_config(tmp_path / "g.toml")
    sink = MemorySink()
    pipeline = Pipeline(config, sink)
    codec = RelationCodec.from_schema(load_schema(tmp_path / "edges.avsc"), "edges")
    rows = [(1, 2, 5), (2, 3, "x"), (None, 1, 3), (2, None, 1), (3, 1, 7), (2, 1, 4), (1, 3, "y")]
    stream = [(row, 1) for row in rows] + [((2, 3, "x"), -1), ((None, 1, 3), -1), ((1, 2, 5), -1), ((3, 1, 7), 2)]
    refused_by = {  # the updates each query refuses, by the row's values alone (inserts and deletes alike)
        "heavy": lambda r: isinstance(r[2], str),
        "paths": lambda r: r[0] is None or r[1] is None,
        "all": lambda r: False,
    }
    con = duckdb.connect()
    con.execute("CREATE TABLE edges (src BIGINT, dst BIGINT, w BIGINT)")
    bags: dict[str, dict[tuple, int]] = {name: {} for name in EDGE_QUERIES}
    want_dead: list[tuple[int, str, str]] = []
    for start in range(0, len(stream), 5):
        batch = []
        for offset in range(start, min(start + 5, len(stream))):
            row, mult = stream[offset]
            key, value = codec.encode(row, mult)
            batch.append(Record("edges", 0, offset, key, value))
            for name, refused in refused_by.items():
                if refused(row):
                    want_dead.append((offset, name, "not_comparable" if name == "heavy" else "null_join_key"))
                else:
                    bags[name][row] = bags[name].get(row, 0) + mult
        report = pipeline.process(batch, start // 5)  # the batch goes on: no exception
        assert report.dead_letters == len([d for d in want_dead if start <= d[0] < start + 5])
        for name, sql in EDGE_QUERIES.items():
            con.execute("DELETE FROM edges")
            good = [(s, d, None if isinstance(w, str) else w) for (s, d, w), m in bags[name].items() for _ in range(m)]
            if good:
                con.executemany("INSERT INTO edges VALUES (?, ?, ?)", good)
            want = {tuple(r[:-1]): r[-1] for r in con.execute(sql).fetchall()}
            assert pipeline.views[name].result() == want, (name, start)
    letters = sink.on(config.dead_letter_topic)
    assert sorted((d["offset"], d["query"]) for d in letters) == sorted((o, q) for o, q, _ in want_dead)
    by_place = {(d["offset"], d["query"]): d["reason"] for d in letters}
    assert "'x' does not compare with 2 in w > 2 (string and number)" in by_place[(1, "heavy")]
    assert by_place[(1, "heavy")].startswith("query heavy: edges row (2, 3, 'x') cannot enter the query")
    assert "NULL at position 0 (src in edges(src, dst, w), dst in edges(dst, e2_dst, e2_w))" in by_place[(2, "paths")]
    assert {d["query"] for d in letters} == {"heavy", "paths"}  # "all" took every update, NULL as a group


def test_a_refused_update_in_a_window_is_dead_lettered_once_and_its_expiry_refused_quietly(tmp_path: Path) -> None:
    (tmp_path / "edges.avsc").write_text(json.dumps(EDGES))
    text = f'[processor]\nname = "g"\nstate_dir = "{tmp_path / "state"}"\n[kafka]\nbootstrap = "127.0.0.1:39092"\n'
    text += '[[relations]]\nname = "edges"\ntopic = "edges"\nschema = "edges.avsc"\nwindow_count = 2\n'
    text += f'[[queries]]\nname = "heavy"\nquery = {json.dumps(EDGE_QUERIES["heavy"])}\n'
    (tmp_path / "g.toml").write_text(text)
    config = load_config(tmp_path / "g.toml")
    sink = MemorySink()
    pipeline = Pipeline(config, sink)
    codec = RelationCodec.from_schema(load_schema(tmp_path / "edges.avsc"), "edges")
    rows = [(1, 2, 5), (2, 3, "x"), (3, 1, 7), (2, 1, 4), (4, 4, 1)]
    results = []
    for offset, row in enumerate(rows):
        key, value = codec.encode(row, 1)
        pipeline.process([Record("edges", 0, offset, key, value)], offset)
        results.append(pipeline.views["heavy"].result())
    # the window holds the last two tuples; (2, 3, 'x') is refused when it comes and when it expires
    assert results == [{(1,): 1}, {(1,): 1}, {(3,): 1}, {(3,): 1, (2,): 1}, {(2,): 1}]
    letters = sink.on(config.dead_letter_topic)
    assert [(d["offset"], d["query"]) for d in letters] == [(1, "heavy")]
