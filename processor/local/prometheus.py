"""A local Prometheus server (the Debian package's binary) scraping the processor."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ivm.processor.local.ports import free_port, wait_for_port
from ivm.processor.local.process import stop_group
from ivm.resources import monitoring_dir

RULES_DIR = monitoring_dir() / "rules"  # the shipped alert rules (ivm.resources)


def prometheus_binary() -> str:
    found = os.environ.get("IVM_PROMETHEUS") or shutil.which("prometheus") or "/usr/bin/prometheus"
    if not Path(found).exists():
        raise RuntimeError("Prometheus is not installed: install the Debian package 'prometheus' (make setup does)")
    return found


class PrometheusServer:
    """A running Prometheus; :meth:`query` evaluates PromQL through its HTTP API."""

    def __init__(self, workdir: Path, port: int, proc: subprocess.Popen) -> None:
        self.workdir = workdir
        self.port = port
        self.proc = proc

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @classmethod
    def start(
        cls,
        targets: Sequence[str],
        workdir: Path | None = None,
        port: int | None = None,
        scrape_interval: str = "1s",
        rule_files: Sequence[Path] = (),
        timeout: float = 60.0,
    ) -> PrometheusServer:
        workdir = Path(workdir or tempfile.mkdtemp(prefix="ivm-prometheus-"))
        workdir.mkdir(parents=True, exist_ok=True)
        port = port or free_port()
        config = {
            "global": {"scrape_interval": scrape_interval, "evaluation_interval": scrape_interval},
            "rule_files": [str(p) for p in rule_files],
            "scrape_configs": [{"job_name": "ivm-processor", "static_configs": [{"targets": list(targets)}]}],
        }
        # JSON is YAML: no YAML writer needed.
        (workdir / "prometheus.yml").write_text(json.dumps(config, indent=2))
        log = open(workdir / "prometheus.log", "ab")  # noqa: SIM115 (lives as long as the server)
        proc = subprocess.Popen(
            [
                prometheus_binary(),
                f"--config.file={workdir / 'prometheus.yml'}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--web.enable-lifecycle",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        server = cls(workdir, port, proc)
        try:
            wait_for_port(port, timeout, alive=lambda: proc.poll() is None)
            server._wait_ready(timeout)
        except Exception as err:
            server.stop()
            raise RuntimeError(f"Prometheus did not start; see {workdir / 'prometheus.log'}") from err
        return server

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.3)
        raise TimeoutError("Prometheus not ready")

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The instant vector of a PromQL expression (``data.result``)."""
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        with urllib.request.urlopen(url, timeout=10) as resp:
            body = json.load(resp)
        if body.get("status") != "success":
            raise RuntimeError(f"PromQL {expr!r} failed: {body}")
        return body["data"]["result"]

    def stop(self) -> None:
        stop_group(self.proc, timeout=20)

    def __enter__(self) -> PrometheusServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
