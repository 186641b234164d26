"""Shard hosts: long-lived processes on the executors' machines that keep the slices in memory.

Spark's Python workers come and go (idle ones exit after a minute, a failed task
ends its worker, a stage's task may land on any executor), so the slices do not
live in them.  A *shard host* is a process of its own, started by the first task
that needs one on its executor (:func:`connect`), detached from the worker, and
reached over a socket (``wire.py``: a handshake that proves the run's key, a
MAC on every frame, and messages that hold data only, never pickles).  It holds any number of slices
(:class:`SliceTable`); the driver remembers which host holds which slice and
sends the next batch's request there, from whatever executor the task runs on,
so a slice stays where it was built.

A host applies batch ``v`` of a slice only on top of ``v - 1``, answers a
repeated ``v`` with the stored outputs (a retried task), and otherwise rebuilds
the slice: its newest snapshot (``ivm.processor.state.snapshots``, at the pipeline's
snapshot location, a folder or URL every node reads) plus a replay of the
committed inputs after it (``ivm.processor.state.recovery.replay``), or the relation
topics' whole history when it has no snapshot.  Before applying ``v`` it
snapshots the committed ``v - 1`` every ``snapshot_every`` batches, in a forked
child, so the stream does not wait for the write.

A host lives and dies with its executor: it watches the executor's process (the
JVM its worker was started from, :func:`executor_process`) every
``WATCH_SECONDS`` and exits when it is gone, so a killed or removed executor
leaves no state Spark does not know about.  It also exits when the driver says so
(a clean stop), or when no request came for ``idle_seconds`` (a driver that
died): its folder is removed either way.

Security: the run's key reaches a host through its stdin (a pipe from the task
that starts it), never a file; its folder is this user's only (0700, files
0600); it listens on its executor's address (:func:`bind_address`), not on every
interface; and a peer without the key gets nothing decoded (``wire.py``).
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
import stat
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ivm.processor.config import PipelineConfig
from ivm.processor.pipeline import Record, RecordBatch
from ivm.processor.placement import wire
from ivm.processor.placement.routing import slice_count
from ivm.processor.placement.slices import Piece, Seal, Slice, SlicePipeline, SliceRequest, SliceResponse
from ivm.processor.state.relations import fingerprint
from ivm.processor.state.snapshots import BackgroundSnapshots, StateStore

log = logging.getLogger(__name__)

IDLE_SECONDS = 300.0  # a host no request reached for this long exits (its driver is gone)
START_TIMEOUT = 60.0
WATCH_SECONDS = 0.5  # how often a host looks whether its executor still runs


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

    from ivm.processor.state.snapshots import filesystem

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
            request = SliceRequest(
                index, seal.version, records, seal.before, seal.origin, quiet, seal.full, seal.clock_ms
            )
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
        from ivm.processor.state.recovery import read_range

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
        """Slice ``seal.index`` at batch ``version - 1``: its newest snapshot (or, for a pipeline that `ivm
        bootstrap` started, the pipeline's bootstrap snapshot cut to the slice; or empty, at the history's
        origin) plus the committed inputs after it."""
        from ivm.processor.state.recovery import adopt, replay

        pipeline = SlicePipeline(self.config, seal.index)
        snapshot = slice_store(self.spec, seal.index, self.fingerprint).load()
        if snapshot is None or snapshot.last_batch_id > seal.version - 1:
            snapshot = self._bootstrapped(pipeline, seal)
        if snapshot is not None and snapshot.last_batch_id <= seal.version - 1:
            # a query whose state `ivm reset QUERY` dropped is built again from the slice's relation contents
            # (the tuples routed here, which are the ones its shard needs: the routing did not change)
            adopt(pipeline, snapshot)
        else:
            pipeline.state.positions = dict(seal.origin)
            pipeline.state.origin = dict(seal.origin)
        replayed = replay(pipeline, self.config.kafka, seal.before)
        pipeline.settle()  # sliding windows: expire what the clock of the replayed batches made due
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

    def _bootstrapped(self, pipeline: SlicePipeline, seal: Seal) -> Any:
        """The state a slice without a snapshot of its own starts from when `ivm bootstrap` started the
        pipeline: the bulk-loaded tuples are in no topic, so a replay from the history's origin would miss
        them.  The bootstrap's snapshot (``ivm.processor.bootstrap``: the whole pipeline's state at batch 0, at the
        pipeline's snapshot location) cut to the slice (:func:`restrict`); ``None`` when the pipeline has no
        such snapshot of this history (its origin, the bootstrap's positions, is the seal's)."""
        if not seal.origin:
            return None
        state = StateStore(self.spec.snapshot_location).load()
        if state is None or not state.bootstrapped or state.last_batch_id > seal.version - 1:
            return None
        if {tp: o for tp, o in state.origin.items() if o} != {tp: o for tp, o in seal.origin.items() if o}:
            log.warning("slice %d: the bootstrap snapshot is of another history (its origin); not used", seal.index)
            return None
        restrict(state, pipeline)
        log.warning(
            "slice %d starts from the bootstrap snapshot of batch %d: %d tuples are its",
            seal.index, state.last_batch_id, sum(len(c) for c in state.relations.values()),
        )  # fmt: skip
        return state

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


def restrict(state: Any, pipeline: SlicePipeline) -> None:
    """Cut a whole pipeline's state (a ``PipelineState`` of the driver's placement) to slice
    ``pipeline.index``, in place: the relation contents keep the tuples routed to the slice (``routing.py``),
    the sliding windows the entries of those tuples, and the views go (``recovery.adopt`` builds each
    from the slice's contents, which are exactly what its shard needs).  O(tuples · slices per tuple)."""
    placement, index = pipeline.placement, pipeline.index
    kept: dict[str, set[Any]] = {}
    for relation, contents in state.relations.items():
        rows = list(contents)
        mine = {row for row, where in zip(rows, placement.slices_of_many(relation, rows), strict=True)
                if index in where}  # fmt: skip
        state.relations[relation] = {row: contents[row] for row in rows if row in mine}
        kept[relation] = mine
    if state.windows is not None:
        state.windows.restrict(lambda relation, row: row in kept.get(relation, ()))
    state.views = {}
    state.models = {}


# --- the host process ---------------------------------------------------------------------------------


def serve(folder: Path, handover: bytes) -> None:
    """The shard host's main loop: serve requests until told to stop, its executor ends, or idle (module
    docstring).  ``handover`` is what :func:`_start` wrote to the host's stdin: the pickled
    ``(spec, executor)`` (a pipe from the process that started it, never a file or a socket)."""
    spec, watched = pickle.loads(handover)
    table = SliceTable(spec)
    bind = bind_address()
    listener = wire.Listener((bind, 0), spec.authkey)
    address = (bind, listener.address[1])
    where = f"{address[0]}:{address[1]}"
    executor = executor_name()  # the host runs in its executor's folder (started from its worker)
    last = [time.monotonic()]
    stopping = threading.Event()

    def handle(sock: socket.socket) -> None:
        try:
            conn = listener.handshake(sock)
        except (OSError, EOFError) as err:  # WireError is an OSError: a peer without the key
            log.warning("refused a connection: %s", err)
            return
        with contextlib.closing(conn):
            stop_asked = False
            while not stopping.is_set():
                try:
                    message = conn.recv()
                except wire.WireError as err:
                    log.warning("closed a connection: %s", err)
                    return
                except (EOFError, OSError):
                    return
                last[0] = time.monotonic()
                try:
                    if type(message) is not tuple or len(message) != 2 or type(message[0]) is not str:
                        raise ValueError(f"a request is a (kind, body) pair, not a {type(message).__name__}")
                    kind, body = message
                    if kind == "stage":
                        table.stage(_checked(body, Piece, kind))
                        reply: Any = where
                    elif kind == "seal":
                        reply = []
                        for seal in _checked(body, Seal, kind):
                            try:
                                response = table.seal(seal)
                            except Exception as err:  # this slice's seal fails; the others' stand
                                log.exception("sealing batch %d of slice %d failed", seal.version, seal.index)
                                reply.append(err)
                                continue
                            response.host, response.pid, response.executor = where, os.getpid(), executor
                            reply.append(response)
                    elif kind == "drop":
                        table.drop(_checked(body, int, kind))
                        reply = "dropped"
                    elif kind == "status":
                        reply = {"host": where, "pid": os.getpid(), "executor": executor, "slices": table.status()}
                    elif kind == "stop":  # ``stopping`` is set once the reply is sent (below)
                        stop_asked = True
                        reply = "stopping"
                    else:
                        reply = ValueError(f"unknown request {kind!r}")
                except Exception as err:  # the task that asked fails with it; the host goes on
                    log.exception("request failed")
                    reply = err
                last[0] = time.monotonic()
                try:
                    conn.send(reply)
                except (OSError, TypeError) as err:
                    log.warning("could not answer: %s", err)
                    if not stop_asked:
                        return
                # A stop ends the host only after its answer is sent: the main thread's exit ends this daemon
                # thread, so setting ``stopping`` before the send let a busy machine close the connection with
                # the answer unsent (the asker saw EOFError).
                if stop_asked:
                    stopping.set()
                    _wake(address)
                    return

    def accept() -> None:
        while not stopping.is_set():
            try:
                sock = listener.accept()
            except OSError:  # the listener closed
                if stopping.is_set():
                    return
                continue
            if stopping.is_set():
                sock.close()
                return
            threading.Thread(target=handle, args=(sock,), daemon=True).start()

    threading.Thread(target=accept, daemon=True, name="accept").start()
    _private_write(folder / "host.txt", f"{address[0]}\n{address[1]}\n{os.getpid()}\n")
    log.warning(
        "shard host %s:%d (pid %d) serving run %s, for executor process %d",
        address[0], address[1], os.getpid(), spec.run, watched[0],
    )  # fmt: skip
    while not stopping.wait(WATCH_SECONDS):
        if not process_alive(*watched):
            log.warning("executor process %d ended: this host ends with it", watched[0])
            break
        if time.monotonic() - last[0] > spec.idle_seconds:
            log.warning("no request for %.0fs: the driver is gone; exiting", spec.idle_seconds)
            break
    stopping.set()
    table.close()
    listener.close()
    shutil.rmtree(folder, ignore_errors=True)
    with contextlib.suppress(OSError):
        folder.parent.rmdir()  # the last host of the machine leaves no folder behind


def _checked(body: Any, kind: type, request: str) -> list[Any]:
    """``body`` if it is a list of ``kind`` (a request's body); ``ValueError`` otherwise."""
    if type(body) is not list or not all(type(item) is kind for item in body):
        raise ValueError(f"a {request} request's body is a list of {kind.__name__}")
    return body


def _wake(address: tuple[str, int]) -> None:
    """Unblock the accepting thread (it is waiting in ``accept``): a bare connection, closed at once."""
    with contextlib.suppress(OSError), socket.create_connection(address, timeout=2.0):
        pass


def _private_write(path: Path, text: str) -> None:
    """Write ``path`` readable by this user only (0600), atomically (a temporary file renamed)."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    os.replace(tmp, path)


# --- the executor a host belongs to ---------------------------------------------------------------------


def _stat(pid: int) -> tuple[str, str, int, int] | None:
    """``(command, state, parent pid, start time in clock ticks)`` of process ``pid`` (``/proc``, Linux)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    command = text[text.index("(") + 1 : text.rindex(")")]
    fields = text[text.rindex(")") + 2 :].split()
    return command, fields[0], int(fields[1]), int(fields[19])


def executor_process() -> tuple[int, int | None]:
    """This worker's executor: the nearest ancestor process that is a JVM (an executor's, or in local mode
    the driver's: Spark starts the Python workers from it), as ``(pid, start time)``; the start time tells
    a reused pid apart.  Without a JVM among the ancestors (a test, or no ``/proc``): this process."""
    pid = os.getpid()
    for _ in range(32):
        found = _stat(pid)
        if found is None:
            break
        command, _state, parent, started = found
        if command == "java":
            return pid, started
        if parent <= 1:
            break
        pid = parent
    me = _stat(os.getpid())
    return os.getpid(), me[3] if me else None


def process_alive(pid: int, started: int | None) -> bool:
    """Whether process ``pid`` (started at ``started`` clock ticks, if known) still runs; a zombie (killed,
    not reaped yet) does not."""
    found = _stat(pid)
    if found is not None:
        return found[1] != "Z" and (started is None or found[3] == started)
    if Path("/proc/self/stat").exists():  # Linux: no such process
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def bind_address() -> str:
    """The address a host listens on: its executor's (never every interface).  ``SPARK_LOCAL_IP`` when set
    (Spark binds its own services there); else the ``--hostname`` of the executor JVM's command line (a
    cluster's executor); else the loopback address (local mode: the driver is on this machine)."""
    local = os.environ.get("SPARK_LOCAL_IP")
    if local:
        return local
    pid, _ = executor_process()
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        args = []
    if b"--hostname" in args[:-1]:
        name = args[args.index(b"--hostname") + 1].decode()
        with contextlib.suppress(OSError):
            return socket.gethostbyname(name)
        return name
    return "127.0.0.1"


# --- reaching a host from a task ----------------------------------------------------------------------


def hosts_root() -> Path:
    """The machine's folder of shard hosts (one subfolder per host), this user's only (0700)."""
    return Path(tempfile.gettempdir()) / "ivm-hosts"


def private_folder(path: Path) -> Path:
    """``path`` created if needed as a folder only this user can enter (0700); an existing one of another
    user, or a link, is refused by name (a host's files are no one else's to read or to plant)."""
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700, parents=False)
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise PermissionError(f"{path} is not a folder of this user (uid {os.getuid()}): remove it or set TMPDIR")
    if stat.S_IMODE(info.st_mode) != 0o700:
        os.chmod(path, 0o700)
    return path


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


_CONNECTIONS: dict[tuple[str, int], wire.Channel] = {}


def connect(spec: HostSpec, owner: tuple[str, int] | None = None) -> tuple[wire.Channel, tuple[str, int]]:
    """A connection to the host that holds the slice (``owner``, if it answers), else to this executor's
    own host, started now if it is not running.  Connections are kept for the worker's next tasks."""
    if owner is not None:
        try:
            return _open(owner, spec.authkey), owner
        except (OSError, EOFError) as err:
            log.warning("shard host %s:%d does not answer (%s): this executor's host takes the slice", *owner, err)
    folder = host_folder(spec)
    private_folder(folder.parent)
    private_folder(folder)
    fd = os.open(folder / "lock", os.O_WRONLY | os.O_CREAT, 0o600)
    with os.fdopen(fd, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        address = _running(folder)
        if address is not None:
            with contextlib.suppress(OSError, EOFError):
                return _open(address, spec.authkey), address
        return _start(spec, folder)


def _open(address: tuple[str, int], authkey: bytes) -> wire.Channel:
    conn = _CONNECTIONS.get(address)
    if conn is not None and not conn.closed:
        return conn
    conn = wire.connect(address, authkey)
    _CONNECTIONS[address] = conn
    return conn


def forget(address: tuple[str, int]) -> None:
    """Drop a kept connection (it failed)."""
    conn = _CONNECTIONS.pop(address, None)
    if conn is not None:
        conn.close()


def _running(folder: Path) -> tuple[str, int] | None:
    try:
        host, port, _pid = (folder / "host.txt").read_text().split()
    except (OSError, ValueError):
        return None
    return host, int(port)


#: the hosts this process started: their handles, so that one that died is seen (and reaped)
_STARTED: list[subprocess.Popen] = []


def _start(spec: HostSpec, folder: Path, timeout: float = START_TIMEOUT) -> tuple[wire.Channel, tuple[str, int]]:
    """Start this executor's shard host, detached from the worker, and connect to it.  The spec (with the
    run's key) and the executor process to watch go through the host's stdin, never a file.  A host that
    exits before it serves fails the start at once, with its exit status and the end of its log."""
    (folder / "host.txt").unlink(missing_ok=True)
    handover = pickle.dumps((spec, executor_process()))
    fd = os.open(folder / "host.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with os.fdopen(fd, "ab") as out:
        child = subprocess.Popen(
            [sys.executable, "-m", "ivm.processor.placement.host", str(folder)],
            stdin=subprocess.PIPE, stdout=out, stderr=out, start_new_session=True, close_fds=True,
        )  # fmt: skip
    _STARTED[:] = [p for p in _STARTED if p.poll() is None]
    _STARTED.append(child)
    assert child.stdin is not None
    with contextlib.suppress(BrokenPipeError):  # a host that died at once: its exit status says why
        child.stdin.write(handover)
        child.stdin.close()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        address = _running(folder)
        if address is not None:
            return _open(address, spec.authkey), address
        code = child.poll()
        if code is not None:
            raise RuntimeError(
                f"the shard host in {folder} exited with status {code} before it served:\n{_tail(folder / 'host.log')}"
            )
        time.sleep(0.02)
    child.kill()
    raise TimeoutError(f"the shard host in {folder} did not start within {timeout:.0f}s (see host.log)")


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


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
    with wire.connect(address, authkey, timeout=timeout or wire.HANDSHAKE_TIMEOUT) as conn:
        conn.send((kind, body))
        if timeout is not None and not conn.poll(timeout):
            raise TimeoutError(f"shard host {address[0]}:{address[1]} did not answer {kind} in {timeout:.0f}s")
        return conn.recv()


def tell(address: tuple[str, int], authkey: bytes, kind: str, timeout: float = 5.0) -> Any:
    """Send a ``status`` or ``stop`` request to the host at ``address`` (from the driver)."""
    return request(address, authkey, kind, None, timeout)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    serve(Path(sys.argv[1]), sys.stdin.buffer.read())
