"""The pipeline's relations and the state a restart adopts (no Kafka: an in-memory sink).

Each test fails on the code before the relations' contents existed: a bad update
was dead-lettered once per query reading its relation, a record named otherwise
than its relation was dropped without a word, and a snapshot was reused or thrown
away by the list of query names alone.
"""

from __future__ import annotations

import json
import pickle
import random
from pathlib import Path

import pytest

from ivm.policy import Policy
from ivm.processor.codecs.avro import RelationCodec, load_relation_codecs
from ivm.processor.config import PipelineConfig, QueryConfig, RelationConfig
from ivm.processor.pipeline import Pipeline, Record
from ivm.processor.state.recovery import RecoveryError, StateStore, adopt
from ivm.processor.state.relations import RelationStore
from tests.oracles import count
from tests.unit.test_pipeline import MemorySink

CODECS = load_relation_codecs()
TRIANGLE = "Q() :- R(a,b), S(b,c), T(c,a)"
TWO_PATH = "Q() :- R(a,b), S(b,c)"


def _config(queries: dict[str, str], relations: str = "RST", **options) -> PipelineConfig:
    return PipelineConfig(
        relations=tuple(RelationConfig(r, r, Path(f"relations/{r}.avsc")) for r in relations),
        queries=tuple(QueryConfig(name, text, options.pop(f"{name}_engine", "auto")) for name, text in queries.items()),
        policy=Policy(),
        **options,
    )


def _stream(seed: int, n: int, relations: str = "RST", domain: int = 6) -> list[tuple[str, tuple, int]]:
    """Random inserts and deletes of present tuples, and some deletes of absent ones (to be refused)."""
    rng = random.Random(seed)
    present: dict[str, dict[tuple, int]] = {r: {} for r in relations}
    out = []
    for _ in range(n):
        rel = rng.choice(relations)
        row = (rng.randrange(domain), rng.randrange(domain))
        have = present[rel].get(row, 0)
        mult = -1 if rng.random() < 0.35 else 1
        if mult < 0 and not have and rng.random() < 0.7:
            mult = 1
        if have + mult >= 0:
            present[rel][row] = have + mult
        out.append((rel, row, mult))
    return out


def _records(stream, start: dict[str, int] | None = None) -> list[Record]:
    offsets = dict(start or {})
    out = []
    for rel, row, mult in stream:
        key, value = CODECS[rel].encode(row, mult)
        out.append(Record(rel, 0, offsets.get(rel, 0), key, value))
        offsets[rel] = offsets.get(rel, 0) + 1
    return out


def _database(stream) -> dict[str, dict[tuple, int]]:
    """The relations after ``stream`` under the default policy (deletes of absent tuples refused)."""
    db: dict[str, dict[tuple, int]] = {}
    for rel, row, mult in stream:
        have = db.setdefault(rel, {}).get(row, 0)
        if have + mult < 0:
            continue
        if have + mult:
            db[rel][row] = have + mult
        else:
            del db[rel][row]
    return db


def test_policy_is_enforced_once_per_relation() -> None:
    """Two queries read R; a delete of an absent R tuple is one dead letter, not two, and every
    admitted update reaches both queries."""
    sink = MemorySink()
    pipeline = Pipeline(_config({"tri": TRIANGLE, "path": TWO_PATH}), sink)
    stream = [("R", (1, 2), 1), ("S", (2, 3), 1), ("R", (9, 9), -1), ("T", (3, 1), 1), ("R", (1, 2), 1)]
    report = pipeline.process(_records(stream), 0)
    dead = sink.on("ivm.dead-letter")
    assert [(d["topic"], d["offset"]) for d in dead] == [("R", 1)]
    assert "absent tuple" in dead[0]["reason"]
    assert report.results == {"tri": 2, "path": 2}
    assert {r["query"]: r["rejected"] for r in sink.on("tri.result") + sink.on("path.result")} == {"tri": 1, "path": 1}
    assert pipeline.state.relations["R"] == {(1, 2): 2}


def test_counters_consumed_equal_applied_plus_dead_lettered() -> None:
    sink = MemorySink()
    pipeline = Pipeline(_config({"tri": TRIANGLE, "path": TWO_PATH}), sink)
    stream = _stream(1, 600)
    records = _records(stream)
    for i in range(0, 40, 7):  # malformed values among them
        records[i] = Record(records[i].topic, 0, records[i].offset, None, b"\x01not avro")
    for start in range(0, len(records), 100):
        pipeline.process(records[start : start + 100])
    m = pipeline.metrics
    dead_total = 0
    for rel in "RST":
        consumed = m.relation_consumed.labels(rel)._value.get()
        applied = m.relation_applied.labels(rel)._value.get()
        dead = m.relation_dead_lettered.labels(rel)._value.get()
        assert consumed == sum(1 for r in records if r.topic == rel) > 0
        assert consumed == applied + dead
        dead_total += dead
    assert dead_total == len(sink.on("ivm.dead-letter")) > 6
    good = [s for i, s in enumerate(stream) if not (i < 40 and i % 7 == 0)]
    db = _database(good)
    from ivm.query import parse

    assert json.loads(sink.on("tri.result")[-1]["value"]) == count(parse(TRIANGLE), db)


def test_record_named_otherwise_than_its_relation(tmp_path: Path) -> None:
    """A relation `edges` whose Avro record is named `Edge`: its updates are applied to `edges`."""
    schema = {
        "type": "record",
        "name": "Edge",
        "namespace": "com.example",
        "fields": [{"name": "src", "type": "long"}, {"name": "dst", "type": "long"}, {"name": "mult", "type": "long"}],
    }
    path = tmp_path / "edge.avsc"
    path.write_text(json.dumps(schema))
    config = PipelineConfig(
        relations=(RelationConfig("edges", "edges-topic", path),),
        queries=(QueryConfig("paths", "Q() :- edges(a,b), edges(b,c)"),),
    )
    sink = MemorySink()
    pipeline = Pipeline(config, sink)
    codec = RelationCodec.from_schema(schema)
    records = [Record("edges-topic", 0, i, *codec.encode(row, 1)) for i, row in enumerate([(1, 2), (2, 3), (2, 4)])]
    report = pipeline.process(records, 0)
    assert report.results == {"paths": 2}
    assert report.dead_letters == 0 and report.applied == {"paths": 3}
    assert pipeline.metrics.relation_applied.labels("edges")._value.get() == 3


def _run(pipeline: Pipeline, stream, start: dict[str, int] | None = None) -> None:
    records = _records(stream, start)
    for i in range(0, len(records), 50):
        pipeline.process(records[i : i + 50])


def _roundtrip(pipeline: Pipeline, tmp_path: Path):
    store = StateStore(tmp_path / "state")
    store.save(pipeline.state)
    return store, store.load()


def test_changed_added_and_removed_queries_over_old_state(tmp_path: Path) -> None:
    """A query changed under the same name, a query added and one removed: each query's state is the
    query over everything committed, including tuples that came from no topic (a bootstrap)."""
    from ivm.query import parse

    first = Pipeline(_config({"q": TRIANGLE, "gone": TWO_PATH, "kept": TWO_PATH}), MemorySink())
    loaded = [("R", (0, 1), 1), ("S", (1, 2), 1), ("T", (2, 0), 1)]  # as a bootstrap loads them
    first.store.admit("R", [(0, 1)], [1])
    first.store.admit("S", [(1, 2)], [1])
    first.store.admit("T", [(2, 0)], [1])
    for name in first.views:
        first.build_query(name)
    stream = _stream(2, 400)
    _run(first, stream)
    kept_view = first.views["kept"]
    _store, snapshot = _roundtrip(first, tmp_path)

    config = _config({"q": TWO_PATH, "kept": TWO_PATH, "new": TRIANGLE})
    second = Pipeline(config, MemorySink())
    report = adopt(second, snapshot)
    assert report.kept == ["kept"] and report.rebuilt == {"q": "changed", "new": "new"}
    assert report.dropped == ["gone"]
    db = _database(loaded + stream)
    assert second.views["q"].result() == count(parse(TWO_PATH), db)
    assert second.views["new"].result() == count(parse(TRIANGLE), db)
    assert second.views["kept"].result() == kept_view.result() == count(parse(TWO_PATH), db)
    assert "gone" not in second.views
    # and the stream goes on for all of them
    more = _stream(3, 200)
    _run(second, more, start={r: sum(1 for s in stream if s[0] == r) for r in "RST"})
    db = _database(loaded + stream + more)
    assert second.views["q"].result() == count(parse(TWO_PATH), db)
    assert second.views["new"].result() == count(parse(TRIANGLE), db)


def test_an_engine_change_rebuilds_and_an_unchanged_query_is_reused(tmp_path: Path) -> None:
    first = Pipeline(_config({"q": TRIANGLE}, q_engine="first_order"), MemorySink())
    _run(first, _stream(4, 300))
    _, snapshot = _roundtrip(first, tmp_path)
    same = Pipeline(_config({"q": TRIANGLE}, q_engine="first_order"), MemorySink())
    assert adopt(same, pickle.loads(pickle.dumps(snapshot))).kept == ["q"]
    other = Pipeline(_config({"q": TRIANGLE}, q_engine="ivm_eps"), MemorySink())
    report = adopt(other, snapshot)
    assert report.rebuilt == {"q": "changed"}
    assert other.views["q"].engine.name == "ivm_eps"
    assert other.views["q"].result() == first.views["q"].result()


def test_reset_query_is_rebuilt_from_the_contents(tmp_path: Path) -> None:
    first = Pipeline(_config({"q": TRIANGLE, "p": TWO_PATH}), MemorySink())
    _run(first, _stream(5, 300))
    store, _ = _roundtrip(first, tmp_path)
    assert store.drop_query("q") == 1
    again = Pipeline(_config({"q": TRIANGLE, "p": TWO_PATH}), MemorySink())
    report = adopt(again, store.load())
    assert report.rebuilt == {"q": "reset"} and report.kept == ["p"]
    assert again.views["q"].result() == first.views["q"].result()


def test_a_changed_relation_is_refused(tmp_path: Path) -> None:
    first = Pipeline(_config({"q": TWO_PATH}), MemorySink())
    _run(first, _stream(6, 100))
    _, snapshot = _roundtrip(first, tmp_path)
    windowed = _config({"q": TWO_PATH})
    windowed = PipelineConfig(
        relations=(RelationConfig("R", "R", Path("relations/R.avsc"), window_count=5), *windowed.relations[1:]),
        queries=windowed.queries,
    )
    with pytest.raises(RecoveryError, match=r"relation\(s\) \['R'\] changed.*ivm reset"):
        adopt(Pipeline(windowed, MemorySink()), snapshot)


def test_relation_store_policies() -> None:
    bag = RelationStore.empty(["R"], Policy())
    assert bag.admit("R", [(1,), (1,), (1,)], [1, 1, -3]) == (
        [0, 1],
        [(2, "negative_multiplicity", bag.policy.check(2, -3)[1])],
    )
    sets = RelationStore.empty(["R"], Policy(duplicate="reject"))
    kept, refused = sets.admit("R", [(1,), (1,), (2,)], [1, 1, 1])
    assert kept == [0, 2] and refused[0][:2] == (1, "duplicate_insert")
    z = RelationStore.empty(["R"], Policy(negative="allow"))
    assert z.admit("R", [(1,)], [-2]) == ([0], []) and z.contents["R"] == {(1,): -2}


def test_progress_records_of_an_earlier_version_are_recognised() -> None:
    import io

    import fastavro

    from ivm.processor.codecs.avro import OutputCodec, load_schema, schemas_dir
    from ivm.processor.state.recovery import decode_progress

    codec = OutputCodec("progress")
    record = {
        "pipeline": "p",
        "batch_id": 7,
        "offsets": [{"topic": "R", "partition": 0, "offset": 3}],
        "timestamp_ms": 1,
    }
    schema = load_schema(schemas_dir() / "progress.avsc")  # the progress record before origin and bootstrapped
    legacy = {**schema, "fields": [f for f in schema["fields"] if f["name"] not in ("origin", "bootstrapped")]}
    old = io.BytesIO()
    fastavro.schemaless_writer(old, fastavro.parse_schema(legacy), record)
    decoded = decode_progress(codec, old.getvalue())
    assert decoded["legacy"] and decoded["batch_id"] == 7 and decoded["origin"] == []
    new = codec.encode({**record, "origin": [{"topic": "R", "partition": 0, "offset": 2}], "bootstrapped": True})
    decoded = decode_progress(codec, new)
    assert "legacy" not in decoded and decoded["bootstrapped"] and decoded["origin"][0]["offset"] == 2


@pytest.mark.parametrize(
    ("committed", "reason"),
    [
        ({"batch_id": 4, "offsets": [], "origin": [], "bootstrapped": True}, "bulk bootstrap"),
        ({"batch_id": 4, "offsets": [], "origin": [], "bootstrapped": False, "legacy": True}, "earlier version"),
    ],
)
def test_no_snapshot_and_a_history_outside_the_topics_is_refused(committed: dict, reason: str) -> None:
    from ivm.processor.state.recovery import _rebuild_from_topics

    pipeline = Pipeline(_config({"q": TRIANGLE}), MemorySink())
    with pytest.raises(RecoveryError, match=rf"{reason}.*ivm reset -c CONFIG --yes"):
        _rebuild_from_topics(pipeline, "127.0.0.1:1", committed, "/state")
