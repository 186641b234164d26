"""The heartbeat ``ivm run`` keeps in its state folder, and ``ivm status``'s verdicts from it (no Kafka:
the Kafka reads of ``ivm status`` are replaced)."""

from __future__ import annotations

import http.server
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import ivm.processor.commands.status as status_command
from ivm.processor.cli import main
from ivm.processor.commands.status import QueryResult, render_text, watch_document
from ivm.processor.config import dump_config, load_config
from ivm.processor.local.ports import free_port
from ivm.processor.operations.heartbeat import (
    LAST_RUN_FILE,
    RUNNING_FILE,
    STALE_INTERVALS,
    Heartbeat,
    iso,
    liveness,
    pid_alive,
)

DEMO = Path(__file__).resolve().parents[2] / "config" / "demo.toml"
HOST = socket.gethostname()


def wait_for(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def write_running(folder: Path, *, age: float, pid: int | None = None, host: str = HOST, **extra: Any) -> None:
    """A ``running.json`` as a job writes it, its last heartbeat ``age`` seconds ago (interval 1 s)."""
    now = time.time()
    folder.mkdir(parents=True, exist_ok=True)
    record = {
        "pipeline": "demo",
        "pid": os.getpid() if pid is None else pid,
        "host": host,
        "started_at": iso(now - age - 60),
        "heartbeat_at": iso(now - age),
        "interval_seconds": 1.0,
        "metrics_url": None,
        **extra,
    }
    (folder / RUNNING_FILE).write_text(json.dumps(record))


def dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


# --- the file's life cycle -------------------------------------------------------------------------------


def test_the_heartbeat_file_is_written_refreshed_and_removed_on_stop(tmp_path: Path) -> None:
    folder = tmp_path / "state" / "demo"  # created by the heartbeat
    beat = Heartbeat(folder, "http://127.0.0.1:9108/metrics", pipeline="demo", interval=0.05).start()
    try:
        record = json.loads((folder / RUNNING_FILE).read_text())
        assert record["pid"] == os.getpid() and record["host"] == HOST and record["pipeline"] == "demo"
        assert record["metrics_url"] == "http://127.0.0.1:9108/metrics" and record["interval_seconds"] == 0.05
        assert record["started_at"].endswith("Z") and record["heartbeat_at"] == record["started_at"]
        first = record["heartbeat_at"]
        wait_for(lambda: json.loads((folder / RUNNING_FILE).read_text())["heartbeat_at"] != first)
        verdict = liveness(folder)
        assert verdict.running and verdict.pid == os.getpid() and verdict.this_host
        assert verdict.describe().startswith(f"running (pid {os.getpid()} on {HOST}, heartbeat ")
        assert verdict.metrics_url == "http://127.0.0.1:9108/metrics"
    finally:
        beat.stop()
    assert not (folder / RUNNING_FILE).exists()
    last = json.loads((folder / LAST_RUN_FILE).read_text())
    assert last["pid"] == os.getpid() and last["stopped_at"].endswith("Z")
    refreshed = json.loads((folder / LAST_RUN_FILE).read_text())["heartbeat_at"]
    time.sleep(0.2)  # the thread is gone: nothing refreshes anything any more
    assert not (folder / RUNNING_FILE).exists()
    assert json.loads((folder / LAST_RUN_FILE).read_text())["heartbeat_at"] == refreshed
    verdict = liveness(folder)
    assert verdict.state == "not running" and verdict.describe().startswith("not running (stopped cleanly ")
    assert not [p for p in folder.iterdir() if p.name.endswith(".tmp")], "a temporary file was left behind"


def test_stop_leaves_a_file_another_job_took_over(tmp_path: Path) -> None:
    beat = Heartbeat(tmp_path, interval=60).start()
    write_running(tmp_path, age=0, pid=os.getpid() + 1, host="elsewhere")  # a newer job of the same pipeline
    beat.stop()
    assert json.loads((tmp_path / RUNNING_FILE).read_text())["host"] == "elsewhere"
    assert not (tmp_path / LAST_RUN_FILE).exists()


def test_a_folder_that_cannot_be_written_does_not_stop_the_job(tmp_path: Path, caplog) -> None:
    blocked = tmp_path / "state"
    blocked.write_text("a file where the folder should be")
    beat = Heartbeat(blocked, interval=0.05).start()
    time.sleep(0.15)
    beat.stop()
    assert "cannot write the heartbeat file" in caplog.text
    assert liveness(blocked).state == "never ran"


def test_a_heartbeat_that_stops_beating_goes_stale(tmp_path: Path) -> None:
    """A process that dies leaves running.json behind; past three intervals it reads as not running."""
    beat = Heartbeat(tmp_path, interval=0.05).start()
    beat._stop.set()  # the thread ends without the clean stop's clean-up, as when the process dies
    beat._thread.join(1)
    assert liveness(tmp_path).running
    time.sleep(STALE_INTERVALS * 0.05 + 0.1)
    verdict = liveness(tmp_path)
    assert verdict.state == "not running" and verdict.describe().startswith("not running (last heartbeat ")


# --- the verdicts ----------------------------------------------------------------------------------------


def test_a_fresh_heartbeat_of_a_live_process_is_running(tmp_path: Path) -> None:
    write_running(tmp_path, age=0.2)
    verdict = liveness(tmp_path)
    assert verdict.running and verdict.describe() == f"running (pid {os.getpid()} on {HOST}, heartbeat 0s ago)"
    assert verdict.as_json()["heartbeat_at"].endswith("Z") and verdict.as_json()["state"] == "running"


def test_a_stale_heartbeat_is_not_running(tmp_path: Path) -> None:
    write_running(tmp_path, age=STALE_INTERVALS * 1.0 + 40)
    verdict = liveness(tmp_path)
    assert not verdict.running
    assert verdict.describe() == "not running (last heartbeat 43s ago)"


def test_a_dead_pid_is_not_running_however_fresh(tmp_path: Path) -> None:
    pid = dead_pid()
    write_running(tmp_path, age=0.1, pid=pid)
    verdict = liveness(tmp_path)
    assert (
        verdict.state == "not running"
        and verdict.describe() == f"not running (last heartbeat 0s ago; pid {pid} is gone)"
    )
    write_running(tmp_path, age=0.1, pid=12345)  # the pid check is the injected one
    assert not liveness(tmp_path, alive=lambda pid: False).running
    assert liveness(tmp_path, alive=lambda pid: True).running


def test_a_pid_on_another_host_is_not_checked(tmp_path: Path) -> None:
    write_running(tmp_path, age=1, pid=dead_pid(), host="elsewhere")
    verdict = liveness(tmp_path)
    assert verdict.running and not verdict.this_host and "on elsewhere" in verdict.describe()
    write_running(tmp_path, age=3600 * 5, host="elsewhere")
    assert liveness(tmp_path).describe() == "not running (last heartbeat 5h 0m ago)"


def test_no_file_is_never_ran_and_a_broken_one_is_not_running(tmp_path: Path) -> None:
    assert liveness(tmp_path / "absent").describe() == "never ran here"
    assert liveness(tmp_path).state == "never ran"
    (tmp_path / RUNNING_FILE).write_text("{half a fi")
    verdict = liveness(tmp_path)
    assert verdict.state == "not running" and "cannot be read" in verdict.reason


def test_pid_alive() -> None:
    assert pid_alive(os.getpid())
    assert not pid_alive(dead_pid())
    assert not pid_alive(0)
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])
    wait_for(lambda: Path(f"/proc/{zombie.pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z")
    try:
        assert not pid_alive(zombie.pid), "an exited child not reaped yet is not a running job"
    finally:
        zombie.wait()


# --- ivm status, its Kafka reads replaced ------------------------------------------------------------------


@pytest.fixture
def metrics_server() -> Iterator[int]:
    """A port where something answers GET /metrics with 200."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"ivm_up 1\n")

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_port
    server.shutdown()
    server.server_close()


def without_kafka(monkeypatch: pytest.MonkeyPatch, committed: dict | None = None, ends: dict | None = None) -> None:
    import ivm.processor.kafka.topics
    import ivm.processor.state.recovery

    monkeypatch.setattr(ivm.processor.kafka.topics, "require_broker", lambda bootstrap, timeout=5.0: None)
    monkeypatch.setattr(ivm.processor.state.recovery, "read_committed_progress", lambda bootstrap, topic: committed)
    monkeypatch.setattr(
        ivm.processor.kafka.topics, "end_offsets", lambda bootstrap, topics, isolation="read_committed": ends or {}
    )
    monkeypatch.setattr(
        status_command, "dead_letter_document",
        lambda config: {"topic": config.dead_letter_topic, "total": 11, "by_reason": {"malformed Avro": 11},
                        "error": None},
    )  # fmt: skip
    monkeypatch.setattr(
        status_command, "read_results",
        lambda bootstrap, config, timeout=30.0: [
            QueryResult("triangle", "triangle.result", False, value=42, batch_id=7, produced_at=time.time() - 2),
        ],
    )  # fmt: skip


def status_of(capsys, config: Path, *flags: str) -> tuple[int, str]:
    code = main(["status", "-c", str(config), *flags])
    return code, capsys.readouterr().out


def config_file(tmp_path: Path, metrics_port: int = 0) -> tuple[Path, Path]:
    state = tmp_path / "state"
    path = tmp_path / "demo.toml"
    path.write_text(dump_config(load_config(DEMO).with_overrides(state_dir=str(state), metrics_port=metrics_port)))
    return path, state


def test_ivm_status_says_never_ran_running_and_not_running(tmp_path: Path, monkeypatch, capsys) -> None:
    config, state = config_file(tmp_path)
    without_kafka(monkeypatch, ends={("R", 0): 5, ("R", 1): 2, ("S", 0): 0})
    code, out = status_of(capsys, config)
    assert code == 0 and out.splitlines()[0] == "pipeline demo: never ran here"
    assert "input lag: 7 records" in out and "triangle = 42  (batch 7, 2s ago)" in out
    assert "R[0]" not in out, "the lag per partition only with -v/--partitions"

    write_running(state, age=0.2)
    code, out = status_of(capsys, config)
    assert out.splitlines()[0] == f"pipeline demo: running (pid {os.getpid()} on {HOST}, heartbeat 0s ago)"
    for flag in ("-v", "--partitions"):
        code, out = status_of(capsys, config, flag)
        lines = out.splitlines()
        r = next(i for i, line in enumerate(lines) if line.split() == ["R", "7"])
        assert lines[r + 1].split() == ["R[0]", "5"] and lines[r + 2].split() == ["R[1]", "2"]

    write_running(state, age=120)
    code, out = status_of(capsys, config)
    assert out.splitlines()[0] == "pipeline demo: not running (last heartbeat 2m 0s ago)"

    pid = dead_pid()
    write_running(state, age=0.2, pid=pid)
    code, out = status_of(capsys, config, "--json")
    status = json.loads(out)
    assert status["running"] is False and status["process"]["state"] == "not running"
    assert status["process"]["summary"] == f"not running (last heartbeat 0s ago; pid {pid} is gone)"
    assert status["lag_by_topic"] == {"R": 7, "S": 0} and status["total_lag"] == 7
    assert status["results"] == [
        {
            "query": "triangle", "topic": "triangle.result", "keyed": False, "value": 42, "batch_id": 7,
            "produced_at": status["results"][0]["produced_at"], "groups": None, "error": None,
        }
    ]  # fmt: skip
    assert status["results"][0]["produced_at"].endswith("Z") and status["metrics"] is None


def test_ivm_status_checks_the_metrics_endpoint(tmp_path: Path, monkeypatch, capsys, metrics_server: int) -> None:
    config, state = config_file(tmp_path, metrics_port=free_port())
    without_kafka(monkeypatch)
    code, out = status_of(capsys, config, "--json")
    metrics = json.loads(out)["metrics"]
    assert code == 0 and metrics["answering"] is False and metrics["error"] == "connection refused"
    assert "  metrics http://127.0.0.1:" in status_of(capsys, config)[1]

    # the running job's heartbeat says where its endpoint is (ivm run --metrics-port overrides the file)
    url = f"http://0.0.0.0:{metrics_server}/metrics"  # bound to every address: checked on loopback
    write_running(state, age=0.1, metrics_url=url)
    code, out = status_of(capsys, config, "--json")
    status = json.loads(out)
    assert status["metrics"] == {
        "url": f"http://127.0.0.1:{metrics_server}/metrics", "answering": True, "error": None,
    }  # fmt: skip
    assert status["process"]["metrics_url"] == url
    assert f"metrics http://127.0.0.1:{metrics_server}/metrics: answering" in status_of(capsys, config)[1]


def test_the_status_document_is_strict_json(tmp_path: Path) -> None:
    """Keyed results show their number of groups; unread ones their error; nothing published, nulls."""
    import datetime

    from ivm.processor.commands.status import status_document

    config = load_config(DEMO).with_overrides(state_dir=str(tmp_path))
    write_running(tmp_path, age=0.1)
    committed = {
        "batch_id": 3,
        "timestamp_ms": datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=90),
        "offsets": [{"topic": "R", "partition": 0, "offset": 4}],
    }
    results = [
        QueryResult("by_a", "by_a.result", True, groups=12),
        QueryResult("empty", "empty.result", False),
        QueryResult("cov", "cov.result", True, error="Kafka: timed out"),
        QueryResult("nan", "nan.result", False, value=float("nan"), batch_id=1, produced_at=time.time()),
    ]
    base = status_document(config, committed, {("R", 0): 10}, [])
    status = watch_document(base, committed, liveness(tmp_path), None, results)
    text = json.dumps(status, allow_nan=False)
    assert json.loads(text)["committed_age_seconds"] == pytest.approx(90, abs=5)
    assert status["results"][0]["groups"] == 12 and status["results"][3]["value"] is None
    lines = render_text(status)
    assert lines[1].startswith("last committed batch 3 (1m 30s ago, ")
    assert "  by_a: 12 groups" in lines and "  empty: nothing published yet" in lines
    assert "  cov: cannot read cov.result: Kafka: timed out" in lines


def test_the_slices_of_the_executors_placement_reach_ivm_status(tmp_path: Path) -> None:
    beat = Heartbeat(tmp_path, None, pipeline="p").start()
    slices = [
        {"slice": 0, "host": "10.0.0.5:41000", "pid": 123, "executor": "1@node-a", "batch": 7, "tuples": 1500,
         "snapshot": 6, "rebuilds": 0},
        {"slice": 1, "host": "10.0.0.6:41001", "pid": 456, "executor": "2@node-b", "batch": 7, "tuples": 1499,
         "snapshot": None, "rebuilds": 2},
    ]  # fmt: skip
    beat.set_slices(slices)
    beat.beat()
    process = liveness(tmp_path)
    assert process.running and process.slices == slices
    status = {
        "pipeline": "p", "process": process.as_json(), "last_committed_batch": 7, "committed_at": "now",
        "total_lag": 0, "lag_by_topic": {}, "results": [], "state_dir": str(tmp_path), "snapshots": [],
    }  # fmt: skip
    lines = render_text(status)
    assert any(
        "slice 0: shard host 10.0.0.5:41000 (pid 123), executor 1@node-a, batch 7, 1,500 tuples" in x for x in lines
    )
    assert any("slice 1:" in x and "last snapshot none yet, 2 rebuilds" in x for x in lines)
    beat.stop()
