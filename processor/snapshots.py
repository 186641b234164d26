"""Snapshots of a pipeline's state: where they live, and writing them without stalling the stream.

A snapshot is the pickled :class:`~ivm.processor.pipeline.PipelineState` of one committed batch, named
``snapshot-<batch>.pkl``; the newest two are kept.  The location is a local folder or any URL that
``pyarrow.fs`` opens (``s3://bucket/prefix``, ``hdfs://namenode:8020/path``, ``gs://…``,
``file:///…``), so that every node of a cluster can read what another wrote.  A snapshot is written
under a temporary name and moved into place, so a reader never sees a torn one (on object stores,
where a move is a copy, the upload itself is all-or-nothing).

:class:`BackgroundSnapshots` takes a snapshot without stopping the stream: the process forks, and
the child (a copy-on-write image of the state as it was after the batch) pickles and writes it while
the parent applies the next batches.  At most one write is in flight; a snapshot due while one is
still being written is skipped (the next one due is taken), so a slow store delays snapshots, never
batches.  Recovery does not depend on any particular snapshot: it replays the inputs committed after
whichever is newest (:mod:`ivm.processor.state.recovery`).
"""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import os
import pickle
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyarrow.fs import FileSystem

    from ivm.processor.pipeline import PipelineState

log = logging.getLogger(__name__)
SNAPSHOT_FORMAT = 4  # bump whenever PipelineState, a view or an engine changes shape (4: relations' contents)
KEEP = 2
RESET = "reset"  # the fingerprint of a query whose state `ivm reset QUERY` dropped


def filesystem(location: str | Path) -> tuple[FileSystem, str]:
    """The ``pyarrow.fs`` file system of ``location`` and the path in it (a plain path is local).

    >>> fs, path = filesystem("/tmp/state")
    >>> type(fs).__name__, path
    ('LocalFileSystem', '/tmp/state')
    """
    from pyarrow import fs as pafs

    text = str(location)
    if "://" in text:
        return pafs.FileSystem.from_uri(text)
    return pafs.LocalFileSystem(), str(Path(text).absolute())


class StateStore:
    """Snapshots of a pipeline's state at ``location`` (a folder or a ``pyarrow.fs`` URL), newest two kept."""

    def __init__(self, location: str | Path) -> None:
        self.location = str(location)
        self.fs, self.root = filesystem(location)

    @property
    def directory(self) -> str:
        """The location as the user gave it (for messages)."""
        return self.location

    def snapshots(self) -> list[str]:
        """The snapshot paths in the store's file system, oldest first."""
        from pyarrow.fs import FileSelector, FileType, LocalFileSystem

        if isinstance(self.fs, LocalFileSystem):  # plain os calls: also safe in a forked child
            folder = Path(self.root)
            return sorted(str(p) for p in folder.glob("snapshot-*.pkl")) if folder.is_dir() else []
        infos = self.fs.get_file_info(FileSelector(self.root, allow_not_found=True))
        names = [
            i.path for i in infos if i.type == FileType.File and i.base_name.startswith("snapshot-")
            and i.base_name.endswith(".pkl")
        ]  # fmt: skip
        return sorted(names)

    def save(self, state: PipelineState) -> tuple[str, int]:
        """Write a snapshot now; returns its path and size in bytes."""
        blob = pickle.dumps({"format": SNAPSHOT_FORMAT, "state": state}, protocol=pickle.HIGHEST_PROTOCOL)
        path = self._path(state.last_batch_id)
        self._write(path, blob)
        self._prune()
        return path, len(blob)

    def load(self) -> PipelineState | None:
        """The newest readable snapshot of this format, or None."""
        for path in reversed(self.snapshots()):
            try:
                data = pickle.loads(self._read(path))
            except Exception as err:  # a torn or foreign file: try the older one
                log.warning("snapshot %s unreadable (%s); trying an older one", path, err)
                continue
            if data.get("format") != SNAPSHOT_FORMAT:
                log.warning(
                    "snapshot %s was written by another version (format %s); not used", path, data.get("format")
                )
                continue
            return data["state"]
        return None

    def drop_query(self, name: str, reset_mark: str = RESET) -> int:
        """Remove query ``name``'s state from every snapshot (its fingerprint set to ``reset_mark``, so the
        next start rebuilds it from the relations' contents); returns the number of snapshots that held it."""
        changed = 0
        for path in self.snapshots():
            try:
                data = pickle.loads(self._read(path))
            except Exception:
                continue
            state = data.get("state")
            if data.get("format") != SNAPSHOT_FORMAT or name not in state.views:
                continue
            del state.views[name]
            state.models.pop(name, None)
            state.fingerprints[f"query:{name}"] = reset_mark
            self._write(path, pickle.dumps(data, protocol=pickle.HIGHEST_PROTOCOL))
            changed += 1
        return changed

    def clear(self) -> int:
        """Delete every snapshot; returns how many there were."""
        paths = self.snapshots()
        for path in paths:
            self.fs.delete_file(path)
        return len(paths)

    def _path(self, batch_id: int) -> str:
        return f"{self.root.rstrip('/')}/snapshot-{batch_id:012d}.pkl"

    def _read(self, path: str) -> bytes:
        with self.fs.open_input_stream(path) as f:
            return f.read()

    def _write(self, path: str, blob: bytes) -> None:
        """Write under a temporary name, then move into place (a local file is also fsync'ed)."""
        from pyarrow.fs import LocalFileSystem

        tmp = f"{path}.{os.getpid()}.tmp"
        if isinstance(self.fs, LocalFileSystem):
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, "wb") as f:
                f.write(blob)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
            return
        self.fs.create_dir(self.root, recursive=True)
        with self.fs.open_output_stream(tmp) as f:
            f.write(blob)
        self.fs.move(tmp, path)

    def _prune(self) -> None:
        from pyarrow.fs import LocalFileSystem

        for old in self.snapshots()[:-KEEP]:
            try:
                if isinstance(self.fs, LocalFileSystem):
                    os.unlink(old)
                else:
                    self.fs.delete_file(old)
            except FileNotFoundError:  # a concurrent prune
                pass


@dataclass
class SnapshotWritten:
    """A finished background snapshot: its batch, path, size, and the seconds the child took to write it
    (measured by the child, from the fork to the file in place; not until the parent noticed)."""

    batch_id: int
    path: str
    size: int
    seconds: float


class BackgroundSnapshots:
    """Snapshots written by a forked child while the parent goes on (see the module docstring).

    :meth:`take` starts one unless one is in flight (then it returns ``False``: skipped);
    :meth:`poll` reaps a finished child and returns what it wrote; :meth:`wait` waits for the one in
    flight (a clean stop).  Where ``os.fork`` does not exist the snapshot is written in the caller.
    """

    def __init__(self, store: StateStore) -> None:
        self.store = store
        self._child: tuple[int, int, int, float] | None = None  # pid, read end, batch, started
        self.skipped = 0
        self.failed = 0

    @property
    def in_flight(self) -> bool:
        return self._child is not None

    def take(self, state: PipelineState) -> bool:
        """Start writing ``state``'s snapshot; ``False`` if one is still being written (skipped)."""
        self.poll()
        if self._child is not None:
            self.skipped += 1
            log.info("snapshot of batch %d skipped: the previous one is still being written", state.last_batch_id)
            return False
        if not hasattr(os, "fork"):
            self.store.save(state)
            return True
        _keep_py4j_sockets_in_the_parent()
        read, write = os.pipe()
        started = time.perf_counter()
        pid = os.fork()
        if pid == 0:  # the child: a frozen image of the state; write it, report, leave without cleanup
            gc.disable()  # nothing of the parent's is finalized here beyond what the fork itself released
            code = 1
            try:
                os.close(read)
                path, size = self.store.save(state)
                seconds = time.perf_counter() - started  # the write itself (one monotonic clock for both)
                os.write(write, json.dumps({"path": path, "size": size, "seconds": seconds}).encode())
                code = 0
            except BaseException as err:
                with contextlib.suppress(BaseException):
                    os.write(write, json.dumps({"error": f"{type(err).__name__}: {err}"}).encode())
            finally:
                os._exit(code)
        os.close(write)
        self._child = (pid, read, state.last_batch_id, started)
        return True

    def poll(self, block: bool = False) -> SnapshotWritten | None:
        """The snapshot the child finished (``None`` while it runs, or with none in flight)."""
        if self._child is None:
            return None
        pid, read, batch_id, started = self._child
        done, status = os.waitpid(pid, 0 if block else os.WNOHANG)
        if done == 0:
            return None
        self._child = None
        with os.fdopen(read, "rb") as pipe:
            report: dict[str, Any] = json.loads(pipe.read() or b"{}")
        # the child's own measure: fork to file in place; the time until this poll (the next batch) is not
        # the snapshot's
        seconds = float(report.get("seconds", time.perf_counter() - started))
        if os.waitstatus_to_exitcode(status) != 0 or "path" not in report:
            self.failed += 1
            log.error("snapshot of batch %d failed: %s", batch_id, report.get("error", f"exit status {status}"))
            return None
        return SnapshotWritten(batch_id, report["path"], report["size"], seconds)

    def wait(self, timeout: float) -> SnapshotWritten | None:
        """Wait up to ``timeout`` seconds for the snapshot in flight; after that it finishes on its own
        (the child outlives this process; its file appears atomically or not at all)."""
        deadline = time.monotonic() + timeout
        while self._child is not None and time.monotonic() < deadline:
            written = self.poll()
            if written is not None or self._child is None:
                return written
            time.sleep(0.02)
        return None


def _keep_py4j_sockets_in_the_parent() -> None:
    """Make py4j's socket shutdown a no-op in any process but this one (idempotent).

    A fork deletes the child's copies of the other threads' states, and with them their thread-locals:
    py4j keeps each thread's connection to the driver JVM in one, with a finalizer that closes it by
    ``socket.shutdown``, which ends the connection for every process sharing the socket, the parent
    included (seen: the parent's next call to Spark failed with "Connection reset by peer").  Closing
    the child's file descriptor alone leaves the parent's connection open.
    """
    try:
        from py4j import clientserver
    except ImportError:  # no Spark in this process
        return
    original = clientserver.quiet_shutdown
    if getattr(original, "owner_pid", None) is not None:
        return
    owner = os.getpid()

    def quiet_shutdown(sock: Any) -> None:
        if os.getpid() == owner:
            original(sock)

    quiet_shutdown.owner_pid = owner  # type: ignore[attr-defined]
    clientserver.quiet_shutdown = quiet_shutdown
