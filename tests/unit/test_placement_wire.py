"""The shard hosts' wire format (``ivm.processor.placement.wire``) and the host's guards, with real host processes.

- every message of the executors' placement survives the encoding: the in-process placement of
  test_placement.py with each piece, seal and response sent through ``encode``/``decode`` publishes
  exactly what the driver's placement publishes, for every engine's sample query;
- nothing that arrives on a host's socket runs code: a pickle that would create a file, sent before the
  handshake, after it in a frame with a valid MAC, or as a frame with a wrong MAC, is refused (the
  file is never created) and the host goes on serving; a client with a wrong key is refused;
- the run's key is in no file; the hosts' folders are 0700 and their files 0600; a host listens on its
  executor's address, not on every interface.
"""

from __future__ import annotations

import json
import os
import pickle
import random
import socket
import stat
import subprocess
import sys
import threading
import time
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

import ivm
from ivm.processor.codecs.avro import RelationCodec
from ivm.processor.config import PipelineConfig, QueryConfig, RelationConfig
from ivm.processor.pipeline import Pipeline, Record, RecordBatch
from ivm.processor.placement import host, wire
from ivm.processor.placement.host import HostSpec
from ivm.processor.placement.slices import Piece, Seal, SliceResponse
from ivm.rings import exact
from ivm.rings.covariance import Covariance
from ivm.rings.matrix import Matrix
from tests.unit.test_engine_protocol import CASES, random_stream
from tests.unit.test_pipeline import MemorySink
from tests.unit.test_placement import InProcess, _outputs, _schema_file

KEY = b"0123456789abcdef"
SCHEMA = Path("relations/R.avsc").resolve()


def _roundtrip(value: object) -> object:
    return wire.decode(wire.encode(value))


class WiredTable:
    """A ``SliceTable`` reached through the wire encoding: what a host and the driver exchange."""

    def __init__(self, table: host.SliceTable) -> None:
        self.table = table

    def stage(self, pieces: list[Piece]) -> None:
        self.table.stage(_roundtrip(pieces))  # type: ignore[arg-type]

    def seal(self, seal: Seal) -> SliceResponse:
        response = self.table.seal(_roundtrip(seal))  # type: ignore[arg-type]
        again = _roundtrip(response)
        assert again == response
        return again  # type: ignore[return-value]


@pytest.mark.parametrize(("engine", "text"), CASES)
def test_every_engine_publishes_the_same_through_the_wire(engine: str, text: str, tmp_path: Path) -> None:
    query = ivm.parse(text)
    arity = dict(query.relations)
    relations = tuple(RelationConfig(r, r, _schema_file(tmp_path, r, arity[r])) for r in sorted(arity))
    config = PipelineConfig(relations=relations, queries=(QueryConfig("q", text, engine, shards=4),), snapshot_every=0)
    codecs = {r: RelationCodec.from_schema(json.loads((tmp_path / f"{r}.avsc").read_text())) for r in arity}
    driver_sink = MemorySink()
    driver = Pipeline(config, driver_sink)
    placed = InProcess(config)
    placed.table = WiredTable(placed.table)  # type: ignore[assignment]
    stream = random_stream(query, random.Random(4), 200, domain=7)
    offsets: dict[str, int] = {}
    for start in range(0, len(stream), 25):
        records = []
        for relation, row, mult in stream[start : start + 25]:
            offsets[relation] = offsets.get(relation, -1) + 1
            records.append(Record(relation, 0, offsets[relation], *codecs[relation].encode(row, mult)))
        report = driver.process(records)
        placed.process(records)
        assert placed.pipeline.views["q"].result() == report.results["q"]
    assert _outputs(placed.sink) == _outputs(driver_sink)


def test_values_keep_their_types_and_contents() -> None:
    batch = RecordBatch(["a", "b", "a"], [0, 1, 0], [5, 9, 6], [b"k", None, b""], [b"\x00v", b"w", None], [1, 2, 3])
    value = {
        ("x", 1): [None, True, False, 2**70, -(2**63), 1.5, "é", b"\x00"],
        "set": {1, 2}, "frozen": frozenset({(1, "a")}), "tuple": (1, (2, 3)),
        "fraction": Fraction(-7, 3), "decimal": Decimal("1.10"), "dyadic": exact.Dyadic(3, -1),
        "array": np.arange(6, dtype=np.float32).reshape(2, 3), "scalar": np.int64(7),
        "matrix": Matrix(np.eye(2)), "covariance": Covariance(3, np.ones(2), np.eye(2), (0, 1)),
        "record": Record("t", 0, 1, None, b"v", 3), "batch": batch,
        "piece": Piece(1, 2, ("t", 0), batch, {5}),
    }  # fmt: skip
    again = _roundtrip(value)
    assert again.keys() == value.keys()  # type: ignore[union-attr]
    for k, v in value.items():
        got = again[k]  # type: ignore[index]
        assert type(got) is type(v), k
        if isinstance(v, np.ndarray):
            assert got.dtype == v.dtype and np.array_equal(got, v)
        elif isinstance(v, Matrix):
            assert np.array_equal(got.array, v.array)
        elif isinstance(v, Covariance):
            assert got.c == v.c and got.idx == v.idx and np.array_equal(got.Q, v.Q) and np.array_equal(got.s, v.s)
        else:
            assert got == v, k
    assert again["batch"].topic[0] is again["batch"].topic[2]  # type: ignore[index]  # one str per topic
    # group-by parts go in columns when their keys are int tuples (or ints): same keys, values, types
    groups = {
        "ints": {(i, -i): i * 2**40 for i in range(40)}, "floats": {i: i / 3 for i in range(40)},
        "gone": {(i,): None if i % 2 else i for i in range(40)}, "bools": {(True, i): 1 for i in range(40)},
        "wide": {(2**70, i): 1 for i in range(40)}, "mixed": {(i,): 1 if i % 2 else 1.5 for i in range(40)},
    }  # fmt: skip
    for name, part in groups.items():
        again = _roundtrip(part)
        assert again == part, name
        assert [type(x) for k, v in again.items() for x in (*(k if isinstance(k, tuple) else (k,)), v)] == [
            type(x) for k, v in part.items() for x in (*(k if isinstance(k, tuple) else (k,)), v)
        ], name
    assert wire.encode(groups["ints"])[:1] == b"D" and wire.encode(groups["bools"])[:1] == b"d"
    error = _roundtrip(KeyError("slice 3"))
    assert isinstance(error, wire.RemoteError) and error.kind == "KeyError" and "slice 3" in str(error)


class Evil:
    """A pickle of this creates ``path`` when it is loaded: what a crafted message would do."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple:
        return (Path.touch, (self.path,))


def test_a_pickle_is_not_a_message(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    crafted = pickle.dumps(("stage", Evil(marker)))
    pickle.loads(pickle.dumps(Evil(tmp_path / "control")))  # the payload does run code when unpickled
    assert (tmp_path / "control").exists()
    with pytest.raises(wire.WireError, match="not a valid message"):
        wire.decode(crafted)
    assert not marker.exists()
    with pytest.raises(TypeError, match="cannot hold"):
        wire.encode(Evil(marker))
    forged = b"o" + wire.encode("os.system") + wire.encode("touch x")
    with pytest.raises(wire.WireError, match="not a class"):
        wire.decode(forged)
    with pytest.raises(wire.WireError, match="dtype"):
        wire.decode(b"a\x03|O8\x01" + (1).to_bytes(8, "big") + (8).to_bytes(8, "big") + b"\x00" * 8)


# --- a real host process ---------------------------------------------------------------------------------


def _spec(tmp_path: Path, idle: float = 120.0) -> HostSpec:
    config = PipelineConfig(
        name="wiretest",
        relations=(RelationConfig("E", "E", SCHEMA),),
        queries=(QueryConfig("q", "Q() :- E(a,b), E(b,c)"),),
    )
    return HostSpec(config, "run1", KEY, str(tmp_path / "snapshots"), idle)


@pytest.fixture
def running(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A shard host started as a task starts one (``host.connect``), its folder under ``tmp_path``."""
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setenv("SPARK_LOCAL_IP", "127.0.0.1")
    spec = _spec(tmp_path)
    _conn, address = host.connect(spec)
    folder = host.host_folder(spec)
    pid = int((folder / "host.txt").read_text().split()[2])
    yield spec, address, folder, pid
    try:
        host.tell(address, KEY, "stop")
    finally:
        host.forget(address)
    _wait_gone(pid, 10)


def _wait_gone(pid: int, seconds: float) -> float:
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        if not host.process_alive(pid, None):
            return time.monotonic() - started
        time.sleep(0.05)
    raise AssertionError(f"process {pid} still runs after {seconds}s")


def test_a_wrong_key_and_crafted_frames_are_refused(running, tmp_path: Path) -> None:
    _, address, folder, pid = running
    marker = tmp_path / "ran"
    crafted = pickle.dumps(("status", Evil(marker)))
    # 1. a wrong key: refused in the handshake
    with pytest.raises(wire.WireError, match="refused the handshake: a wrong key"):
        host.tell(address, b"not the run's key", "status")
    # 2. a pickle sent instead of the handshake (what a multiprocessing.connection client would send)
    with socket.create_connection(address, timeout=10) as sock:
        assert sock.recv(64).startswith(wire.HELLO)
        sock.sendall(crafted + b"\x00" * 64)
        try:
            answer = sock.recv(64)
        except ConnectionResetError:  # closed with the rest of the pickle unread
            answer = b""
        assert answer == b"", "the host closes a connection that fails the handshake"
    # 3. the pickle in a frame with a valid MAC (a peer that holds the key but sends a pickle)
    conn = wire.connect(address, KEY)
    tag = wire._mac(conn._session, b"c", (0).to_bytes(8, "big"), crafted)
    conn._sock.sendall(len(crafted).to_bytes(8, "big") + tag + crafted)
    with pytest.raises(EOFError):
        conn.recv()
    conn.close()
    # 4. a frame whose MAC does not match (injected into an authenticated connection)
    conn = wire.connect(address, KEY)
    payload = wire.encode(("stop", None))
    conn._sock.sendall(len(payload).to_bytes(8, "big") + b"\x00" * 32 + payload)
    with pytest.raises(EOFError):
        conn.recv()
    conn.close()
    # 5. a replayed frame: the first request of another connection, sent again as the second
    conn = wire.connect(address, KEY)
    first = wire.encode(("status", None))
    frame = len(first).to_bytes(8, "big") + wire._mac(conn._session, b"c", (0).to_bytes(8, "big"), first) + first
    conn._sock.sendall(frame)
    assert conn.recv()["pid"] == pid
    conn._sock.sendall(frame)
    with pytest.raises(EOFError):
        conn.recv()
    conn.close()
    assert not marker.exists(), "nothing that arrived ran"
    status = host.tell(address, KEY, "status")
    assert status["pid"] == pid and status["slices"] == []
    log = (folder / "host.log").read_text()
    assert log.count("refused a connection") >= 1 and log.count("closed a connection") >= 3


def test_no_file_holds_the_key_and_modes_are_private(running) -> None:
    _, address, folder, pid = running
    root = folder.parent
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    files = sorted(p.name for p in folder.iterdir())
    assert "host.txt" in files and "host.log" in files and not any(name.endswith(".pickle") for name in files)
    for path in folder.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
        assert KEY not in path.read_bytes(), path
    # the listening socket is bound to the executor's address (SPARK_LOCAL_IP here), not 0.0.0.0
    assert address[0] == "127.0.0.1"
    listening = _listening(pid)
    assert (address[0], address[1]) in listening and ("0.0.0.0", address[1]) not in listening


def _listening(pid: int) -> set[tuple[str, int]]:
    """The (address, port) pairs process ``pid``'s IPv4 sockets listen on (``/proc/<pid>/net/tcp``)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        target = os.readlink(fd)
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    out = set()
    for line in Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, state, inode = fields[1], fields[3], fields[9]
        if state == "0A" and inode in inodes:  # LISTEN
            hex_ip, hex_port = local.split(":")
            ip = socket.inet_ntoa(int(hex_ip, 16).to_bytes(4, "little"))
            out.add((ip, int(hex_port, 16)))
    return out


def test_a_folder_of_another_kind_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir()
    (tmp_path / "link").symlink_to(target)
    with pytest.raises(PermissionError, match="not a folder of this user"):
        host.private_folder(tmp_path / "link")
    loose = tmp_path / "loose"
    loose.mkdir(mode=0o755)
    os.chmod(loose, 0o755)
    host.private_folder(loose)
    assert stat.S_IMODE(loose.stat().st_mode) == 0o700


def test_a_host_that_dies_before_serving_fails_the_start_at_once(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    monkeypatch.setenv("SPARK_LOCAL_IP", "203.0.113.250")  # not an address of this machine: the bind fails
    spec = _spec(tmp_path)
    started = time.monotonic()
    with pytest.raises(RuntimeError, match=r"exited with status 1 before it served:(.|\n)*Cannot assign"):
        host.connect(spec)
    assert time.monotonic() - started < 20, "not the 60 s start timeout"


_EXECUTOR = """
import sys, time
from pathlib import Path
from ivm.processor.codecs.avro import RelationCodec
from ivm.processor.config import PipelineConfig, QueryConfig, RelationConfig
from ivm.processor.placement import host
relations = (RelationConfig("E", "E", Path(sys.argv[2])),)
config = PipelineConfig(name="wiretest", relations=relations, queries=(QueryConfig("q", "Q() :- E(a,b)"),))
spec = host.HostSpec(config, "run2", b"0123456789abcdef", sys.argv[1] + "/snapshots", 600.0)
host.connect(spec)
print(host.host_folder(spec), flush=True)
time.sleep(600)
"""


def test_a_host_ends_when_its_executor_is_killed(tmp_path: Path) -> None:
    """The process that started the host plays the executor (there is no JVM among its ancestors): kill -9
    it and its host exits within seconds, removing its folder, though no one told it to stop."""
    env = {**os.environ, "TMPDIR": str(tmp_path), "SPARK_LOCAL_IP": "127.0.0.1"}
    executor = subprocess.Popen(
        [sys.executable, "-c", _EXECUTOR, str(tmp_path), str(SCHEMA)], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert executor.stdout is not None
        folder = Path(executor.stdout.readline().strip())
        pid = int((folder / "host.txt").read_text().split()[2])
        assert host.process_alive(pid, None)
        executor.kill()
        executor.wait(10)
        took = _wait_gone(pid, 10)
        assert took < 5, f"the orphaned host took {took:.1f}s to exit"
        for _ in range(50):  # its last act is removing its folder
            if not folder.exists():
                break
            time.sleep(0.05)
        assert not folder.exists()
    finally:
        executor.kill()
        executor.wait(10)


def test_a_stop_is_answered_before_the_host_ends(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The host sends its answer to ``stop`` before it ends.  Its process exits when ``serve`` returns, taking
    the answering thread with it: a host that ended first closed the connection with the answer unsent, and
    the asker saw EOFError (the ``running`` fixture's teardown under two pytest-xdist workers).  Here the host
    serves in a thread of this process and its answer to ``stop`` is held back for two seconds, as a busy
    machine may: ``serve`` must not return before that answer has gone out."""
    monkeypatch.setenv("SPARK_LOCAL_IP", "127.0.0.1")
    spec = _spec(tmp_path)
    folder = host.private_folder(tmp_path / "host")
    events: list[str] = []
    send = wire.Channel.send

    def late_send(self: wire.Channel, message: object) -> None:
        if message == "stopping":
            time.sleep(2.0)
        send(self, message)
        if message == "stopping":
            events.append("answered")

    monkeypatch.setattr(wire.Channel, "send", late_send)

    def serve() -> None:
        host.serve(folder, pickle.dumps((spec, host.executor_process())))
        events.append("ended")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while (address := host._running(folder)) is None:
        assert thread.is_alive() and time.monotonic() < deadline, "the host did not start serving"
        time.sleep(0.02)
    assert host.tell(address, KEY, "stop", timeout=30) == "stopping"
    thread.join(60)
    assert not thread.is_alive()
    assert events == ["answered", "ended"]
