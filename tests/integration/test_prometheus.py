"""The real Prometheus scrapes a running processor; every dashboard and alert
expression evaluates against it and finds data, the counters agree with what was
applied, the alerts the stream should raise are raised, and the dashboards render."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from ivm.processor.codecs.avro import load_relation_codecs
from ivm.processor.commands.dashboards import render_all
from ivm.processor.config import QueryConfig
from ivm.processor.kafka.produce import UpdateProducer
from ivm.processor.kafka.subscribe import follow, reflects
from ivm.processor.kafka.topics import create_topics, end_offsets
from ivm.processor.local.ports import free_port
from ivm.processor.local.prometheus import PrometheusServer
from ivm.processor.operations.metrics import Metrics
from tests.integration.helpers import TRIANGLE, pipeline_config
from tests.unit.test_deployment import dashboard_expressions, rule_expressions, rule_selectors

pytestmark = pytest.mark.integration
CODECS = load_relation_codecs()
ROOT = Path(__file__).resolve().parents[2]


def _wait(prom: PrometheusServer, expr: str, predicate: Callable[[list], bool], timeout: float = 60) -> list:
    deadline = time.monotonic() + timeout
    while True:
        result = prom.query(expr)
        if predicate(result):
            return result
        if time.monotonic() > deadline:
            raise TimeoutError(f"{expr} never satisfied the check; last value {result}")
        time.sleep(0.5)


def _value(expected: float) -> Callable[[list], bool]:
    return lambda r: bool(r) and float(r[0]["value"][1]) == expected


def test_prometheus_scrapes_the_processor(kafka, start_job, topic_prefix, tmp_path: Path) -> None:
    port = free_port()
    topics = {r: f"{topic_prefix}{r}" for r in "RST"}
    tri, fivm, pat = f"{topic_prefix}tri", f"{topic_prefix}fivm", f"{topic_prefix}pat"
    queries = (  # one query per engine family whose internals the dashboards show
        QueryConfig(tri, TRIANGLE, "ivm_eps", shards=2),
        QueryConfig(fivm, "Q() :- R(a,b), S(b,c)", "fivm"),
        QueryConfig(pat, "Q(a) :- R(a,b), S(b,c)", "propagation", patterns=("R=insert-only", "S=insert-only")),
    )
    config = replace(
        pipeline_config(kafka.bootstrap, topic_prefix, tmp_path / "state", metrics_port=port), queries=queries
    )
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
    rules = sorted((ROOT / "monitoring" / "rules").glob("*.yml"))
    job = start_job(config, Metrics())
    with PrometheusServer.start([f"127.0.0.1:{port}"], tmp_path / "prom", rule_files=rules) as prom:
        final = end_offsets(kafka.bootstrap, list(topics.values()))
        for record in follow(kafka.bootstrap, f"{tri}.result", idle_timeout=60):
            if reflects(record, final):
                break
        # complete 6-vertex digraph with loops: Σ R(a,b)S(b,c)T(c,a) = 6^3 = Σ R(a,b)S(b,c)
        _wait(prom, f'ivm_result_value{{query="{tri}"}}', _value(216))
        _wait(prom, f'ivm_result_value{{query="{fivm}"}}', _value(216))
        _wait(prom, f'sum(ivm_updates_applied_total{{query="{tri}"}})', _value(n))
        _wait(prom, 'sum(ivm_updates_rejected_total{reason="malformed"})', _value(1))
        _wait(prom, f'ivm_constant_time{{query="{pat}"}}', _value(1))  # insert-only so far: O(1)
        # a delete in S breaks its declared insert-only pattern and costs query pat its O(1) guarantee;
        # a second malformed message, after Prometheus has scraped the first, makes increase() see a rise
        producer.send_raw(topics["S"], *CODECS["S"].encode((0, 0), -1))
        producer.send_raw(topics["T"], b"k", b"\x02")
        producer.flush()
        _wait(prom, f'ivm_result_value{{query="{tri}"}}', _value(210))
        _wait(prom, f'ivm_constant_time{{query="{pat}"}}', _value(0))
        _wait(prom, f'ivm_pattern_level{{query="{pat}",relation="S"}}', _value(1))  # FIFO now
        _wait(prom, f'sum(ivm_pattern_downgrades_total{{query="{pat}"}})', _value(1))
        _wait(prom, "sum(ivm_records_consumed_total)", _value(n + 3))
        _wait(prom, "sum(ivm_consumer_lag_records)", _value(0), timeout=30)  # the lag thread caught up
        _wait(prom, f'count(ivm_consumer_lag_records{{topic="{topics["R"]}"}})', _value(1))
        _wait(prom, "ivm_end_to_end_latency_seconds_count", lambda r: r and float(r[0]["value"][1]) >= 2)
        _wait(prom, f'count(ivm_eps_heavy_keys{{query="{tri}"}})', _value(3))  # per relation R, S, T
        _wait(prom, f'count(ivm_shard_tuples{{query="{tri}"}})', _value(2))
        _wait(prom, f'ivm_fivm_materialized_views{{query="{fivm}"}}', lambda r: r and float(r[0]["value"][1]) >= 1)
        _wait(prom, 'ALERTS{alertname="IvmGuaranteeLost"}', lambda r: any(s["metric"]["query"] == pat for s in r))
        _wait(prom, 'ALERTS{alertname="IvmPatternDowngrade"}', bool)
        _wait(prom, 'ALERTS{alertname="IvmDeadLetters"}', bool)  # pending: its `for` is 1m
        time.sleep(2)  # let rate() windows see two scrapes after the last batch
        for expr in dashboard_expressions() + rule_expressions():
            prom.query(expr)  # raises on a PromQL error
        for expr in dashboard_expressions():
            if "ivm_slice_" in expr:  # placement = "executors" only: test_placement_cluster checks them
                continue
            assert prom.query(expr), f"dashboard expression returns no data: {expr}"
        for selector in rule_selectors():  # a renamed metric or label leaves an alert blind
            assert prom.query(selector), f"alert rule selector finds no data: {selector}"
        pngs = render_all(prom.url, tmp_path / "png", 120)
        assert len(pngs) == 3 and all(p.stat().st_size > 10_000 for p in pngs)
    job.stop()
