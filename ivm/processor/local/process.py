"""Stopping the local services' process groups (each service runs in a session of its own)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess


def stop_group(proc: subprocess.Popen, kill: bool = False, timeout: float = 30, term_group: bool = True) -> None:
    """Stop ``proc`` and its process group: SIGTERM (to the whole group, or to ``proc`` alone
    when ``term_group`` is false), then SIGKILL to the group after ``timeout`` seconds;
    ``kill`` sends SIGKILL at once.  Children left behind are killed too."""
    if proc.poll() is None:
        if kill:
            os.killpg(proc.pid, signal.SIGKILL)
        elif term_group:
            os.killpg(proc.pid, signal.SIGTERM)
        else:
            os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
