"""docker-compose.yml and monitoring/ agree with the local scripts and the metrics.

Docker cannot run here; these checks parse the files and compare them with what
the processor really defines, so a renamed metric or config file breaks a test.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import yaml

from processor.config import load_config
from processor.metrics import Metrics

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
    exprs = []
    for path in sorted((ROOT / "monitoring" / "grafana" / "dashboards").glob("*.json")):
        for panel in json.loads(path.read_text())["panels"]:
            exprs += [t["expr"] for t in panel.get("targets", [])]
    return exprs


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
