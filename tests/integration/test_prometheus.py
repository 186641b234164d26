"""The real Prometheus scrapes a running processor; every dashboard and alert
expression evaluates against it, and the counters agree with what was applied."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from processor.codec import load_relation_codecs
from processor.local.ports import free_port
from processor.local.prometheus import PrometheusServer
from processor.metrics import Metrics
from processor.produce import UpdateProducer
from processor.subscribe import follow, reflects
from processor.topics import create_topics, end_offsets
from tests.integration.helpers import pipeline_config
from tests.unit.test_deployment import dashboard_expressions, rule_expressions

pytestmark = pytest.mark.integration
CODECS = load_relation_codecs()


def _wait(prom: PrometheusServer, expr: str, predicate, timeout: float = 60) -> list:
    deadline = time.monotonic() + timeout
    while True:
        result = prom.query(expr)
        if predicate(result):
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"{expr} never satisfied the check; last value {result}")
        time.sleep(0.5)


def test_prometheus_scrapes_the_processor(kafka, start_job, topic_prefix, tmp_path: Path) -> None:
    port = free_port()
    topics = {r: f"{topic_prefix}{r}" for r in "RST"}
    config = pipeline_config(kafka.bootstrap, topic_prefix, tmp_path / "state", metrics_port=port)
    create_topics(kafka.bootstrap, list(topics.values()))
    producer = UpdateProducer(kafka.bootstrap, CODECS, topics)
    n = 0
    for a in range(6):
        for b in range(6):
            for rel in "RST":
                producer.send_raw(topics[rel], *CODECS[rel].encode((a, b), 1))
                n += 1
    producer.send_raw(topics["R"], b"k", b"\x02")  # one malformed message
    producer.flush()
    rules = sorted((Path(__file__).resolve().parents[2] / "monitoring" / "rules").glob("*.yml"))
    job = start_job(config, Metrics())
    with PrometheusServer.start([f"127.0.0.1:{port}"], tmp_path / "prom", rule_files=rules) as prom:
        final = end_offsets(kafka.bootstrap, list(topics.values()))
        for record in follow(kafka.bootstrap, config.queries[0].result_topic, idle_timeout=60):
            if reflects(record, final):
                break
        # complete 6-vertex digraph with loops: Σ R(a,b)S(b,c)T(c,a) = 6^3
        q = config.queries[0].name
        _wait(prom, f'ivm_result_value{{query="{q}"}}', lambda r: r and float(r[0]["value"][1]) == 216)
        _wait(prom, f'sum(ivm_updates_applied_total{{query="{q}"}})', lambda r: r and float(r[0]["value"][1]) == n)
        _wait(prom, 'sum(ivm_updates_rejected_total{reason="malformed"})', lambda r: r and float(r[0]["value"][1]) == 1)
        _wait(prom, "ivm_batch_duration_seconds_count", lambda r: r and float(r[0]["value"][1]) >= 1)
        time.sleep(2)  # let rate() windows see two scrapes
        for expr in dashboard_expressions() + rule_expressions():
            prom.query(expr)  # raises on a PromQL error
        for expr in dashboard_expressions():
            assert prom.query(expr), f"dashboard expression returns no data: {expr}"
    job.stop()
