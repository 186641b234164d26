"""``placement = "executors"`` on a Spark standalone cluster started from pyspark's own launcher (a master and
three workers on this machine), with executors added and removed while the stream runs.

The master and the workers are ``spark-class org.apache.spark.deploy.master.Master`` / ``...worker.Worker``
from the pyspark package (its ``bin/spark-class``; the wheel ships no ``start-master.sh``).  The run starts on
two workers (one core each: one executor each); a third worker joins mid-stream (the master gives the
application an executor there: an executor added), then one of the first two is stopped (its executor goes
with it: an executor removed).  The slices follow (``ivm.processor.placement.spark.rebalance``): after the join a
slice lives on the new executor, after the removal none is left on the removed one, each move a rebuild from
the slice's snapshot and a replay.  Every published batch is checked against an independent count at that
batch's committed offsets (``test_reliability.check_exactly_once``): batch ids 0, 1, 2, ... once each,
each value the brute-force triangle count of the input prefix it names, every rejected input dead-lettered
once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import urllib.request
from pathlib import Path

import pytest

from ivm.processor.kafka.topics import create_topics
from ivm.processor.local.ports import free_port, wait_for_port
from tests.integration.helpers import pipeline_config
from tests.integration.test_placement_cluster import _behind
from tests.integration.test_reliability import check_exactly_once, produce_stream
from tests.integration.test_stops import _start, _wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _spark_class() -> Path:
    import pyspark

    path = Path(pyspark.__file__).parent / "bin" / "spark-class"
    assert path.exists(), f"pyspark has no {path}"
    return path


class Standalone:
    """A standalone master and its workers, each a process group of its own started here (stopped by its id)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.ui = free_port()
        self.workers: dict[str, subprocess.Popen] = {}
        self.env = {
            **os.environ,
            "SPARK_HOME": str(_spark_class().parent.parent),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_LOG_DIR": str(folder / "logs"),
            "SPARK_DAEMON_MEMORY": "384m",
        }
        self.master = self._launch(
            "master",
            ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(self.port),
             "--webui-port", str(self.ui)],
        )  # fmt: skip
        wait_for_port(self.port, 120, alive=lambda: self.master.poll() is None)
        wait_for_port(self.ui, 120, alive=lambda: self.master.poll() is None)

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _launch(self, name: str, args: list[str]) -> subprocess.Popen:
        log = open(self.folder / f"{name}.log", "ab")  # noqa: SIM115 (closed with the process's end)
        return subprocess.Popen(
            [str(_spark_class()), *args], stdout=log, stderr=subprocess.STDOUT, env=self.env, start_new_session=True
        )

    def start_worker(self, name: str) -> None:
        work = self.folder / f"work-{name}"
        work.mkdir(exist_ok=True)
        self.workers[name] = self._launch(
            f"worker-{name}",
            ["org.apache.spark.deploy.worker.Worker", self.url, "--host", "127.0.0.1", "--cores", "1",
             "--memory", "1g", "--webui-port", str(free_port()), "--work-dir", str(work)],
        )  # fmt: skip
        _wait_for(lambda: len(self.alive_workers()) >= len(self.workers), f"worker {name} did not register", 120)

    def stop_worker(self, name: str) -> None:
        """Stop worker ``name`` as a node leaves: SIGTERM, and the worker kills its executors."""
        proc = self.workers.pop(name)
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(60)

    def alive_workers(self) -> list[dict]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui}/json/", timeout=10) as answer:
            state = json.loads(answer.read())
        return [w for w in state.get("workers", []) if w.get("state") == "ALIVE"]

    def stop(self) -> None:
        for proc in [*self.workers.values(), self.master]:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)  # each is the leader of its own group (start_new_session)
                proc.wait(30)


@pytest.fixture
def standalone(tmp_path: Path):
    cluster = Standalone(tmp_path / "standalone")
    try:
        yield cluster
    finally:
        cluster.stop()


def _slices(port: int) -> dict[str, str]:
    """Each slice's executor as the metrics show it (``ivm_slice_tuples{slice, host, executor}``)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
            text = answer.read().decode()
    except OSError:
        return {}
    lines = [line for line in text.splitlines() if line.startswith("ivm_slice_tuples{")]
    return {line.split('slice="')[1].split('"')[0]: line.split('executor="')[1].split("@")[0] for line in lines}


def _executor_ids(app_work: Path) -> set[str]:
    """The executor ids a worker ran (its work folder holds ``app-…/<id>`` per executor)."""
    return {p.name for p in app_work.glob("app-*/*") if p.is_dir()}


def test_slices_follow_executors_added_and_removed_on_a_standalone_cluster(
    kafka, standalone, topic_prefix, tmp_path, monkeypatch
) -> None:
    domain = 60
    topics = {r: f"{topic_prefix}{r}" for r in "RST"}
    standalone.start_worker("a")
    standalone.start_worker("b")
    config = pipeline_config(
        kafka.bootstrap, topic_prefix, tmp_path / "state", spark_master=standalone.url, max_offsets_per_trigger=1500,
        snapshot_every=2, placement="executors", shards=4, engine="auto",
        spark_conf=(("spark.executor.cores", "1"), ("spark.executor.memory", "640m")),
    )  # fmt: skip
    create_topics(kafka.bootstrap, list(topics.values()))
    monkeypatch.setenv("SPARK_LOCAL_IP", "127.0.0.1")  # the driver, as the master and workers, on the loopback
    monkeypatch.setenv("IVM_SHARD_HOST_IDLE_SECONDS", "60")
    produce_stream(kafka.bootstrap, topics, 8_000, seed=1, domain=domain)
    port = free_port()
    proc = _start(tmp_path, config, kafka.bootstrap, "standalone", monkeypatch, metrics_port=port)
    work = {name: standalone.folder / f"work-{name}" for name in "abc"}
    try:
        _wait_for(lambda: len(set(_slices(port).values())) == 2 or not proc.alive(), "slices on both executors", 300)
        assert proc.alive(), proc.tail()
        first = _executor_ids(work["a"]) | _executor_ids(work["b"])
        assert len(first) == 2, first
        # an executor added: a third worker joins, the master gives the application an executor there
        standalone.start_worker("c")
        produce_stream(kafka.bootstrap, topics, 6_000, seed=2, domain=domain)
        _wait_for(lambda: bool(_executor_ids(work["c"])) or not proc.alive(), "no executor on the new worker", 180)
        (added,) = _executor_ids(work["c"])
        _wait_for(
            lambda: added in _slices(port).values() or not proc.alive(),
            f"no slice moved to the added executor {added}: {_slices(port)}",
            300,
        )
        assert proc.alive(), proc.tail()
        assert len(set(_slices(port).values())) == 3, _slices(port)
        # an executor removed: worker a stops, its executor with it
        removed = _executor_ids(work["a"])
        standalone.stop_worker("a")
        produce_stream(kafka.bootstrap, topics, 6_000, seed=3, domain=domain)
        _wait_for(
            lambda: (
                (not removed & set(_slices(port).values()) and not _behind(kafka.bootstrap, config, topics))
                or not proc.alive()
            ),
            f"the stream did not complete with the slices off the removed executor {removed}: {_slices(port)}",
            600,
        )
        assert proc.alive(), proc.tail()
        places = _slices(port)
        assert set(places.values()) <= (first - removed) | {added} and len(places) == 4, places
    finally:
        proc.stop()
    log = (tmp_path / "standalone.log").read_text(errors="replace")
    assert "slices moved to spread them" in log, "slices moved to the executor that came"
    assert "rebuilt" in log, "a moved slice is rebuilt from its snapshot and a replay"
    results = check_exactly_once(kafka.bootstrap, config, topics, domain)
    assert len(results) >= 10, "the stream ran in many batches, across the executors' changes"
