"""A secured cluster: SASL_SSL with SCRAM-SHA-512 on a real local broker, a CA and certificate made here.

The pipeline's ``[kafka.properties]`` (the password from the environment, ``${NAME}``) reach every client:
``ivm produce``, ``ivm run`` (librdkafka's clients and Spark's Kafka source), ``ivm subscribe``,
``ivm status`` and ``ivm query add`` all work through the secured listener, and the result is the one a
recount gives.  A wrong password or a CA that did not sign the broker's certificate is one line naming the
cause, within seconds, in every command.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from ivm.processor.kafka.clients import KafkaConnection
from ivm.processor.local.kafka import BrokerSecurity, KafkaBroker
from ivm.processor.local.stack import ProcessorProcess, project_root
from tests.conftest import LOGS
from tests.integration.pki import make_pki

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PASSWORD = "alice-" + uuid.uuid4().hex[:12]  # never printed by any command (checked)
FAIL_FAST = 20.0  # seconds: a wrong password or an untrusted certificate is reported by then (measured: ~1-5 s)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[KafkaBroker, dict[str, Path]]]:
    pki = make_pki(tmp_path_factory.mktemp("pki"))
    security = BrokerSecurity(
        key=pki["key"], certificate=pki["broker"], ca=pki["ca"],
        users={"broker": "broker-" + uuid.uuid4().hex[:8], "alice": PASSWORD},
    )  # fmt: skip
    broker = KafkaBroker.start(LOGS / f"kafka-secured-{uuid.uuid4().hex[:6]}", security=security)
    yield broker, pki
    broker.stop()


def write_config(path: Path, bootstrap: str, ca: Path, state: Path, prefix: str) -> Path:
    path.write_text(
        f"""
[processor]
name = "{prefix}sec"
state_dir = "{state}"
snapshot_every = 5

[kafka]
bootstrap = "{bootstrap}"
dead_letter_topic = "{prefix}dead"

[kafka.properties]
security.protocol = "SASL_SSL"
sasl.mechanism = "SCRAM-SHA-512"
sasl.username = "alice"
sasl.password = "${{IVM_TEST_SASL_PASSWORD}}"
ssl.ca.location = "{ca}"

[spark]
trigger_ms = 200

[[relations]]
name = "R"
topic = "{prefix}R"
[[relations]]
name = "S"
topic = "{prefix}S"
[[relations]]
name = "T"
topic = "{prefix}T"

[[queries]]
name = "{prefix}tri"
query = "Q() :- R(a,b), S(b,c), T(c,a)"
"""
    )
    return path


def ivm(*args: str, password: str = PASSWORD, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "IVM_TEST_SASL_PASSWORD": password}
    return subprocess.run(
        [sys.executable, "-m", "ivm.processor.cli", *args],
        capture_output=True, text=True, timeout=timeout, env=env, cwd=project_root(),
    )  # fmt: skip


def wait_for_value(config: Path, topic: str, expected: str, proc: ProcessorProcess, timeout: float = 300) -> str:
    """``ivm subscribe`` through the secured listener until its output shows ``expected``."""
    deadline = time.monotonic() + timeout
    out = ""
    while time.monotonic() < deadline:
        assert proc.alive(), proc.tail()
        sub = ivm("subscribe", topic, "-c", str(config), "--idle-timeout", "3")
        if sub.returncode == 2 and "does not exist" in sub.stderr:  # ivm run has not created it yet
            time.sleep(2)
            continue
        assert sub.returncode == 0, sub.stderr
        out = sub.stdout
        # "batch 3  q = 6  (engine, ...)": the counts only grow here, the expected one is the final one
        if any(f" {expected} " in f" {line} " for line in out.splitlines()):
            return out
        time.sleep(1)
    raise AssertionError(f"{topic} never showed {expected!r}; last output:\n{out}")


def test_every_command_through_sasl_ssl(secured, tmp_path: Path) -> None:
    broker, pki = secured
    prefix = f"s{uuid.uuid4().hex[:6]}."
    config = write_config(tmp_path / "pipeline.toml", broker.bootstrap, pki["ca"], tmp_path / "state", prefix)
    check = ivm("check", "-c", str(config))
    assert check.returncode == 0, check.stderr
    assert "  sasl.password = '********'" in check.stdout and PASSWORD not in check.stdout

    edges = tmp_path / "edges.txt"
    edges.write_text("1 2\n2 3\n3 1\n3 4\n4 5\n5 3\n")  # two triangles
    for rel in "RST":
        out = ivm("produce", str(edges), "-r", rel, "-c", str(config))
        assert out.returncode == 0, out.stderr
        assert "produced 6 updates" in out.stdout

    env_before = os.environ.get("IVM_TEST_SASL_PASSWORD")
    os.environ["IVM_TEST_SASL_PASSWORD"] = PASSWORD  # the child `ivm run` reads the file's ${...} from it
    try:
        proc = ProcessorProcess(config, broker.bootstrap, tmp_path / "run.log")
    finally:
        if env_before is None:
            del os.environ["IVM_TEST_SASL_PASSWORD"]
        else:
            os.environ["IVM_TEST_SASL_PASSWORD"] = env_before
    try:
        # 2 triangles x 3 rotations (a directed 3-cycle per triangle, each of its 3 edges can be R's)
        wait_for_value(config, f"{prefix}tri.result", f"{prefix}tri = 6", proc)
        added = ivm("query", "add", "-c", str(config), f"{prefix}path", "Q() :- R(a,b), S(b,c)")
        assert added.returncode == 0, added.stderr
        # directed 2-paths over 6 edges: 1-2-3, 2-3-1, 3-1-2, 2-3-4, 3-4-5, 4-5-3, 5-3-1, 5-3-4; ivm status
        # reads the queries added at run time from the control topic (ivm subscribe -c knows the file's only)
        deadline = time.monotonic() + 300
        while True:
            assert proc.alive(), proc.tail()
            status = ivm("status", "-c", str(config), "--json")
            assert status.returncode == 0, status.stderr
            report = json.loads(status.stdout)
            values = {r["query"]: r.get("value") for r in report.get("results", [])}
            if values.get(f"{prefix}path") is not None and int(values[f"{prefix}path"]) == 8:
                break
            assert time.monotonic() < deadline, report
            time.sleep(2)
        assert int(values[f"{prefix}tri"]) == 6
        assert report["total_lag"] == 0
        assert report["last_committed_batch"] is not None
    finally:
        proc.stop()
    log = (tmp_path / "run.log").read_text(errors="replace")
    assert PASSWORD not in log  # the -v log of ivm run: librdkafka's and Spark's lines included
    assert "Exception" not in log or "authentication" not in log.lower(), log[-3000:]


def _one_line_naming(result: subprocess.CompletedProcess, *words: str) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode != 0
    assert len(lines) == 1, result.stderr
    assert all(w.lower() in lines[0].lower() for w in words), lines[0]
    assert PASSWORD not in result.stderr + result.stdout
    return lines[0]


@pytest.mark.parametrize("fault", ["password", "certificate"])
def test_wrong_password_or_untrusted_certificate_is_one_line_in_every_command(
    secured, tmp_path: Path, fault: str
) -> None:
    broker, pki = secured
    prefix = f"f{uuid.uuid4().hex[:6]}."
    ca = pki["other-ca"] if fault == "certificate" else pki["ca"]
    config = write_config(tmp_path / "pipeline.toml", broker.bootstrap, ca, tmp_path / "state", prefix)
    password = "wrong-password" if fault == "password" else PASSWORD
    words = ("authentication", "sasl.password") if fault == "password" else ("certificate", "ssl.ca.location")
    edges = tmp_path / "edges.txt"
    edges.write_text("1 2\n")
    commands = {
        "produce": ["produce", str(edges), "-r", "R", "-c", str(config)],
        "subscribe": ["subscribe", f"{prefix}tri.result", "-c", str(config), "--idle-timeout", "3"],
        "status": ["status", "-c", str(config)],
        "query add": ["query", "add", "-c", str(config), f"{prefix}q", "Q() :- R(a,b)"],
        "run": ["run", "-c", str(config)],
    }
    for name, args in commands.items():
        started = time.monotonic()
        result = ivm(*args, password=password, timeout=120)
        took = time.monotonic() - started
        line = _one_line_naming(result, *words)
        assert took < FAIL_FAST, f"ivm {name} took {took:.1f} s to report: {line}"
        print(f"ivm {name}: {took:.1f} s: {line}")


def test_spark_source_fails_on_a_wrong_password(secured, spark) -> None:
    """Spark's Kafka source (the Java client) with the translated options: it authenticates with the right
    password (reads the records) and names the cause with a wrong one."""
    from ivm.processor.kafka.clients import producer, spark_kafka_options

    broker, _pki = secured
    topic = f"spark-{uuid.uuid4().hex[:6]}"
    good = KafkaConnection(broker.bootstrap, tuple(broker.client_properties.items()))
    p = producer(good)
    for i in range(3):
        p.produce(topic, value=str(i).encode())
    assert p.flush(30) == 0
    rows = spark.read.format("kafka").options(**spark_kafka_options(good)).option("subscribe", topic).load().collect()
    assert sorted(bytes(r.value) for r in rows) == [b"0", b"1", b"2"]
    bad_props = {**broker.client_properties, "sasl.password": "wrong"}
    bad = KafkaConnection(broker.bootstrap, tuple(bad_props.items()))
    started = time.monotonic()
    with pytest.raises(Exception, match=r"(?i)authentication failed"):
        spark.read.format("kafka").options(**spark_kafka_options(bad)).option("subscribe", topic).load().collect()
    print(f"Spark's source reported the wrong password after {time.monotonic() - started:.1f} s")


def test_mutual_tls_client_certificate_for_librdkafka_and_spark(spark, tmp_path_factory) -> None:
    """A broker that requires a client certificate: librdkafka takes the PEM files as given, Spark's source
    the translated Java PEM key store (ssl.keystore.certificate.chain / ssl.keystore.key); without the
    certificate the handshake fails, in one line naming the cause."""
    from ivm.processor.kafka.clients import producer, spark_kafka_options
    from ivm.processor.kafka.topics import BrokerUnreachable, require_broker

    pki = make_pki(tmp_path_factory.mktemp("mtls-pki"))
    security = BrokerSecurity(
        key=pki["key"], certificate=pki["broker"], ca=pki["ca"], client_auth=True,
        users={"broker": "broker-" + uuid.uuid4().hex[:8], "alice": PASSWORD},
    )  # fmt: skip
    # the broker's own connections need a client certificate too: its own serves
    broker = KafkaBroker.start(LOGS / f"kafka-mtls-{uuid.uuid4().hex[:6]}", security=security)
    try:
        cert = {"ssl.certificate.location": str(pki["client"]), "ssl.key.location": str(pki["client-key"])}
        good = KafkaConnection(broker.bootstrap, tuple({**broker.client_properties, **cert}.items()))
        require_broker(good)
        topic = f"mtls-{uuid.uuid4().hex[:6]}"
        p = producer(good)
        for i in range(3):
            p.produce(topic, value=str(i).encode())
        assert p.flush(30) == 0
        rows = (
            spark.read.format("kafka").options(**spark_kafka_options(good)).option("subscribe", topic).load().collect()
        )
        assert sorted(bytes(r.value) for r in rows) == [b"0", b"1", b"2"]
        plain = {k: v for k, v in broker.client_properties.items() if k not in cert}  # no client certificate
        without = KafkaConnection(broker.bootstrap, tuple(plain.items()))
        with pytest.raises(BrokerUnreachable) as err:
            require_broker(without)
        assert len(str(err.value).splitlines()) == 1
        assert str(err.value).startswith(f"TLS handshake with the Kafka broker at {broker.bootstrap} failed")
        assert str(err.value).endswith("check [kafka.properties] ssl.certificate.location and ssl.key.location)")
    finally:
        broker.stop()
