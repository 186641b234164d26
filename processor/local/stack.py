"""The local stack as one unit: the broker and the processor job as child processes.

Used by ``ivm local`` and ``ivm demo``; logs go under the stack's folder.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from ivm.processor.local.kafka import KafkaBroker
from ivm.processor.local.ports import free_port
from ivm.processor.local.process import stop_group


def project_root() -> Path:
    """The folder holding the ``processor`` package: the checkout, or ``site-packages`` when installed."""
    return Path(__file__).resolve().parents[2]


def in_checkout() -> bool:
    """Whether this code runs from a checkout of the repository (editable install or ``PYTHONPATH``), not
    from an installed wheel: the folder holding the package has the project's ``pyproject.toml``."""
    return (project_root() / "pyproject.toml").is_file()


def user_state_dir() -> Path:
    """``$XDG_STATE_HOME/ivm-kafka``, by default ``~/.local/state/ivm-kafka`` (the XDG base directories)."""
    xdg = os.environ.get("XDG_STATE_HOME")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".local" / "state"
    return base / "ivm-kafka"


def local_dir() -> Path:
    """Where service data, logs and (without ``state_dir``) the pipelines' state go.

    ``$IVM_LOCAL``; else, in a checkout, its ``.local/`` folder (git-ignored, beside the code being worked
    on); else (an installed wheel) the user's state folder :func:`user_state_dir`, never inside the
    installed package.
    """
    env = os.environ.get("IVM_LOCAL")
    if env:
        return Path(env)
    return project_root() / ".local" if in_checkout() else user_state_dir()


def _child_cwd() -> Path:
    """The working folder of a child ``python -m ivm.processor.cli``: the checkout (whose code it must import),
    else the state folder (not a folder of the user's that might hold a ``processor`` package of its own)."""
    if in_checkout():
        return project_root()
    folder = local_dir()
    folder.mkdir(parents=True, exist_ok=True)
    return folder


class ProcessorProcess:
    """``ivm run`` as a child process with its log in a file."""

    def __init__(
        self,
        config: Path,
        bootstrap: str,
        log_path: Path,
        metrics_port: int | None = None,
        extra: list[str] | None = None,
    ) -> None:
        self.metrics_port = metrics_port if metrics_port is not None else free_port()
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(log_path, "ab")  # noqa: SIM115 (lives as long as the process)
        self.proc = subprocess.Popen(
            [
                sys.executable, "-m", "ivm.processor.cli", "-v", "run",
                "--config", str(config),
                "--bootstrap", bootstrap,
                "--metrics-port", str(self.metrics_port),
                *(extra or []),
            ],
            stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True, cwd=_child_cwd(),
        )  # fmt: skip

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, kill: bool = False, timeout: float = 60) -> int:
        # a crash takes the driver and its JVM at once; a graceful stop signals only the driver,
        # which stops the stream and Spark (signalling the JVM too would race it)
        stop_group(self.proc, kill=kill, timeout=timeout, term_group=False)
        self._log.close()
        return self.proc.returncode

    def batches_logged(self) -> int:
        """Micro-batches this process has logged as committed so far."""
        if not self.log_path.exists():
            return 0
        return self.log_path.read_text(errors="replace").count("ivm.processor.job: batch ")

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


def start_broker(name: str) -> KafkaBroker:
    workdir = local_dir() / name / time.strftime("%Y%m%d-%H%M%S")
    return KafkaBroker.start(workdir)
