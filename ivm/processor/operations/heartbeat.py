"""The trace a running ``ivm run`` leaves for ``ivm status``: ``<state_dir>/running.json``.

While the job runs, :class:`Heartbeat` keeps a small JSON file in the
pipeline's state folder: the process id, the host name, when the job started,
when it last refreshed the file (every :data:`INTERVAL_SECONDS`, from a daemon
thread) and the URL of its metrics endpoint.  A clean stop removes it and
leaves ``last-run.json`` instead (the same fields and ``stopped_at``); a
process that dies leaves ``running.json`` behind, whose heartbeat goes stale.

:func:`liveness` reads the folder back into a verdict: *running* when the
heartbeat is fresh (younger than :data:`STALE_INTERVALS` intervals) and, on
this host, the process is alive; *not running* when it is stale, the process is
gone, or the last run stopped cleanly; *never ran* when neither file is there.
Every write replaces the file atomically (a reader never sees half of one).
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

RUNNING_FILE = "running.json"  # present while a job runs (or after one died)
LAST_RUN_FILE = "last-run.json"  # written by a clean stop
INTERVAL_SECONDS = 3.0  # how often the running job refreshes its heartbeat
STALE_INTERVALS = 3  # a heartbeat older than this many intervals is stale


def iso(seconds: float) -> str:
    """A POSIX time as ISO-8601 UTC with milliseconds and a ``Z``.

    >>> iso(1714564800.25)
    '2024-05-01T12:00:00.250Z'
    """
    moment = datetime.datetime.fromtimestamp(seconds, datetime.UTC)
    return moment.replace(tzinfo=None).isoformat(timespec="milliseconds") + "Z"


def parse_iso(text: str) -> float:
    """The POSIX time of an ISO-8601 timestamp written by :func:`iso` (a naive one is taken as UTC).

    >>> parse_iso("2024-05-01T12:00:00.250Z")
    1714564800.25
    """
    moment = datetime.datetime.fromisoformat(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return moment.timestamp()


class Heartbeat:
    """Keep ``<folder>/running.json`` fresh while a job runs: :meth:`start`, then :meth:`stop` on a clean stop.

    A file that cannot be written is logged, never a reason to stop the job.
    """

    def __init__(
        self,
        folder: Path | str,
        metrics_url: str | None = None,
        *,
        pipeline: str | None = None,
        interval: float = INTERVAL_SECONDS,
    ) -> None:
        self.folder = Path(folder)
        self.path = self.folder / RUNNING_FILE
        self.interval = interval
        self.started = time.time()
        self.record: dict[str, Any] = {
            "pipeline": pipeline,
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started_at": iso(self.started),
            "heartbeat_at": iso(self.started),
            "interval_seconds": interval,
            "metrics_url": metrics_url,
        }
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ivm-heartbeat", daemon=True)

    def start(self) -> Heartbeat:
        """Write the file now and refresh it every ``interval`` seconds from a daemon thread."""
        other = liveness(self.folder)
        if other.state == "running" and other.pid != os.getpid():
            log.warning(
                "%s says another ivm run of this pipeline is running (pid %s on %s, heartbeat %.0fs ago); "
                "the newer one fences the older one's Kafka transactions",
                self.path, other.pid, other.host, other.heartbeat_age or 0.0,
            )  # fmt: skip
        self._write(self.path, self.record)  # its heartbeat is its start
        self._thread.start()
        return self

    def set_slices(self, slices: list[dict[str, Any]]) -> None:
        """Where each slice of the state lives (``placement = "executors"``), written with the next beat."""
        self.record["slices"] = slices

    def beat(self) -> None:
        """Refresh the heartbeat time in the file."""
        self.record["heartbeat_at"] = iso(time.time())
        self._write(self.path, self.record)

    def stop(self, timeout: float = 1.0) -> None:
        """End the refreshes, remove ``running.json`` (if it is still this job's) and write ``last-run.json``."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
        try:
            current = json.loads(self.path.read_text())
        except (OSError, ValueError):
            current = None
        if isinstance(current, dict) and (current.get("pid"), current.get("host"), current.get("started_at")) != (
            self.record["pid"], self.record["host"], self.record["started_at"],
        ):  # fmt: skip
            return  # another job of the same pipeline took the file over: its trace, not ours
        now = time.time()
        self._write(self.folder / LAST_RUN_FILE, {**self.record, "heartbeat_at": iso(now), "stopped_at": iso(now)})
        try:
            self.path.unlink(missing_ok=True)
        except OSError as err:
            log.warning("cannot remove %s: %s", self.path, err)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.beat()

    def _write(self, path: Path, record: Mapping[str, Any]) -> None:
        """Replace ``path`` with ``record`` as JSON, atomically; a failure is logged."""
        temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            temporary.write_text(json.dumps(record, indent=2) + "\n")
            os.replace(temporary, path)
        except OSError as err:
            log.warning("cannot write the heartbeat file %s: %s", path, err)


@dataclass
class Liveness:
    """What the state folder says about the pipeline's process (see :func:`liveness`).

    ``state`` is ``"running"``, ``"not running"`` or ``"never ran"``; ``reason`` says why in words
    (``"heartbeat 2s ago"``, ``"pid 123 is gone"``, ``"stopped cleanly"``); the other fields come from
    the file (``None`` when absent).  Times are POSIX seconds.
    """

    state: str
    reason: str
    pid: int | None = None
    host: str | None = None
    this_host: bool = False
    started_at: float | None = None
    heartbeat_at: float | None = None
    heartbeat_age: float | None = None
    stopped_at: float | None = None
    metrics_url: str | None = None
    file: str | None = None
    slices: list[dict[str, Any]] | None = None  # placement = "executors": where each slice of the state lives

    @property
    def running(self) -> bool:
        return self.state == "running"

    def describe(self) -> str:
        """One phrase: ``running (pid P on HOST, heartbeat 2s ago)``, ``not running (last heartbeat 5m ago,
        pid P is gone)``, ``never ran here``."""
        if self.state == "never ran":
            return "never ran here"
        if self.state == "running":
            return f"running (pid {self.pid} on {self.host}, {self.reason})"
        return f"not running ({self.reason})"

    def as_json(self) -> dict[str, Any]:
        """The fields as JSON data, times ISO-8601 UTC."""
        return {
            "state": self.state,
            "summary": self.describe(),
            "reason": self.reason,
            "pid": self.pid,
            "host": self.host,
            "started_at": _iso_or_none(self.started_at),
            "heartbeat_at": _iso_or_none(self.heartbeat_at),
            "heartbeat_age_seconds": None if self.heartbeat_age is None else round(self.heartbeat_age, 3),
            "stopped_at": _iso_or_none(self.stopped_at),
            "metrics_url": self.metrics_url,
            "slices": self.slices,
            "file": self.file,
        }


def _iso_or_none(seconds: float | None) -> str | None:
    return None if seconds is None else iso(seconds)


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this host (and is not a zombie waiting to be reaped)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: it exists
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rpartition(")")[2].split()[:1] != ["Z"]


def ago(seconds: float) -> str:
    """An age in words: ``2s``, ``5m 3s``, ``2h 10m``, ``3d 4h``.

    >>> [ago(s) for s in (0.4, 42, 303, 7800, 273600)]
    ['0s', '42s', '5m 3s', '2h 10m', '3d 4h']
    """
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60}s"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60}m"
    return f"{s // 86400}d {s % 86400 // 3600}h"


def liveness(
    folder: Path | str,
    *,
    now: float | None = None,
    host: str | None = None,
    alive: Callable[[int], bool] = pid_alive,
) -> Liveness:
    """The verdict of the heartbeat files in ``folder`` at time ``now`` (default: the clock), seen from
    ``host`` (default: this one); ``alive`` tells whether a pid of this host exists."""
    folder = Path(folder)
    now = time.time() if now is None else now
    host = socket.gethostname() if host is None else host
    running = folder / RUNNING_FILE
    record = _read(running)
    if record is None:
        last = _read(folder / LAST_RUN_FILE)
        if last is None:
            if running.exists():
                return Liveness("not running", f"{running} cannot be read", file=str(running))
            return Liveness("never ran", f"no {RUNNING_FILE} in {folder}")
        out = _from_record(last, now, host, str(folder / LAST_RUN_FILE))
        out.state = "not running"
        stopped = out.stopped_at if out.stopped_at is not None else out.heartbeat_at
        out.reason = "stopped cleanly" + (f" {ago(now - stopped)} ago" if stopped is not None else "")
        return out
    out = _from_record(record, now, host, str(running))
    interval = record.get("interval_seconds")
    interval = float(interval) if isinstance(interval, int | float) and interval > 0 else INTERVAL_SECONDS
    fresh = out.heartbeat_age is not None and out.heartbeat_age < STALE_INTERVALS * interval
    gone = out.this_host and out.pid is not None and not alive(out.pid)
    beat = "no heartbeat time" if out.heartbeat_age is None else f"heartbeat {ago(out.heartbeat_age)} ago"
    if fresh and not gone:
        out.state, out.reason = "running", beat
    elif gone:
        out.state, out.reason = "not running", f"last {beat}; pid {out.pid} is gone"
    else:
        out.state, out.reason = "not running", f"last {beat}"
    return out


def _read(path: Path) -> dict[str, Any] | None:
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def _from_record(record: Mapping[str, Any], now: float, host: str, file: str) -> Liveness:
    def when(key: str) -> float | None:
        value = record.get(key)
        try:
            return parse_iso(value) if isinstance(value, str) else None
        except ValueError:
            return None

    pid = record.get("pid")
    beat = when("heartbeat_at")
    return Liveness(
        state="",
        reason="",
        pid=pid if isinstance(pid, int) else None,
        host=record.get("host") if isinstance(record.get("host"), str) else None,
        this_host=record.get("host") == host,
        started_at=when("started_at"),
        heartbeat_at=beat,
        heartbeat_age=None if beat is None else max(0.0, now - beat),
        stopped_at=when("stopped_at"),
        metrics_url=record.get("metrics_url") if isinstance(record.get("metrics_url"), str) else None,
        file=file,
        slices=record.get("slices") if isinstance(record.get("slices"), list) else None,
    )
