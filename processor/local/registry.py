"""Apicurio Registry, the Schema Registry for the Confluent wire format, as a local JVM process.

The registry runs from its official distribution on Maven Central
(``artifacts.apicurio_registry_dist``) with in-memory storage (an in-memory H2
database: everything registered is gone when it stops), binds to 127.0.0.1 on a
free port and keeps its log in a folder of its own.  Clients speak its
Confluent-compatible API at :attr:`SchemaRegistry.url` (``.../apis/ccompat/v7``).

The 3.x line needs Java 21 or newer; when only an older Java is found, the 2.x
line (Java 17) runs instead.  ``$IVM_REGISTRY_JAVA`` names a ``java`` to use.

>>> # with SchemaRegistry.start() as registry: registry.url -> 'http://127.0.0.1:PORT/apis/ccompat/v7'
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from functools import cache
from pathlib import Path

from ivm.processor.local.artifacts import APICURIO_LEGACY_VERSION, APICURIO_VERSION, apicurio_registry_dist
from ivm.processor.local.ports import free_port
from ivm.processor.local.process import stop_group

CCOMPAT_PATH = "/apis/ccompat/v7"
# Java major version each release line needs.
_JAVA_NEEDED = {"3": 21, "2": 17}


@cache
def java_major(java: str) -> int | None:
    """The major version of the Java runtime ``java``, or None if it does not run."""
    try:
        proc = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r'version "(\d+)(?:\.(\d+))?', proc.stderr + proc.stdout)
    if match is None:
        return None
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major


def find_java(min_major: int) -> str | None:
    """A ``java`` of at least version ``min_major``: ``$IVM_REGISTRY_JAVA``, ``$JAVA_HOME``,
    the one on ``PATH``, then the newest under ``/usr/lib/jvm``."""
    candidates: list[str] = []
    if os.environ.get("IVM_REGISTRY_JAVA"):
        candidates.append(os.environ["IVM_REGISTRY_JAVA"])
    if os.environ.get("JAVA_HOME"):
        candidates.append(str(Path(os.environ["JAVA_HOME"], "bin", "java")))
    on_path = shutil.which("java")
    if on_path:
        candidates.append(on_path)
    installed = [(java_major(j) or 0, j) for j in glob.glob("/usr/lib/jvm/*/bin/java")]
    candidates.extend(j for _, j in sorted(installed, reverse=True))
    for java in candidates:
        if Path(java).exists() and (java_major(java) or 0) >= min_major:
            return java
    return None


def _runnable_jar(dist: Path) -> Path:
    """``quarkus-run.jar`` (3.x, fast-jar layout) or ``*-runner.jar`` (2.x, legacy layout)."""
    for pattern in ("quarkus-run.jar", "*-runner.jar"):
        found = sorted(dist.glob(pattern))
        if found:
            return found[0]
    raise RuntimeError(f"no runnable jar in the Apicurio Registry distribution {dist}")


class SchemaRegistry:
    """A running registry; stop it with :meth:`stop` (or use it as a context manager)."""

    def __init__(
        self, workdir: Path, port: int, management_port: int | None, version: str, proc: subprocess.Popen
    ) -> None:
        self.workdir = workdir
        self.port = port
        self.management_port = management_port
        self.version = version
        self.proc = proc

    @property
    def base_url(self) -> str:
        """The registry's root, ``http://127.0.0.1:PORT``."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        """The Confluent-compatible API, ``http://127.0.0.1:PORT/apis/ccompat/v7``."""
        return self.base_url + CCOMPAT_PATH

    @property
    def log_path(self) -> Path:
        return self.workdir / "registry.log"

    @classmethod
    def start(
        cls,
        workdir: Path | None = None,
        port: int | None = None,
        heap: str = "384m",
        timeout: float = 180.0,
        version: str | None = None,
    ) -> SchemaRegistry:
        """Fetch (first use only) and start the registry; return once its API answers.

        ``version`` is an Apicurio Registry release (default: the 3.x release
        ``APICURIO_VERSION`` if a Java 21 is found, else ``APICURIO_LEGACY_VERSION``).
        """
        workdir = Path(workdir or tempfile.mkdtemp(prefix="ivm-registry-"))
        workdir.mkdir(parents=True, exist_ok=True)
        if version is None:
            version = APICURIO_VERSION if find_java(_JAVA_NEEDED["3"]) else APICURIO_LEGACY_VERSION
        needed = _JAVA_NEEDED.get(version.split(".")[0], 17)
        java = find_java(needed)
        if java is None:
            raise RuntimeError(f"Apicurio Registry {version} needs Java {needed} or newer; none found")
        jar = _runnable_jar(apicurio_registry_dist(version))
        port = port or free_port()
        props = [
            "-Dquarkus.http.host=127.0.0.1",
            f"-Dquarkus.http.port={port}",
            "-Dquarkus.otel.sdk.disabled=true",
            f"-Djava.io.tmpdir={workdir}",
        ]
        management_port = None
        if needed >= 21:  # 3.x serves health and metrics on a management port of its own
            management_port = free_port()
            props += ["-Dquarkus.management.host=127.0.0.1", f"-Dquarkus.management.port={management_port}"]
        out = open(workdir / "registry.log", "ab")  # noqa: SIM115 (lives as long as the registry)
        # The working directory is the workdir: Quarkus reads .env and config/ from it.
        proc = subprocess.Popen(
            [java, f"-Xmx{heap}", "-Xms64m", "-XX:+UseSerialGC", *props, "-jar", str(jar)],
            stdout=out, stderr=subprocess.STDOUT, cwd=workdir, start_new_session=True,
        )  # fmt: skip
        out.close()
        registry = cls(workdir, port, management_port, version, proc)
        try:
            registry.wait_ready(timeout)
        except Exception as err:
            registry.stop(kill=True)
            raise RuntimeError(f"Apicurio Registry {version} did not start; see {registry.log_path}") from err
        return registry

    def wait_ready(self, timeout: float = 180.0) -> None:
        """Wait until the Confluent-compatible API lists the subjects."""
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the registry exited with code {self.proc.returncode}")
            try:
                with urllib.request.urlopen(self.url + "/subjects", timeout=5) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"the registry API at {self.url} did not answer within {timeout:.0f}s")
            time.sleep(0.5)

    def stop(self, kill: bool = False) -> None:
        """Stop the registry (SIGTERM, then SIGKILL after 30 s; ``kill`` kills at once)."""
        stop_group(self.proc, kill=kill)

    def __enter__(self) -> SchemaRegistry:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
