"""The `ivm` command line against the real broker: produce, status, subscribe; exit codes."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from ivm.processor.config import dump_config
from ivm.processor.kafka.subscribe import reflects
from ivm.processor.kafka.topics import end_offsets
from tests.integration.helpers import pipeline_config, read_until

pytestmark = pytest.mark.integration


def ivm(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ivm.processor.cli", *args], capture_output=True, text=True, timeout=300
    )


def test_produce_status_and_exit_codes(kafka, start_job, topic_prefix, tmp_path: Path) -> None:
    config = pipeline_config(kafka.bootstrap, topic_prefix, tmp_path / "state")
    config_path = tmp_path / "pipeline.toml"
    config_path.write_text(dump_config(config))
    edges = tmp_path / "edges.txt"
    edges.write_text("# a triangle and a tail\n1 2\n2 3\n3 1\n3 4\n")
    # ivm produce writes to each relation's default topic, its name
    for rel in "RST":
        out = ivm("produce", str(edges), "-r", rel, "--both-directions", "--bootstrap", kafka.bootstrap)
        assert out.returncode == 0, out.stderr
        assert "produced 8 updates" in out.stdout
    config = dataclasses.replace(
        config, relations=tuple(dataclasses.replace(r, topic=r.name) for r in config.relations)
    )
    job = start_job(config)
    final = end_offsets(kafka.bootstrap, ["R", "S", "T"])
    results = read_until(kafka.bootstrap, config.queries[0].result_topic, lambda rs: reflects(rs[-1], final))
    job.stop()
    # one undirected triangle, loaded in both directions: 2 directed cycles x 3 rotations
    assert int(results[-1]["value"]) == 6
    config_path.write_text(dump_config(config))
    status = ivm("status", "-c", str(config_path), "--json")
    assert status.returncode == 0, status.stderr
    report = json.loads(status.stdout)
    assert report["last_committed_batch"] == results[-1]["batch_id"]
    assert report["total_lag"] == 0
    assert ivm("status", "-c", str(tmp_path / "missing.toml")).returncode == 2
    assert ivm("produce", str(edges), "-r", "NOPE", "--bootstrap", kafka.bootstrap).returncode == 2
    sub = ivm("subscribe", config.queries[0].result_topic, "--bootstrap", kafka.bootstrap, "--idle-timeout", "5")
    assert sub.returncode == 0 and f"{config.queries[0].name} = {results[-1]['value']}" in sub.stdout
