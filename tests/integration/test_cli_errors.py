"""The ``ivm`` command line against the real broker: the control topic through ``ivm subscribe``, every
field of ``ivm status --json``, and the errors that need a broker to happen (one line, no traceback).

The errors that need no broker (an unreachable one is a closed port) are in ``tests/unit/test_cli_errors.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ivm.processor.cli import main
from ivm.processor.config import dump_config
from ivm.processor.kafka.topics import create_topics
from tests.integration.helpers import pipeline_config

pytestmark = pytest.mark.integration


def run_cli(capfd: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str], list[str]]:
    """``(exit code, stdout lines, stderr lines)`` of ``ivm ARGV`` run in-process."""
    code = main(list(argv))
    out, err = capfd.readouterr()
    return code, out.splitlines(), err.splitlines()


def write_config(kafka, topic_prefix: str, tmp_path: Path) -> tuple[Path, object]:
    config = pipeline_config(kafka.bootstrap, topic_prefix, tmp_path / "state")
    path = tmp_path / "pipeline.toml"
    path.write_text(dump_config(config))
    return path, config


def test_the_control_topic_through_subscribe(kafka, topic_prefix: str, tmp_path: Path, capfd) -> None:
    path, config = write_config(kafka, topic_prefix, tmp_path)
    control = f"{config.name}.control"
    code, out, err = run_cli(capfd, "query", "add", "pairs", "Q(a) :- R(a, b)", "--pattern", "R=fifo", "-c", str(path))
    assert code == 0, err
    code, out, err = run_cli(capfd, "query", "remove", "pairs", "-c", str(path))
    assert code == 0, err
    for how in (["-c", str(path)], ["--bootstrap", kafka.bootstrap]):  # the kind from the configuration, or the name
        code, out, err = run_cli(capfd, "subscribe", control, *how, "--json", "--idle-timeout", "3")
        assert code == 0 and not err, err
        added, removed = (json.loads(line) for line in out)
        assert added["op"] == "add" and added["name"] == "pairs" and added["query"] == "Q(a) :- R(a, b)"
        assert added["patterns"] == ["R=fifo"] and added["timestamp_ms"].endswith("Z")
        assert removed["op"] == "remove" and removed["name"] == "pairs"
        code, out, err = run_cli(capfd, "subscribe", control, *how, "--idle-timeout", "3")
        assert code == 0 and out[0].startswith("add pairs: Q(a) :- R(a, b)") and out[1].startswith("remove pairs")


def test_status_json_of_a_pipeline_with_nothing_committed(kafka, topic_prefix: str, tmp_path: Path, capfd) -> None:
    path, config = write_config(kafka, topic_prefix, tmp_path)
    create_topics(kafka.bootstrap, [r.topic for r in config.relations])
    code, out, err = run_cli(capfd, "status", "-c", str(path), "--json")
    assert code == 0, err
    status = json.loads("\n".join(out))
    expected = {
        "pipeline": config.name,
        "last_committed_batch": None,
        "committed_at": None,
        "committed_offsets": [],
        "lag": {f"{r.topic}[0]": 0 for r in config.relations},
        "total_lag": 0,
        "snapshots": [],
        "state_dir": str(tmp_path / "state"),
        "queries": [q.name for q in config.queries],
        "lag_by_topic": {r.topic: 0 for r in config.relations},
        "running": False,
        "metrics": None,
    }
    assert {k: status[k] for k in expected} == expected
    assert status["process"]["state"] == "never ran"


def test_errors_that_need_a_broker_are_one_line(kafka, topic_prefix: str, tmp_path: Path, capfd) -> None:
    path, _ = write_config(kafka, topic_prefix, tmp_path)
    # a query the pipeline's relations cannot serve: a configuration finding, exit 2
    code, _, err = run_cli(capfd, "query", "add", "bad", "Q() :- U(a)", "-c", str(path))
    assert code == 2 and len(err) == 1 and err[0].startswith("ivm query add: ") and "U" in err[0], err
    # removing a query the pipeline does not have
    code, _, err = run_cli(capfd, "query", "remove", "ghost", "-c", str(path))
    assert code == 2 and len(err) == 1 and "'ghost'" in err[0], err
    # a topic that does not exist: the first line names it, then the output topics there are
    code, _, err = run_cli(capfd, "subscribe", f"{topic_prefix}ghost.result", "--bootstrap", kafka.bootstrap)
    assert code == 2 and err[0].startswith("ivm subscribe: ") and f"{topic_prefix}ghost.result" in err[0]
    assert "does not exist" in err[0] and not any("Traceback" in line for line in err)
