"""docker-compose.yml and monitoring/ agree with the local scripts and the metrics.

Docker cannot run here; these checks parse the files and compare them with what
the processor really defines, so a renamed metric or config file breaks a test.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from ivm.processor.commands.dashboards import dashboard_queries, expand, load_dashboards, render_all
from ivm.processor.config import load_config
from ivm.processor.operations.metrics import Metrics
from ivm.processor.pipeline import Record

ROOT = Path(__file__).resolve().parents[2]


def _metric_names() -> set[str]:
    names = set()
    for family in Metrics().registry.collect():
        names.add(family.name)
        for sample in family.samples:
            names.add(sample.name)
    m = Metrics()  # histogram and counter sample names exist only once observed
    for family in m.registry.collect():
        if family.type == "histogram":
            names |= {f"{family.name}_bucket", f"{family.name}_sum", f"{family.name}_count"}
        if family.type == "counter":
            names |= {f"{family.name}_total"}
    return names


def dashboard_expressions() -> list[str]:
    """Every panel expression, template variables replaced by their "All" value (as rendered)."""
    return [q.promql for q in dashboard_queries()]


def rule_expressions() -> list[str]:
    exprs = []
    for path in sorted((ROOT / "monitoring" / "rules").glob("*.yml")):
        for group in yaml.safe_load(path.read_text())["groups"]:
            exprs += [rule["expr"] for rule in group["rules"]]
    return exprs


def test_compose_parses_and_matches_the_local_configuration() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert {"kafka", "processor", "prometheus", "grafana"} <= set(services)
    assert services["kafka"]["environment"]["KAFKA_PROCESS_ROLES"] == "broker,controller"  # KRaft
    command = services["processor"]["command"]
    config_path = command[command.index("--config") + 1]
    assert config_path.startswith("/app/")
    local = ROOT / config_path.removeprefix("/app/")
    config = load_config(local)  # the same file the demo uses
    assert config.queries and config.relations
    port = command[command.index("--metrics-port") + 1]
    prometheus = yaml.safe_load((ROOT / "monitoring" / "prometheus.yml").read_text())
    targets = prometheus["scrape_configs"][0]["static_configs"][0]["targets"]
    assert targets == [f"processor:{port}"]
    assert (ROOT / "Dockerfile").exists()


def test_every_dashboard_and_rule_expression_uses_defined_metrics() -> None:
    names = _metric_names()
    exprs = dashboard_expressions() + rule_expressions()
    assert exprs
    for expr in exprs:
        used = set(re.findall(r"\b(ivm_[a-z_]+)", expr))
        assert used, expr
        assert used <= names, f"{expr} uses undefined metrics {used - names}"


def test_promtool_accepts_config_and_rules() -> None:
    promtool = shutil.which("promtool")
    assert promtool, "promtool (Debian package prometheus) is not installed: run make setup"
    for args in (
        ["check", "config", str(ROOT / "monitoring" / "prometheus.yml")],
        ["check", "rules", *map(str, sorted((ROOT / "monitoring" / "rules").glob("*.yml")))],
    ):
        proc = subprocess.run([promtool, *args], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr


def rule_selectors() -> list[str]:
    """Every metric selector (name and label matchers) of the alert rules."""
    return sorted({m.group(0) for e in rule_expressions() for m in re.finditer(r"\bivm_[a-z_]+(\{[^}]*\})?", e)})


def test_metric_names_follow_the_prometheus_conventions() -> None:
    m = Metrics()
    for family in m.registry.collect():
        assert family.name.startswith("ivm_"), family.name
        assert re.fullmatch(r"[a-z_]+", family.name), family.name
        if family.type == "counter":  # prometheus-client adds _total to the samples
            assert not family.name.endswith("_total")
        if family.type == "gauge":
            assert not family.name.endswith("_total"), f"gauge {family.name} looks like a counter"
        if family.type == "histogram":
            assert family.name.endswith(("_seconds", "_records")), f"histogram {family.name} lacks a base unit"
        assert not re.search(r"_(ms|milliseconds|minutes|kb|mb)\b", family.name), f"{family.name}: not a base unit"
    # labels of bounded cardinality only: nothing taken from the data (tuples, keys, offsets)
    labels = {label for c in m.registry._collector_to_names for label in getattr(c, "_labelnames", ())}
    bounded = {"query", "relation", "reason", "topic", "partition", "engine", "stat", "kind", "view", "shard"}
    bounded |= {"slice", "host", "executor"}  # placement = "executors": the cluster's size, not the data's
    bounded |= {"kernel"}  # the installation's compiled kernels (ivm/kernels.py): one per _*.pyx
    assert labels <= bounded | {"generation"}  # the collector's generations: 0, 1, 2


def test_every_named_metric_is_on_a_dashboard_or_in_a_rule() -> None:
    used = set(re.findall(r"\b(ivm_[a-z_]+)", " ".join(dashboard_expressions() + rule_expressions())))
    generic = {"ivm_engine_stat", "ivm_last_batch_id", "ivm_replayed_records"}  # for ad-hoc queries
    for family in Metrics().registry.collect():
        names = {family.name, f"{family.name}_total", f"{family.name}_bucket"}
        assert names & used or family.name in generic, f"{family.name} is on no dashboard and in no rule"


def test_dashboards_are_well_formed_and_provisioned() -> None:
    dashboards = load_dashboards()
    assert {d["uid"] for d in dashboards} == {"ivm-overview", "ivm-engines", "ivm-kafka"}
    for d in dashboards:
        ids = [p["id"] for p in d["panels"]]
        assert len(ids) == len(set(ids)), d["uid"]
        for panel in d["panels"]:
            pos = panel["gridPos"]
            assert pos["x"] >= 0 and pos["x"] + pos["w"] <= 24, panel["title"]
            assert panel["datasource"]["uid"] == "prometheus"
            assert panel["targets"], panel["title"]
            for target in panel["targets"]:
                assert "$" not in expand(target["expr"], d), target["expr"]
    datasource = yaml.safe_load((ROOT / "monitoring/grafana/provisioning/datasources/prometheus.yml").read_text())
    assert datasource["datasources"][0]["uid"] == "prometheus"
    provider = yaml.safe_load((ROOT / "monitoring/grafana/provisioning/dashboards/ivm.yml").read_text())
    path = provider["providers"][0]["options"]["path"]
    grafana = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]["grafana"]
    assert f"./monitoring/grafana/dashboards:{path}:ro" in grafana["volumes"]
    assert "./monitoring/grafana/provisioning:/etc/grafana/provisioning:ro" in grafana["volumes"]


def test_the_alerts_the_issue_asks_for_exist() -> None:
    alerts = {}
    for path in sorted((ROOT / "monitoring" / "rules").glob("*.yml")):
        for group in yaml.safe_load(path.read_text())["groups"]:
            alerts |= {rule["alert"]: rule["expr"] for rule in group["rules"]}
    assert "ivm_consumer_lag_records" in alerts["IvmConsumerLagGrowing"]
    assert "ivm_dead_letters_total" in alerts["IvmDeadLetters"]
    assert "ivm_pattern_downgrades_total" in alerts["IvmGuaranteeLost"]
    assert "ivm_constant_time" in alerts["IvmGuaranteeLost"]
    assert "ivm_rebalances_total" in alerts["IvmMajorRebalanceStorm"]


def _sample(m: Metrics, name: str, **labels: str) -> float | None:
    return m.registry.get_sample_value(name, labels)


def test_engine_internals_become_named_metrics() -> None:
    import ivm

    m = Metrics()
    ups = [(r, (a, b), 1) for a in range(6) for b in range(6) for r in "RST"]
    tri = ivm.maintain("Q() :- R(a,b), S(b,c), T(c,a)", engine="ivm_eps", shards=2)
    tri.apply(ups)
    m.observe_view("tri", tri)
    assert _sample(m, "ivm_result_value", query="tri") == 216
    stats = [s.stats() for s in tri.shards]
    for rel in "RST":
        assert _sample(m, "ivm_eps_heavy_keys", query="tri", relation=rel) is not None
        assert _sample(m, "ivm_eps_light_keys", query="tri", relation=rel) is not None
    light = sum(_sample(m, "ivm_eps_light_keys", query="tri", relation=r) for r in "RST")
    heavy = sum(_sample(m, "ivm_eps_heavy_keys", query="tri", relation=r) for r in "RST")
    assert light == sum(s["light_keys"] for s in stats) and heavy == sum(s["heavy_keys"] for s in stats)
    assert _sample(m, "ivm_eps_threshold_base", query="tri") == max(s["threshold_base"] for s in stats)
    majors = sum(s["major_rebalances"] for s in stats)
    assert majors > 0 and _sample(m, "ivm_rebalances_total", query="tri", kind="major") == majors
    assert [_sample(m, "ivm_shard_tuples", query="tri", shard=str(i)) for i in range(2)] == [
        s["state_tuples"] for s in stats
    ]
    m.observe_view("tri", tri)  # a cumulative count is not added twice
    assert _sample(m, "ivm_rebalances_total", query="tri", kind="major") == majors
    if all("state_bytes" in s for s in stats):  # the compiled state (issue 38: state per tuple as a metric)
        per_tuple = sum(s["state_bytes"] for s in stats) / sum(s["state_tuples"] for s in stats)
        assert _sample(m, "ivm_state_bytes_per_tuple", query="tri") == pytest.approx(per_tuple)

    fivm = ivm.maintain("Q() :- R(a,b), S(b,c)", engine="fivm")
    fivm.apply([u for u in ups if u[0] in "RS"])
    m.observe_view("f", fivm)
    views = {n.name: len(n.store) for n in fivm.engine.tree.materialized()}
    assert _sample(m, "ivm_fivm_materialized_views", query="f") == len(views)
    for name, size in views.items():
        assert _sample(m, "ivm_fivm_view_keys", query="f", view=name) == size
    f_stats = fivm.stats()
    assert f_stats["state_bytes"] >= f_stats["view_bytes"] + f_stats["base_bytes"] > 0
    assert _sample(m, "ivm_state_bytes_per_tuple", query="f") == pytest.approx(
        f_stats["state_bytes"] / f_stats["base_tuples"]
    )

    prop = ivm.maintain("Q(a) :- R(a,b), S(b,c)", engine="propagation", patterns=["R=insert-only", "S=insert-only"])
    prop.apply([u for u in ups if u[0] in "RS"])
    m.observe_view("p", prop)
    assert _sample(m, "ivm_constant_time", query="p") == 1
    assert _sample(m, "ivm_pattern_level", query="p", relation="S") == 0
    assert _sample(m, "ivm_pattern_downgrades_total", query="p", kind="relation") == 0
    prop.apply([("S", (0, 0), -1)])  # breaks the declared insert-only pattern: FIFO at best
    m.observe_view("p", prop)
    assert _sample(m, "ivm_pattern_level", query="p", relation="S") == 1
    assert _sample(m, "ivm_pattern_downgrades_total", query="p", kind="relation") == 1
    assert _sample(m, "ivm_constant_time", query="p") == 0


def test_inputs_latency_and_lag() -> None:
    m = Metrics()
    now = 1_000_000.0
    records = [Record("R", 0, i, None, b"", int((now - 2 - i) * 1000)) for i in range(3)] + [
        Record("S", 0, 0, None, b"")
    ]
    m.observe_inputs(records, now=now)
    assert _sample(m, "ivm_records_consumed_total", topic="R") == 3
    assert _sample(m, "ivm_records_consumed_total", topic="S") == 1
    assert _sample(m, "ivm_end_to_end_latency_seconds_count") == 1
    assert _sample(m, "ivm_end_to_end_latency_seconds_sum") == pytest.approx(4.0)  # the oldest record
    assert _sample(m, "ivm_last_batch_timestamp_seconds") == now
    m.observe_lag({("R", 0): 10, ("R", 1): 5, ("S", 0): 7}, {("R", 0): 4, ("S", 0): 7}, from_earliest=False)
    assert _sample(m, "ivm_consumer_lag_records", topic="R", partition="0") == 6
    assert _sample(m, "ivm_consumer_lag_records", topic="R", partition="1") is None  # not read yet, "latest"
    assert _sample(m, "ivm_consumer_lag_records", topic="S", partition="0") == 0
    m.observe_lag({("R", 1): 5}, {}, from_earliest=True)
    assert _sample(m, "ivm_consumer_lag_records", topic="R", partition="1") == 5


def test_slice_metrics_follow_the_slice_and_count_from_zero() -> None:
    from ivm.processor.placement.slices import SliceResponse

    m = Metrics()

    def answer(host: str, rebuilt: bool = False, replayed: int = 0) -> SliceResponse:
        return SliceResponse(index=3, version=1, parts={}, applied={}, stats={}, dead=[], full=False, host=host,
                             executor="1", rebuilt=rebuilt, replayed=replayed, seconds=0.02, tuples=40)  # fmt: skip

    m.observe_slice(answer("a"))
    assert _sample(m, "ivm_slice_tuples", slice="3", host="a", executor="1") == 40
    assert _sample(m, "ivm_slice_rebuilds_total", slice="3") == 0  # exported before the first rebuild
    assert _sample(m, "ivm_slice_replayed_records_total", slice="3") == 0
    m.observe_slice(answer("b", rebuilt=True, replayed=17))  # the slice moved to host b and was rebuilt there
    assert _sample(m, "ivm_slice_tuples", slice="3", host="a", executor="1") is None
    assert _sample(m, "ivm_slice_tuples", slice="3", host="b", executor="1") == 40
    assert _sample(m, "ivm_slice_rebuilds_total", slice="3") == 1
    assert _sample(m, "ivm_slice_replayed_records_total", slice="3") == 17
    assert _sample(m, "ivm_slice_apply_seconds_count", slice="3") == 2


def test_render_draws_one_png_per_dashboard(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import ivm.processor.commands.dashboards as dashboards

    asked: list[str] = []

    def fake_range(_url: str, promql: str, start: float, end: float, step: float) -> list[dict]:
        asked.append(promql)
        values = [[start + i * step, str(float(i))] for i in range(int((end - start) / step) + 1)]
        return [{"metric": {"query": "q", "relation": "R"}, "values": values}]

    monkeypatch.setattr(dashboards, "query_range", fake_range)
    paths = render_all("http://prometheus.invalid", tmp_path, 300)
    assert sorted(p.name for p in paths) == ["ivm-engines.png", "ivm-kafka.png", "ivm-overview.png"]
    for path in paths:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(asked) == sorted(dashboard_expressions())
