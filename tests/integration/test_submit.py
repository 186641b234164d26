"""``spark-submit ... ivm/processor/submit.py -c pipeline.toml``: a pipeline under pyspark's own spark-submit,
against ``local-cluster[2,1,1024]`` (two executor JVMs) and a real broker.

spark-submit's ``--master`` runs the pipeline (the file's ``[spark] master`` is not used, and the log says
so), ``[spark.conf]`` fills in what spark-submit leaves unset, every batch is published once and in order
(read_committed), the count equals an independent recount, and SIGTERM stops it cleanly.  A spark-submit
``--conf`` that contradicts what the processor owns is refused with the reason before anything runs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pyspark
import pytest

from ivm.processor.config import dump_config
from ivm.processor.kafka.subscribe import reflects
from ivm.processor.kafka.topics import create_topics, end_offsets
from ivm.processor.local.artifacts import spark_kafka_jars
from ivm.processor.local.stack import project_root
from ivm.processor.state.recovery import read_committed_progress
from tests.integration.helpers import pipeline_config, read_until
from tests.integration.test_stops import _produce, _triangles, _wait_for

pytestmark = pytest.mark.integration
SPARK_SUBMIT = Path(pyspark.__file__).parent / "bin" / "spark-submit"
SCRIPT = project_root() / "processor" / "submit.py"


def _submit(tmp_path: Path, master: str, args: list[str], log: Path, *conf: str) -> subprocess.Popen:
    env = {
        **os.environ,
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "TMPDIR": str(tmp_path / "tmp"),
    }
    (tmp_path / "tmp").mkdir(exist_ok=True)
    confs = [item for c in conf for item in ("--conf", c)]
    command = [
        str(SPARK_SUBMIT), "--master", master, "--jars", ",".join(str(j) for j in spark_kafka_jars()),
        "--driver-memory", "1g", "--conf", f"spark.local.dir={tmp_path / 'tmp'}", *confs, str(SCRIPT), *args,
    ]  # fmt: skip
    with open(log, "ab") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=tmp_path)


def _python_driver(launcher: int) -> int:
    """The pid of the Python process spark-submit's JVM (``launcher``) started for the script."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (stat.parent / "cmdline").read_bytes()
        except (OSError, ValueError, IndexError):
            continue
        if ppid == launcher and b"submit.py" in cmdline:
            return int(stat.parent.name)
    raise AssertionError(f"no Python driver process under spark-submit (pid {launcher})")


@pytest.mark.slow  # two executor JVMs beside the driver's: 2-5 minutes on 2 cores
def test_a_pipeline_under_spark_submit_on_local_cluster(kafka, topic_prefix, tmp_path) -> None:
    domain = 60
    topics = {r: f"{topic_prefix}{r}" for r in "RST"}
    config = pipeline_config(
        kafka.bootstrap, topic_prefix, tmp_path / "state", spark_master="local[2]", max_offsets_per_trigger=2000,
        spark_conf=(("spark.sql.shuffle.partitions", "3"), ("spark.task.maxFailures", "6")),
    )  # fmt: skip
    path = tmp_path / "pipeline.toml"
    path.write_text(dump_config(config))
    create_topics(kafka.bootstrap, list(topics.values()))
    _produce(kafka.bootstrap, topics, 4000, domain, seed=31)
    log = tmp_path / "submit.log"
    proc = _submit(
        tmp_path, "local-cluster[2,1,1024]", ["-c", str(path), "--bootstrap", kafka.bootstrap], log,
        "spark.task.maxFailures=8",
    )  # fmt: skip
    try:
        _wait_for(lambda: "ivm.processor.job: batch " in log.read_text(errors="replace") or proc.poll() is not None,
                  "no batch committed under spark-submit", 300)  # fmt: skip
        assert proc.poll() is None, log.read_text(errors="replace")[-3000:]
        _produce(kafka.bootstrap, topics, 2000, domain, seed=32)  # while it runs
        final = end_offsets(kafka.bootstrap, list(topics.values()))
        _wait_for(
            lambda: (
                proc.poll() is not None
                or ((c := read_committed_progress(kafka.bootstrap, config.progress_topic)) is not None
                    and reflects(c, final))
            ),
            "the stream did not complete under spark-submit",
            timeout=300,
        )  # fmt: skip
        assert proc.poll() is None, log.read_text(errors="replace")[-3000:]
        # a clean stop: SIGTERM to the driver's Python process (spark-submit's child), which stops the stream,
        # commits or abandons the batch in flight and returns; spark-submit then exits with its status
        os.kill(_python_driver(proc.pid), signal.SIGTERM)
        assert proc.wait(120) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    text = log.read_text(errors="replace")
    assert "[spark] master local[2] not used: spark-submit's master local-cluster[2,1,1024] runs the pipeline" in text
    assert f"pipeline {config.name}: Kafka {kafka.bootstrap}, Spark local-cluster[2,1,1024]" in text
    # [spark.conf] where spark-submit left the key unset; spark-submit's --conf where it gave one
    assert "[spark.conf] applied: spark.sql.shuffle.partitions=3; left to spark-submit: spark.task.maxFailures" in text
    assert "stopped: last committed batch" in text
    results = read_until(kafka.bootstrap, config.queries[0].result_topic, lambda rs: reflects(rs[-1], final))
    assert [r["batch_id"] for r in results] == list(range(len(results))), "a batch is missing or duplicated"
    assert int(results[-1]["value"]) == _triangles(kafka.bootstrap, topics, domain)


def test_spark_submit_conf_that_contradicts_the_processor_is_refused(kafka, topic_prefix, tmp_path) -> None:
    config = pipeline_config(kafka.bootstrap, topic_prefix, tmp_path / "state")
    path = tmp_path / "pipeline.toml"
    path.write_text(dump_config(config))
    log = tmp_path / "submit.log"
    proc = _submit(tmp_path, "local[1]", ["-c", str(path)], log, "spark.speculation=true")
    assert proc.wait(180) == 2
    assert "ivm/processor/submit.py: spark-submit --conf spark.speculation=true: must stay false" in log.read_text()


def test_submit_outside_spark_submit_is_refused() -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYSPARK_GATEWAY_PORT"}
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "-c", "pipeline.toml"], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 2
    assert "not running under spark-submit" in done.stderr
