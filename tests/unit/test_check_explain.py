"""``ivm check``, ``ivm explain`` and ``ivm run`` share one planning path: what run refuses, explain
and check refuse (exit 2, one line per reason), and what they accept, run builds with the same engine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import ivm
from ivm.processor.cli import main
from ivm.processor.config import load_config

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "config" / "demo.toml"
TRIANGLE = "Q() :- R(a,b), S(b,c), T(c,a)"
HIERARCHICAL = "Q() :- R(a,b), S(a,c)"


class NullSink:
    def begin(self) -> None: ...

    def send(self, topic: str, key: bytes | None, value: bytes) -> None: ...

    def commit(self) -> None: ...


def write_config(path: Path, query: str, engine: str = "auto", eps: float | None = None, patterns=()) -> Path:
    rels = sorted({atom.relation for atom in ivm.parse(query).atoms})
    lines = [f'[[relations]]\nname = "{r}"\nschema = "{ROOT}/schemas/relations/{r}.avsc"\n' for r in rels]
    lines.append(f'[[queries]]\nname = "q"\nquery = "{query}"\nengine = "{engine}"\n')
    if eps is not None:
        lines.append(f"eps = {eps}\n")
    if patterns:
        lines.append("patterns = [" + ", ".join(f'"{p}"' for p in patterns) + "]\n")
    path.write_text("".join(lines))
    return path


@pytest.fixture(autouse=True)
def keep_signal_handlers(monkeypatch) -> None:
    """``ivm run`` installs SIGINT/SIGTERM handlers; not in the test process."""
    import signal

    monkeypatch.setattr(signal, "signal", lambda *_: None)


@pytest.fixture
def runs(monkeypatch) -> list:
    """``ivm run`` without Kafka or Spark: its job builds the pipeline (the runtime's own refusals) and stops."""
    import ivm.processor.job
    from ivm.processor.pipeline import Pipeline

    built: list = []

    def fake_run_job(config, stop=None, **_):
        built.append(Pipeline(config, NullSink()))

    monkeypatch.setattr(ivm.processor.job, "run_job", fake_run_job)
    monkeypatch.setattr("ivm.processor.kafka.topics.require_broker", lambda *_a, **_k: None)  # no broker here
    return built


def test_check_prints_the_demo_pipeline(capsys) -> None:
    assert main(["check", "-c", str(DEMO)]) == 0
    out = capsys.readouterr().out
    expected = ivm.maintain(TRIANGLE).explain()
    assert f"engine:    {expected['engine']}" in out
    g = expected["guarantee"]
    assert f"guarantee: update {g['update']}; delay {g['delay']}; space {g['space']}" in out
    for rel in "RST":
        assert str(ROOT / "schemas" / "relations" / f"{rel}.avsc") in out
    assert "output topics: triangle.result, ivm.dead-letter, demo.progress" in out
    assert "input: isolation.level=read_committed, positions committed to consumer group 'demo' per batch" in out


def test_check_prints_every_finding_on_its_own_line(tmp_path: Path, capsys) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(
        '[processor]\nexactly_once = "false"\n[spark]\ncheckpoint = "/tmp/c"\n'
        '[[relations]]\nname = "R"\nencoding = "confluent"\n'
        '[[queries]]\nname = "q"\nquery = "Q() :- R(a,b), S(b,c)"\nmodle = "chow_liu"\n'
    )
    assert main(["check", "-c", str(path)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert all(line.startswith("ivm check: ") for line in err)
    assert len(err) == 5, err
    assert "ivm check: unknown key 'modle' in [queries.q]; did you mean 'model'?" in err


def test_check_reports_what_only_planning_finds(tmp_path: Path, capsys) -> None:
    path = write_config(tmp_path / "p.toml", "Q(COVAR(a, b)) :- R(a,b)")
    text = path.read_text().replace('engine = "auto"\n', 'engine = "fivm"\nmodel = "linear_regression"\nlabel = "z"\n')
    path.write_text(text)
    assert main(["check", "-c", str(path)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "ivm check: [queries.q] label: label 'z' is not one of the COVAR variables ('a', 'b')"
    ]


COMBINATIONS = [
    # (query, engine, eps, patterns, refused)
    (TRIANGLE, "auto", None, (), False),
    (TRIANGLE, "auto", 0.3, (), False),
    (TRIANGLE, "ivm_eps", 0.25, (), False),
    (TRIANGLE, "first_order", None, ("R=insert-only",), False),
    (TRIANGLE, "qhier", None, (), True),  # the engine cannot serve a cyclic query
    (TRIANGLE, "first_order", 0.3, (), True),  # first_order has no eps
    (TRIANGLE, "ivm_eps", 1.5, (), True),  # eps outside [0, 1]
    (TRIANGLE, "auto", None, ("X=insert-only",), True),  # a pattern for a relation the query does not use
    (TRIANGLE, "auto", None, ("R=sometimes",), True),
    (HIERARCHICAL, "auto", None, (), False),
    (HIERARCHICAL, "qhier", None, ("R=insert-only",), False),
    (HIERARCHICAL, "auto", 0.5, (), True),  # the planner's engine (fivm) has no eps: it would be unused
    (HIERARCHICAL, "ivm_eps", None, (), True),  # not a triangle
]


@pytest.mark.parametrize(("query", "engine", "eps", "patterns", "refused"), COMBINATIONS)
def test_explain_check_and_run_agree(query, engine, eps, patterns, refused, tmp_path: Path, capsys, runs) -> None:
    path = write_config(tmp_path / "p.toml", query, engine, eps, patterns)
    flags = ["--engine", engine] + (["--eps", str(eps)] if eps is not None else [])
    flags += [arg for p in patterns for arg in ("--pattern", p)]
    outputs = {}
    for command, argv in (
        ("run", ["run", "-c", str(path)]),
        ("check", ["check", "-c", str(path)]),
        ("explain", ["explain", query, *flags, "--json"]),
        ("explain -c", ["explain", "-c", str(path), "q", "--json"]),
    ):
        code = main(argv)
        outputs[command] = (code, capsys.readouterr())
    codes = {command: code for command, (code, _) in outputs.items()}
    assert codes == dict.fromkeys(codes, 2 if refused else 0), {c: o.err for c, (_, o) in outputs.items()}
    if refused:
        assert not runs, "run connected to Kafka with a configuration it refuses"
        for command, (_, out) in outputs.items():
            lines = out.err.splitlines()
            assert lines, command
            assert all(line.startswith(f"ivm {command.split()[0]}: ") for line in lines), lines
        assert len(outputs["explain"][1].err.splitlines()) == 1
        return
    (pipeline,) = runs
    running = pipeline.views["q"].explain()
    for command in ("explain", "explain -c"):
        explained = json.loads(outputs[command][1].out)
        assert (explained["engine"], explained["guarantee"]) == (running["engine"], running["guarantee"]), command
    assert f"engine:    {running['engine']}" in outputs["check"][1].out


def test_explain_with_a_configuration_refuses_what_run_refuses(tmp_path: Path, capsys) -> None:
    path = write_config(tmp_path / "p.toml", TRIANGLE)
    assert main(["explain", "-c", str(path), "q", "--engine", "qhier"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("ivm explain: [queries.q] engine: engine 'qhier' cannot maintain")
    assert main(["explain", "-c", str(path), "nope"]) == 2
    assert capsys.readouterr().err.strip() == f"ivm explain: no query 'nope' in {path}; give one of: q"
    assert main(["explain", "-c", str(DEMO)]) == 0  # its only query
    assert "guarantee (N = database size)" in capsys.readouterr().out


def test_run_validates_the_overridden_configuration_before_connecting(capsys, runs) -> None:
    assert main(["run", "-c", str(DEMO), "--shards", "0"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "ivm run: [processor] shards: expected an integer >= 1, got the integer 0"
    ]
    assert not runs


def test_run_ends_with_one_line_when_kafka_cannot_be_reached(monkeypatch, capsys) -> None:
    from confluent_kafka import KafkaError, KafkaException

    import ivm.processor.job

    def unreachable(config, **_):
        # what AdminClient.list_topics raises when no broker answers (ivm.processor.kafka.topics.create_topics)
        raise KafkaException(
            KafkaError(KafkaError._TRANSPORT, "Failed to get metadata: Local: Broker transport failure")
        )

    monkeypatch.setattr(ivm.processor.job, "run_job", unreachable)
    monkeypatch.setattr("ivm.processor.kafka.topics.require_broker", lambda *_a, **_k: None)  # the failure comes later
    assert main(["run", "-c", str(DEMO), "--bootstrap", "127.0.0.1:1"]) == 1
    assert capsys.readouterr().err.splitlines() == [
        "ivm run: Kafka at 127.0.0.1:1: Failed to get metadata: Local: Broker transport failure (_TRANSPORT)"
    ]
    assert load_config(DEMO).bootstrap == "127.0.0.1:9092"
