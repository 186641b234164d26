"""Shard hosts: long-lived processes on the executors' machines that keep the slices in memory.

Spark's Python workers come and go (idle ones exit after a minute, a failed task
ends its worker, a stage's task may land on any executor), so the slices do not
live in them.  A *shard host* is a process of its own, started by the first task
that needs one on its executor (:func:`connect`), detached from the worker, and
reached over a socket (``multiprocessing.connection``: pickled messages,
authenticated by the run's key).  It holds any number of slices
(:class:`SliceTable`); the driver remembers which host holds which slice and
sends the next batch's request there, from whatever executor the task runs on,
so a slice stays where it was built.

A host applies batch ``v`` of a slice only on top of ``v - 1``, answers a
repeated ``v`` with the stored outputs (a retried task), and otherwise rebuilds
the slice: its newest snapshot (``processor.snapshots``, at the pipeline's
snapshot location, a folder or URL every node reads) plus a replay of the
committed inputs after it (``processor.recovery.replay``), or the relation
topics' whole history when it has no snapshot.  Before applying ``v`` it
snapshots the committed ``v - 1`` every ``snapshot_every`` batches, in a forked
child, so the stream does not wait for the write.

A host exits when the driver says so (a clean stop), or when no request came for
``idle_seconds`` (a driver that died): its folder is removed either way.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import pickle
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import Client, Connection, Listener
from pathlib import Path
from typing import Any

from processor.config import PipelineConfig
from processor.pipeline import Record, RecordBatch
from processor.placement.routing import slice_count
from processor.placement.slices import Piece, Seal, Slice, SlicePipeline, SliceRequest, SliceResponse
from processor.relations import fingerprint
from processor.snapshots import BackgroundSnapshots, StateStore

log = logging.getLogger(__name__)

IDLE_SECONDS = 300.0  # a host no request reached for this long exits (its driver is gone)
START_TIMEOUT = 60.0


@dataclass(frozen=True)
class HostSpec:
    """What a shard host serves: the pipeline, the run's key, where snapshots go."""

    config: PipelineConfig
    run: str  # the driver run's id: hosts of an earlier run are never reused
    authkey: bytes
    snapshot_location: str
    idle_seconds: float = IDLE_SECONDS


def slice_store(spec: HostSpec, index: int, config_fingerprint: str) -> StateStore:
    """Where slice ``index``'s snapshots go: per configuration fingerprint, so a changed query never
    reads another definition's state."""
    return StateStore(f"{slices_root(spec.snapshot_location)}/{config_fingerprint}/{index}")


def slices_root(location: str) -> str:
    """The folder (or URL) of every slice's snapshots under a pipeline's snapshot location."""
    return f"{location.rstrip('/')}/slices"


def slice_stores(location: str) -> list[StateStore]:
    """The snapshot store of every slice found under ``location`` (every configuration's)."""
    from pyarrow.fs import FileSelector, FileType

    from processor.snapshots import filesystem

    fs, root = filesystem(slices_root(location))
    infos = fs.get_file_info(FileSelector(root, recursive=True, allow_not_found=True))
    folders = sorted({i.path.rsplit("/", 1)[0] for i in infos if i.type == FileType.File})
    prefix = slices_root(location)
    return [StateStore(prefix + folder[len(root) :]) for folder in folders]


def clear_slices(location: str) -> int:
    """Delete every slice snapshot under ``location`` (a new history of the pipeline starts, or a reset);
    returns how many there were."""
    stores = slice_stores(location)
    removed = sum(store.clear() for store in stores)
    return removed


class SliceTable:
    """The slices a host keeps, by index: staged pieces, versions, rebuilds and snapshots (module docstring).

    Thread safe: one lock around every slice operation (the GIL runs one at a time anyway, and a
    snapshot's fork then never copies another thread's half-done update).
    """

    def __init__(self, spec: HostSpec) -> None:
        self.spec = spec
        self.config = spec.config
        self.slices: dict[int, Slice] = {}
        self.rebuilds = 0
        self._staged: dict[int, dict[int, dict[tuple[str, int, int], Piece]]] = {}  # slice -> batch -> pieces
        self._snapshots: dict[int, BackgroundSnapshots] = {}
        self._snapshotted: dict[int, int] = {}  # slice -> the batch of the newest snapshot started
        self._lock = threading.Lock()  # the slices
        self._stage_lock = threading.Lock()  # the staged pieces: tasks stage batch v + 1 while v is sealed
        self._fingerprint = ""

    @property
    def fingerprint(self) -> str:
        """The configuration's state fingerprint (relations, queries, slice count)."""
        if not self._fingerprint:
            probe = SlicePipeline(self.config, 0)
            self._fingerprint = fingerprint({"state": probe.fingerprints, "slices": slice_count(self.config)})
        return self._fingerprint

    def stage(self, pieces: list[Piece]) -> None:
        """Keep ``pieces`` until their batch is sealed (a retried task's piece replaces the first one)."""
        with self._stage_lock:
            for piece in pieces:
                current = self.slices.get(piece.index)
                if current is not None and piece.version <= current.version:
                    continue  # a late retry of a batch applied already
                self._staged.setdefault(piece.index, {}).setdefault(piece.version, {})[piece.key] = piece

    def seal(self, seal: Seal) -> SliceResponse:
        """Apply batch ``seal.version`` to its slice: its staged pieces, and from Kafka the records of the
        partitions whose pieces are missing; first the slice is rebuilt if it is not at ``version - 1``.
        Sealing the batch applied last answers with the stored outputs."""
        with self._lock:
            started = time.perf_counter()
            index = seal.index
            current = self.slices.get(index)
            empty = RecordBatch.of([])
            if current is not None and current.version == seal.version:
                return current.apply(SliceRequest(index, seal.version, empty, seal.before, full=seal.full))
            rebuilt, replayed = False, 0
            if current is None or current.version != seal.version - 1:
                # the pipeline's first batch creates the slice; any later one rebuilds it from the history
                rebuilt = seal.version > 0
                if rebuilt:
                    have = "no state" if current is None else f"batch {current.version}"
                    log.warning("slice %d: %s, the batch builds on %d; rebuilding it", index, have, seal.version - 1)
                current, replayed = self._rebuild(seal)
            current.advance(seal.before)
            self._snapshot(index, current)
            records, quiet, fetched = self._records(current, seal)
            request = SliceRequest(index, seal.version, records, seal.before, seal.origin, quiet, seal.full)
            response = current.apply(request)
            with self._stage_lock:  # pieces of older batches are of no more use
                for other, staged in self._staged.items():
                    for version in [v for v in staged if v < seal.version or (other == index and v == seal.version)]:
                        del staged[version]
            response.rebuilt, response.replayed = rebuilt, replayed + fetched
            response.snapshot = self._snapshotted.get(index)
            response.seconds = time.perf_counter() - started
            return response

    def _records(self, current: Slice, seal: Seal) -> tuple[RecordBatch, set[tuple[str, int, int]], int]:
        """Batch ``seal.version``'s records of the slice, in (topic, partition, offset) order, with the
        quiet ones (another slice reports their dead letters), and how many were read from Kafka."""
        from processor.recovery import read_range

        with self._stage_lock:
            pieces = dict(self._staged.get(seal.index, {}).get(seal.version, {}))
        by_partition: dict[tuple[str, int], list[Piece]] = {}
        for piece in pieces.values():
            by_partition.setdefault(piece.tp, []).append(piece)
        taken: list[RecordBatch] = []
        quiet: set[tuple[str, int, int]] = set()
        missing = {}
        for tp, count in sorted(seal.expected.items()):
            parts = sorted(by_partition.get(tp, []), key=lambda p: p.key)
            if sum(len(p.records) for p in parts) != count:
                missing[tp] = seal.after[tp]
                continue
            for part in parts:
                taken.append(part.records)
                quiet |= {(*tp, offset) for offset in part.quiet}
        records: list[Record] = []
        fetched = 0
        if missing:  # pieces lost with a host, or sent to another one: read the partitions' part of the batch
            pipeline = current.pipeline
            log.warning("slice %d, batch %d: reading %s from Kafka", seal.index, seal.version, sorted(missing))
            before = {tp: seal.before.get(tp, 0) for tp in missing}
            for chunk in read_range(self.config.kafka, before, missing, isolation=self.config.isolation_level):
                for record in chunk:
                    where = pipeline.slices_of(record)
                    if seal.index in where:
                        records.append(record)
                        fetched += 1
                        if where[0] != seal.index:
                            quiet.add((record.topic, record.partition, record.offset))
        # each partition's records in offset order (the pipeline puts the partitions in order)
        return RecordBatch.concat([*taken, RecordBatch.of(records)]), quiet, fetched

    def _rebuild(self, seal: Seal) -> tuple[Slice, int]:
        """Slice ``seal.index`` at batch ``version - 1``: its newest snapshot (or empty, at the history's
        origin) plus the committed inputs after it."""
        from processor.recovery import adopt, replay

        pipeline = SlicePipeline(self.config, seal.index)
        snapshot = slice_store(self.spec, seal.index, self.fingerprint).load()
        if snapshot is not None and snapshot.last_batch_id <= seal.version - 1:
            # a query whose state `ivm reset QUERY` dropped is built again from the slice's relation contents
            # (the tuples routed here, which are the ones its shard needs: the routing did not change)
            adopt(pipeline, snapshot)
        else:
            pipeline.state.positions = dict(seal.origin)
            pipeline.state.origin = dict(seal.origin)
        replayed = replay(pipeline, self.config.kafka, seal.before)
        pipeline.state.positions.update(seal.before)
        pipeline.state.last_batch_id = seal.version - 1
        rebuilt = Slice(pipeline)
        rebuilt.baseline()
        self.slices[seal.index] = rebuilt
        self.rebuilds += 1
        if seal.version > 0:
            log.warning(
                "slice %d rebuilt at batch %d: snapshot of batch %s, %d records replayed",
                seal.index, seal.version - 1, snapshot.last_batch_id if snapshot else None, replayed,
            )  # fmt: skip
        return rebuilt, replayed

    def _snapshot(self, index: int, current: Slice) -> None:
        """Snapshot slice ``index`` at its committed version when one is due (in a forked child)."""
        every = self.config.snapshot_every
        version = current.version
        if not every or version < 0 or version % every or self._snapshotted.get(index) == version:
            return
        writer = self._snapshots.get(index)
        if writer is None:
            writer = self._snapshots[index] = BackgroundSnapshots(slice_store(self.spec, index, self.fingerprint))
        writer.poll()
        if writer.take(current.pipeline.state):
            self._snapshotted[index] = version

    def drop(self, indexes: list[int]) -> None:
        """Forget slices that another host holds now (the driver moved them)."""
        with self._lock:
            for index in indexes:
                self.slices.pop(index, None)
                with self._stage_lock:
                    self._staged.pop(index, None)

    def status(self) -> list[dict[str, Any]]:
        """Per slice: version and stored tuples."""
        with self._lock:
            return [
                {"slice": i, "batch": s.version, "tuples": sum(len(c) for c in s.pipeline.state.relations.values())}
                for i, s in sorted(self.slices.items())
            ]

    def close(self, timeout: float = 10.0) -> None:
        """Wait for the snapshots being written."""
        for writer in self._snapshots.values():
            if writer.in_flight:
                writer.wait(timeout)


# --- the host process ---------------------------------------------------------------------------------


def serve(folder: Path) -> None:
    """The shard host's main loop: serve requests until told to stop or idle (module docstring)."""
    spec: HostSpec = pickle.loads((folder / "spec.pickle").read_bytes())
    table = SliceTable(spec)
    bind = os.environ.get("SPARK_LOCAL_IP") or "0.0.0.0"
    listener = Listener((bind, 0), authkey=spec.authkey)
    advertised = bind if bind != "0.0.0.0" else socket.gethostname()
    address = (advertised, listener.address[1])
    where = f"{address[0]}:{address[1]}"
    executor = executor_name()  # the host runs in its executor's folder (started from its worker)
    last = [time.monotonic()]
    stopping = threading.Event()

    def handle(conn: Connection) -> None:
        with contextlib.closing(conn):
            while not stopping.is_set():
                try:
                    kind, body = conn.recv()
                except (EOFError, OSError):
                    return
                last[0] = time.monotonic()
                try:
                    if kind == "stage":
                        table.stage(body)
                        reply: Any = where
                    elif kind == "seal":
                        reply = []
                        for seal in body:
                            try:
                                response = table.seal(seal)
                            except Exception as err:  # this slice's seal fails; the others' stand
                                log.exception("sealing batch %d of slice %d failed", seal.version, seal.index)
                                reply.append(err)
                                continue
                            response.host, response.pid, response.executor = where, os.getpid(), executor
                            reply.append(response)
                    elif kind == "drop":
                        table.drop(body)
                        reply = "dropped"
                    elif kind == "status":
                        reply = {"host": where, "pid": os.getpid(), "slices": table.status()}
                    elif kind == "stop":
                        stopping.set()
                        reply = "stopping"
                    else:
                        reply = ValueError(f"unknown request {kind!r}")
                except Exception as err:  # the task that asked fails with it; the host goes on
                    log.exception("request %s failed", kind)
                    reply = err
                last[0] = time.monotonic()
                try:
                    conn.send(reply)
                except (OSError, pickle.PicklingError) as err:
                    log.warning("could not answer %s: %s", kind, err)
                    return
                if stopping.is_set():
                    _wake(address, spec.authkey)

    def accept() -> None:
        while not stopping.is_set():
            try:
                conn = listener.accept()
            except Exception:  # a client that failed the authentication, or the listener closed
                if stopping.is_set():
                    return
                continue
            if stopping.is_set():
                conn.close()
                return
            threading.Thread(target=handle, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True, name="accept").start()
    (folder / "host.tmp").write_text(f"{address[0]}\n{address[1]}\n{os.getpid()}\n")
    os.replace(folder / "host.tmp", folder / "host.txt")
    log.warning("shard host %s:%d (pid %d) serving run %s", address[0], address[1], os.getpid(), spec.run)
    while not stopping.wait(1.0):
        if time.monotonic() - last[0] > spec.idle_seconds:
            log.warning("no request for %.0fs: the driver is gone; exiting", spec.idle_seconds)
            break
    stopping.set()
    table.close()
    listener.close()
    shutil.rmtree(folder, ignore_errors=True)
    with contextlib.suppress(OSError):
        folder.parent.rmdir()  # the last host of the machine leaves no folder behind


def _wake(address: tuple[str, int], authkey: bytes) -> None:
    """Unblock the accepting thread (it is waiting in ``accept``)."""
    with contextlib.suppress(Exception):
        Client(address, authkey=authkey).close()


# --- reaching a host from a task ----------------------------------------------------------------------


def hosts_root() -> Path:
    """The machine's folder of shard hosts (one subfolder per host)."""
    return Path(tempfile.gettempdir()) / "ivm-hosts"


def executor_key() -> str:
    """This Python worker's executor: its working folder (Spark runs each executor in its own; in local
    mode it is the driver's)."""
    return os.getcwd()


def executor_name() -> str:
    """A short name for this worker's executor: the executor id of a standalone worker's folder
    (``.../app-…/<id>``), else ``driver``, and the machine."""
    cwd = Path(os.getcwd())
    executor = cwd.name if cwd.parent.name.startswith("app-") else "driver"
    return f"{executor}@{socket.gethostname()}"


def host_folder(spec: HostSpec) -> Path:
    digest = hashlib.sha256(executor_key().encode()).hexdigest()[:10]
    return hosts_root() / f"{spec.config.name}-{spec.run}-{digest}"


_CONNECTIONS: dict[tuple[str, int], Connection] = {}


def connect(spec: HostSpec, owner: tuple[str, int] | None = None) -> tuple[Connection, tuple[str, int]]:
    """A connection to the host that holds the slice (``owner``, if it answers), else to this executor's
    own host, started now if it is not running.  Connections are kept for the worker's next tasks."""
    if owner is not None:
        try:
            return _open(owner, spec.authkey), owner
        except (OSError, EOFError) as err:
            log.warning("shard host %s:%d does not answer (%s): this executor's host takes the slice", *owner, err)
    folder = host_folder(spec)
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        address = _running(folder)
        if address is not None:
            with contextlib.suppress(OSError, EOFError):
                return _open(address, spec.authkey), address
        return _start(spec, folder)


def _open(address: tuple[str, int], authkey: bytes) -> Connection:
    conn = _CONNECTIONS.get(address)
    if conn is not None and not conn.closed:
        return conn
    conn = Client(address, authkey=authkey)
    _CONNECTIONS[address] = conn
    return conn


def forget(address: tuple[str, int]) -> None:
    """Drop a kept connection (it failed)."""
    conn = _CONNECTIONS.pop(address, None)
    if conn is not None:
        with contextlib.suppress(OSError):
            conn.close()


def _running(folder: Path) -> tuple[str, int] | None:
    try:
        host, port, _pid = (folder / "host.txt").read_text().split()
    except (OSError, ValueError):
        return None
    return host, int(port)


def _start(spec: HostSpec, folder: Path) -> tuple[Connection, tuple[str, int]]:
    """Start this executor's shard host, detached from the worker, and connect to it."""
    (folder / "host.txt").unlink(missing_ok=True)
    (folder / "spec.pickle").write_bytes(pickle.dumps(spec))
    with open(folder / "host.log", "ab") as out:
        subprocess.Popen(
            [sys.executable, "-m", "processor.placement.host", str(folder)],
            stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True, close_fds=True,
        )  # fmt: skip
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        address = _running(folder)
        if address is not None:
            return _open(address, spec.authkey), address
        time.sleep(0.05)
    raise TimeoutError(f"the shard host in {folder} did not start within {START_TIMEOUT:.0f}s (see host.log)")


def stage(spec: HostSpec, pieces: list[Piece], owner: tuple[str, int] | None) -> tuple[str, int]:
    """Send ``pieces`` (of one slice) to the slice's host (``owner`` if it answers, else this executor's);
    returns the address of the host that took them.  One retry on a fresh connection."""
    for attempt in (1, 2):
        conn, address = connect(spec, owner)
        try:
            conn.send(("stage", pieces))
            reply = conn.recv()
        except (OSError, EOFError):
            forget(address)
            if attempt == 2:
                raise
            owner = None if address == owner else owner
            continue
        if isinstance(reply, BaseException):
            raise reply
        return address
    raise AssertionError("unreachable")


def request(address: tuple[str, int], authkey: bytes, kind: str, body: Any = None, timeout: float | None = None) -> Any:
    """One request to the host at ``address`` on a connection of its own (from the driver): its reply,
    ``TimeoutError`` after ``timeout`` seconds."""
    conn = Client(address, authkey=authkey)
    try:
        conn.send((kind, body))
        if timeout is not None and not conn.poll(timeout):
            raise TimeoutError(f"shard host {address[0]}:{address[1]} did not answer {kind} in {timeout:.0f}s")
        return conn.recv()
    finally:
        conn.close()


def tell(address: tuple[str, int], authkey: bytes, kind: str, timeout: float = 5.0) -> Any:
    """Send a ``status`` or ``stop`` request to the host at ``address`` (from the driver)."""
    return request(address, authkey, kind, None, timeout)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    serve(Path(sys.argv[1]))
