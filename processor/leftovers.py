"""A killed run's scratch folders, removed at the next start of the same pipeline.

A run that ends cleanly removes its scratch folders: Spark's ``ivm-spark-*`` (``spark.local.dir``), the
streaming query's ``ivm-checkpoint-*`` and its shard hosts' ``ivm-hosts/<pipeline>-<run>-<executor>``.
A run killed with SIGKILL (or a machine's power) cannot; so each run *claims* its folders (a small
``.ivm-owner`` file: the pipeline's name, the driver's pid and that process's start time) and every start
of a pipeline removes the folders its earlier runs claimed whose process is gone (:func:`clean`).

Never removed: a folder of another pipeline, of a process that still runs (the pid with the same start
time, so a reused pid does not count as alive), a folder no run claimed, a shard host's folder whose host
still runs (it exits with its executor, ``ivm.processor.placement.host``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)

OWNER = ".ivm-owner"
PREFIXES = ("ivm-spark-", "ivm-checkpoint-")


def _started(pid: int) -> int | None:
    from ivm.processor.placement.host import _stat

    found = _stat(pid)
    return found[3] if found else None


def claim(folder: str | Path, pipeline: str) -> None:
    """Mark ``folder`` as this process's scratch folder for ``pipeline`` (0600, beside its contents)."""
    path = Path(folder) / OWNER
    record = {"pipeline": pipeline, "pid": os.getpid(), "started": _started(os.getpid())}
    with contextlib.suppress(OSError):  # a folder that is not ours to write: nothing to clean later
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            json.dump(record, out)


def _owner(folder: Path) -> dict | None:
    try:
        record = json.loads((folder / OWNER).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def clean(pipeline: str, root: str | Path | None = None) -> list[Path]:
    """Remove the scratch folders of ``pipeline``'s earlier runs that are gone (module docstring), under
    ``root`` (the temporary directory); returns what was removed.  Cost: one directory listing."""
    from ivm.processor.placement.host import process_alive

    base = Path(root or tempfile.gettempdir())
    removed: list[Path] = []
    try:
        entries = list(base.iterdir())
    except OSError:
        return removed
    for folder in entries:
        if not folder.name.startswith(PREFIXES) or folder.is_symlink() or not folder.is_dir():
            continue
        owner = _owner(folder)
        if owner is None or owner.get("pipeline") != pipeline:
            continue
        pid, started = owner.get("pid"), owner.get("started")
        if not isinstance(pid, int) or process_alive(pid, started if isinstance(started, int) else None):
            continue
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    hosts = base / "ivm-hosts"
    mine = re.compile(re.escape(pipeline) + r"-[0-9a-f]{12}-[0-9a-f]{10}")
    for folder in sorted(hosts.iterdir()) if hosts.is_dir() and not hosts.is_symlink() else []:
        if not mine.fullmatch(folder.name):
            continue
        try:
            pid = int((folder / "host.txt").read_text().split()[2])
        except (OSError, IndexError, ValueError):
            pid = None
        if pid is not None and process_alive(pid, None):
            continue
        if pid is None and _locked(folder):  # a host being started right now
            continue
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    for folder in removed:
        log.warning("removed %s, left behind by a killed run of pipeline %s", folder, pipeline)
    return removed


def _locked(folder: Path) -> bool:
    """Whether a task holds ``folder``'s start lock (it is starting the folder's host)."""
    import fcntl

    try:
        fd = os.open(folder / "lock", os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)
    return False
