"""Keyed results: one record per changed group, tombstones, before/after deltas (no Kafka: an in-memory sink).

Each test materializes the result topic as a Kafka consumer would (last value per key, tombstones delete)
and compares it with the query recomputed by brute force; they fail on the earlier publishing, which wrote
the whole result under the query's name on every batch.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from ivm.processor.config import PipelineConfig, QueryConfig, RelationConfig
from ivm.processor.pipeline import Pipeline
from ivm.processor.publish import GroupKeyCodec, group_key_schema
from ivm.processor.state.recovery import StateStore, adopt
from tests.unit.test_pipeline import MemorySink
from tests.unit.test_relation_state import _database, _records, _stream

GROUP_SUM = "Q(a, SUM(c)) :- R(a,b), S(b,c)"
LISTING = "Q(a, c) :- R(a,b), S(b,c)"


def _config(queries: dict[str, str]) -> PipelineConfig:
    return PipelineConfig(
        relations=tuple(RelationConfig(r, r, Path(f"relations/{r}.avsc")) for r in "RS"),
        queries=tuple(QueryConfig(n, q) for n, q in queries.items()),
    )


def _oracle(db) -> tuple[dict, dict]:
    """(a -> SUM(c), (a, c) -> count) over R(a,b) ⋈ S(b,c); as in SQL, a group without rows is absent and a
    group with rows is present, even when its SUM is 0."""
    sums: dict = defaultdict(int)
    rows: dict = defaultdict(int)
    counts: dict = defaultdict(int)
    for (a, b), m in db.get("R", {}).items():
        for (b2, c), n in db.get("S", {}).items():
            if b == b2:
                sums[(a,)] += m * n * c
                rows[(a,)] += m * n
                counts[(a, c)] += m * n
    return {k: v for k, v in sums.items() if rows[k]}, {k: v for k, v in counts.items() if v}


def _materialized(pipeline: Pipeline, sink: MemorySink, name: str) -> dict:
    codec = GroupKeyCodec(group_key_schema(pipeline.views[name].query, pipeline.relation_schemas, name))
    table = sink.table(f"{name}.result")
    out = {}
    for key, record in table.items():
        group = codec.decode(key)
        assert json.loads(record["group"]) == list(group)
        out[group] = json.loads(record["value"])
    return out


def test_a_compacted_result_topic_holds_the_current_result() -> None:
    sink = MemorySink()
    pipeline = Pipeline(_config({"sums": GROUP_SUM, "pairs": LISTING}), sink)
    stream = _stream(7, 800, relations="RS", domain=5)
    left = _database(stream)
    stream += [(rel, row, -1) for rel, rows in left.items() for row, m in rows.items() for _ in range(m)]  # all gone
    records = _records(stream)
    for i in range(0, len(records), 40):
        sent_before = len(sink.sent)
        pipeline.process(records[i : i + 40])
        db = _database(stream[: i + 40])
        sums, counts = _oracle(db)
        assert _materialized(pipeline, sink, "sums") == sums
        assert _materialized(pipeline, sink, "pairs") == counts
        # only changed groups are written: never more records than groups that changed
        assert len(sink.sent) - sent_before <= 2 * (len(sums) + len(counts)) + 2 * 40 + 1
    assert _materialized(pipeline, sink, "sums") == {} and _materialized(pipeline, sink, "pairs") == {}
    assert None in sink.on("sums.result") and None in sink.on("pairs.result"), "groups gone leave tombstones"


def test_deltas_carry_before_and_after() -> None:
    sink = MemorySink()
    pipeline = Pipeline(_config({"sums": GROUP_SUM, "pairs": LISTING}), sink)
    records = _records(_stream(8, 600, relations="RS", domain=4))
    for i in range(0, len(records), 30):
        pipeline.process(records[i : i + 30])
    for name in ("sums", "pairs"):
        last: dict = {}
        for delta in sink.on(f"{name}.delta"):
            group = tuple(json.loads(delta["answer"]))
            assert delta["before"] == last.get(group), "each change starts where the previous one ended"
            assert delta["before"] != delta["after"]
            last[group] = delta["after"]
            if name == "pairs":
                before, after = json.loads(delta["before"] or "0"), json.loads(delta["after"] or "0")
                assert delta["mult"] == after - before
            else:
                assert delta["mult"] == (delta["after"] is not None) - (delta["before"] is not None)
        final = {g: json.loads(v) for g, v in last.items() if v is not None}
        assert final == _materialized(pipeline, sink, name)


def test_a_restart_publishes_only_the_differences(tmp_path: Path) -> None:
    """The published state comes back from the topic; a changed query's stale groups get tombstones."""
    sink = MemorySink()
    first = Pipeline(_config({"sums": GROUP_SUM}), sink)
    stream = _stream(9, 400, relations="RS", domain=5)
    records = _records(stream)
    first.process(records[:300])
    store = StateStore(tmp_path)
    store.save(first.state)
    contents = {k: r["value"] for k, r in sink.table("sums.result").items()}

    # the same query: nothing to republish until something changes
    again = Pipeline(_config({"sums": GROUP_SUM}), sink)
    adopt(again, store.load())
    again.keyed_result("sums").load(contents)
    again.process(records[300:])
    sums, _ = _oracle(_database(stream))
    assert _materialized(again, sink, "sums") == sums

    # the query changed under the same name (another head): old keys are removed
    changed = Pipeline(_config({"sums": "Q(b, SUM(c)) :- R(a,b), S(b,c)"}), sink)
    adopt(changed, store.load())
    changed.keyed_result("sums").load({k: r["value"] for k, r in sink.table("sums.result").items()})
    changed.process([])
    by_b: dict = defaultdict(int)
    rows_b: dict = defaultdict(int)
    db = _database(stream[:300])
    for (_a, b), m in db["R"].items():
        for (b2, c), n in db["S"].items():
            if b == b2:
                by_b[(b,)] += m * n * c
                rows_b[(b,)] += m * n
    assert _materialized(changed, sink, "sums") == {k: v for k, v in by_b.items() if rows_b[k]}
