"""The batch pipeline without Spark: decoding, dead letters, results, metrics.

The sink here is an in-memory implementation of the Sink protocol; the same
pipeline against the real broker and Spark is in tests/integration.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np

from ivm.processor.codecs.avro import OutputCodec, load_relation_codecs
from ivm.processor.config import load_config
from ivm.processor.pipeline import Pipeline, Record
from tests.oracles import apply_stream

ROOT = Path(__file__).resolve().parents[2]
CODECS = load_relation_codecs()


class MemorySink:
    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes | None, bytes]] = []
        self.flushes = 0

    def begin(self) -> None:
        pass

    def send(self, topic: str, key: bytes | None, value: bytes) -> None:
        self.sent.append((topic, key, value))

    def commit(self) -> None:
        self.flushes += 1

    def on(self, topic: str) -> list[dict | None]:
        """The records sent to ``topic``, decoded (``None``: a tombstone)."""
        codec = OutputCodec("dead_letter" if "dead" in topic else topic.rsplit(".", 1)[1])
        return [None if v is None else codec.decode(v) for t, _, v in self.sent if t == topic]

    def table(self, topic: str) -> dict[bytes, dict]:
        """``topic`` as a compacted topic holds it: the last value per key, tombstones delete."""
        codec = OutputCodec(topic.rsplit(".", 1)[1])
        out: dict[bytes, dict] = {}
        for t, key, value in self.sent:
            if t != topic:
                continue
            if value is None:
                out.pop(key, None)
            else:
                out[key] = codec.decode(value)
        return out


def _record(topic: str, offset: int, row: tuple, mult: int) -> Record:
    key, value = CODECS[topic].encode(row, mult)
    return Record(topic, 0, offset, key, value)


def test_results_and_dead_letters_per_batch() -> None:
    sink = MemorySink()
    pipeline = Pipeline(load_config(ROOT / "config" / "demo.toml"), sink)
    batch = [
        _record("R", 0, (1, 2), 1),
        _record("S", 0, (2, 3), 1),
        Record("T", 0, 0, b"k", b"\x01garbage"),
        _record("T", 1, (3, 1), 1),
        _record("R", 1, (5, 5), -1),  # delete of an absent tuple
        Record("X", 0, 0, None, b"\x00"),  # a topic no relation reads
    ]
    report = pipeline.process(batch, 0)
    assert report.results == {"triangle": 1}
    assert report.dead_letters == 3
    dead = sink.on("ivm.dead-letter")
    assert sorted((d["topic"], d["offset"]) for d in dead) == [("R", 1), ("T", 0), ("X", 0)]
    reasons = {d["topic"]: d["reason"] for d in dead}
    assert "malformed Avro" in reasons["T"]
    assert "absent tuple" in reasons["R"]
    assert "unknown relation topic" in reasons["X"]
    (result,) = sink.on("triangle.result")
    assert json.loads(result["value"]) == 1 and result["batch_id"] == 0
    assert {(o["topic"], o["offset"]) for o in result["offsets"]} == {("R", 2), ("S", 1), ("T", 2), ("X", 1)}
    assert result["applied"] == 3 and result["rejected"] == 1
    assert sink.flushes == 1


def test_random_batches_match_the_oracle() -> None:
    rng = random.Random(3)
    sink = MemorySink()
    pipeline = Pipeline(load_config(ROOT / "config" / "demo.toml"), sink)
    offsets = {"R": 0, "S": 0, "T": 0}
    stream: list[tuple[str, tuple, int]] = []
    for batch_id in range(20):
        batch = []
        for _ in range(rng.randint(0, 40)):
            rel = rng.choice("RST")
            row = (rng.randrange(5), rng.randrange(5))
            mult = rng.choice([1, 1, -1])
            batch.append(_record(rel, offsets[rel], row, mult))
            stream.append((rel, row, mult))
            offsets[rel] += 1
        rng.shuffle(batch)  # the pipeline restores offset order
        report = pipeline.process(batch, batch_id)
        db, _ = apply_stream(stream)
        expected = sum(
            m1 * db["S"].get((b, c), 0) * db["T"].get((c, a), 0) for (a, b), m1 in db["R"].items() for c in range(5)
        )
        assert report.results["triangle"] == expected


def _pipeline(raw: dict) -> tuple[Pipeline, MemorySink]:
    from ivm.processor.config import parse_config

    sink = MemorySink()
    return Pipeline(parse_config(raw), sink), sink


def test_shared_count_window_expires_in_fifo_order() -> None:
    pipeline, _sink = _pipeline(
        {
            "relations": [
                {"name": "R", "window_count": 3, "window_group": "w"},
                {"name": "S", "window_count": 3, "window_group": "w"},
            ],
            "queries": [{"name": "q", "query": "Q(a) :- R(a,b), S(b,c)", "engine": "fivm"}],
        }
    )
    view = pipeline.views["q"]
    assert view.explain()["patterns"]["R+S"] == "fifo (joint)"  # the window's pattern reaches the planner
    stream = [("R", (1, 2)), ("S", (2, 7)), ("R", (3, 2)), ("S", (2, 8)), ("R", (5, 9))]
    for i, (rel, row) in enumerate(stream):
        pipeline.process([_record(rel, i, row, 1)], i)
    # the window holds the last three tuples: R(3,2), S(2,8), R(5,9)
    assert dict(view.enumerate()) == {(3,): 1}
    assert view.engine.multiplicity("R", (1, 2)) == 0
    assert view.engine.multiplicity("S", (2, 7)) == 0


def test_linear_regression_model_is_published() -> None:
    import numpy as np

    pipeline, sink = _pipeline(
        {
            "relations": [{"name": "R"}, {"name": "S"}],
            "queries": [
                {
                    "name": "reg",
                    "query": "Q(COVAR(a, b, c)) :- R(a,b), S(b,c)",
                    "engine": "fivm",
                    "model": "linear_regression",
                    "label": "c",
                    "method": "closed_form",
                }
            ],
        }
    )
    rng = random.Random(1)
    rows_r = [(rng.randrange(10), rng.randrange(4)) for _ in range(30)]
    rows_s = [(b, rng.randrange(20)) for b in range(4) for _ in range(3)]
    batch = [_record("R", i, r, 1) for i, r in enumerate(rows_r)] + [
        _record("S", i, s, 1) for i, s in enumerate(rows_s)
    ]
    pipeline.process(batch, 0)
    (published,) = [OutputCodec("model").decode(v) for t, _, v in sink.sent if t == "reg.model"]
    model = json.loads(published["model"])
    join = [(a, b, c) for a, b in rows_r for b2, c in rows_s if b == b2]
    X = np.array([[1, a, b] for a, b, _ in join], dtype=float)
    y = np.array([c for *_, c in join], dtype=float)
    theta = np.linalg.lstsq(X, y, rcond=None)[0]
    assert abs(model["intercept"] - theta[0]) < 1e-6
    assert [round(v, 6) for v in model["coefficients"].values()] == [round(t, 6) for t in theta[1:]]


def _scaled_regression(method: str | None) -> tuple[Pipeline, MemorySink, list[Record], np.ndarray]:
    """A COVAR regression whose features differ in scale by 10^5 (an ill-conditioned ``Σ_FF``, as with a
    quantity beside a price): gradient descent needs far more steps than its cap there."""
    import numpy as np

    query = {"name": "reg", "query": "Q(COVAR(a, b, c)) :- R(a,b), S(b,c)", "engine": "fivm"}
    query.update({"model": "linear_regression", "label": "c"})
    if method is not None:
        query["method"] = method
    pipeline, sink = _pipeline({"relations": [{"name": "R"}, {"name": "S"}], "queries": [query]})
    rng = random.Random(7)
    rows_r = [(rng.randrange(100_000), b) for b in range(4) for _ in range(8)]
    rows_s = [(b, rng.randrange(50)) for b in range(4) for _ in range(3)]
    batch = [_record("R", i, r, 1) for i, r in enumerate(rows_r)]
    batch += [_record("S", i, s, 1) for i, s in enumerate(rows_s)]
    join = [(a, b, c) for a, b in rows_r for b2, c in rows_s if b == b2]
    X = np.array([[1, a, b] for a, b, _ in join], dtype=float)
    y = np.array([c for *_, c in join], dtype=float)
    return pipeline, sink, batch, np.linalg.lstsq(X, y, rcond=None)[0]


def _models(sink: MemorySink) -> list[dict]:
    return [json.loads(OutputCodec("model").decode(v)["model"]) for t, _, v in sink.sent if t == "reg.model"]


def test_linear_regression_without_a_method_is_the_closed_form_least_squares_fit() -> None:
    """Issue 36 point 2: with ``method`` unset the model was gradient descent stopped at its cap,
    0.000503 against the fit's 0.000488, and nothing said so."""
    pipeline, sink, batch, theta = _scaled_regression(None)
    assert pipeline.query_configs["reg"].method == "closed_form"
    pipeline.process(batch, 0)
    (model,) = _models(sink)
    assert (model["method"], model["converged"]) == ("closed_form", True)
    got = [model["intercept"], *model["coefficients"].values()]
    assert np.allclose(got, theta, rtol=1e-9, atol=1e-12), (got, theta)
    assert model["gradient_norm"] < 1e-9


def test_unconverged_gradient_descent_says_so_in_the_record_the_log_and_a_metric(caplog) -> None:
    pipeline, sink, batch, theta = _scaled_regression("gradient_descent")
    pipeline.state.models["reg"].max_iter = 500  # the cap (100,000 in production) is reached either way here
    with caplog.at_level("WARNING", logger="ivm.processor.pipeline"):
        pipeline.process(batch, 0)
    (model,) = _models(sink)
    assert model["method"] == "gradient_descent"
    assert model["converged"] is False
    assert model["iterations"] == model["max_iterations"] == 500
    assert model["gradient_norm"] > 1e-9
    got = [model["intercept"], *model["coefficients"].values()]
    assert not np.allclose(got, theta, rtol=1e-6)  # what the record warns about: not the fit
    assert "not converged" in caplog.text and "reg" in caplog.text
    sample = pipeline.metrics.registry.get_sample_value("ivm_model_not_converged_total", {"query": "reg"})
    assert sample == 1.0
