"""The shard hosts' wire format: mutually authenticated connections, a MAC on every frame, data-only messages.

A host serves anyone who can reach its port, so nothing that arrives on its socket may run code: the
messages are not pickles (``pickle.loads`` of a crafted message runs any callable it names).  Instead:

**Handshake** (before anything is decoded): the server sends a 16-byte random nonce ``ns``; the client
answers with its nonce ``nc`` and ``HMAC-SHA256(key, "client" | ns | nc)``; the server checks it (a constant
time compare) and closes the connection on a mismatch, else answers ``HMAC(key, "server" | nc | ns)``, which
the client checks.  Both derive the session key ``HMAC(key, "session" | ns | nc)``.  ``key`` is the run's
16 random bytes (``HostSpec.authkey``), which only the driver, its tasks and its hosts hold.

**Frames**: ``length (8 bytes) | tag (32 bytes) | payload``, ``tag = HMAC-SHA256(session, direction |
sequence number | payload)``.  A frame whose tag does not match (altered, injected, replayed from another
connection or out of order) closes the connection with :class:`WireError` before its payload is decoded.

**Payload**: a tagged binary encoding of data only (:func:`encode`, :func:`decode`): ``None``, bools,
ints, floats, str, bytes, lists, tuples, dicts, sets, frozensets, :class:`~fractions.Fraction`,
:class:`~decimal.Decimal`, numpy arrays and scalars of numeric dtypes (raw buffers), the engines' ring
values, and the placement's own message classes, listed by name in :data:`CLASSES`.  Decoding builds
only those classes (from their fields, never through a callable named by the message), so a message
can at worst be refused: :class:`WireError` names what was wrong.  A :class:`~ivm.processor.pipeline.RecordBatch`
travels in columns (numpy buffers for the int columns, one buffer plus lengths for keys and values).
An exception travels as its type's name and message and arrives as :class:`RemoteError`.

Guarantees: a peer without the key gets no byte decoded and no request served; a message cannot make
its receiver execute code; a frame is accepted at most once and in order.  Cost: two HMACs and one
copy of each frame; encoding is O(size) with numpy doing the record columns.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import hmac
import os
import select
import socket
import struct
import threading
from collections.abc import Callable
from decimal import Decimal
from fractions import Fraction
from typing import Any

import numpy as np

NONCE = 16
TAG = 32
HELLO = b"IVMH1"  # the protocol's name and version, sent with the server's nonce
MAX_FRAME = 1 << 34  # 16 GiB: a length beyond it is a corrupt frame, not a message
HANDSHAKE_TIMEOUT = 30.0

_LEN = struct.Struct(">Q")
_SEQ = struct.Struct(">Q")
_I64 = struct.Struct("<q")
_F64 = struct.Struct("<d")
_U32 = struct.Struct("<I")
_NUMERIC_KINDS = frozenset("biufc")  # numpy dtypes a message may carry (no object, void or structured ones)


class WireError(ConnectionError):
    """A peer failed the handshake, a frame failed its MAC, or a payload is not a valid message."""


class RemoteError(RuntimeError):
    """An exception raised by the peer: its type's name and message."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message


# --- authenticated channel ---------------------------------------------------------------------------------


def _mac(key: bytes, *parts: bytes) -> bytes:
    mac = hmac.new(key, digestmod=hashlib.sha256)
    for part in parts:  # no copy of a large payload
        mac.update(part)
    return mac.digest()


class Channel:
    """One authenticated connection (after :func:`connect` or :meth:`Listener.accept`): ``send``/``recv``
    whole messages; ``poll`` waits for one.  Not thread safe: one user at a time."""

    def __init__(self, sock: socket.socket, session: bytes, client: bool) -> None:
        self._sock = sock
        self._session = session
        self._out = b"c" if client else b"s"
        self._in = b"s" if client else b"c"
        self._sent = 0
        self._received = 0
        self.closed = False

    def send(self, message: Any) -> None:
        payload = encode(message)
        tag = _mac(self._session, self._out, _SEQ.pack(self._sent), payload)
        self._sent += 1
        self._sock.sendall(_LEN.pack(len(payload)) + tag)
        self._sock.sendall(payload)

    def recv(self) -> Any:
        head = _read(self._sock, _LEN.size + TAG)
        (length,) = _LEN.unpack_from(head)
        if length > MAX_FRAME:
            self.close()
            raise WireError(f"a frame of {length} bytes: not a message of this protocol")
        payload = _read(self._sock, length)
        expected = _mac(self._session, self._in, _SEQ.pack(self._received), payload)
        if not hmac.compare_digest(expected, head[_LEN.size :]):
            self.close()
            raise WireError("a frame failed its MAC (altered, injected or replayed): connection closed")
        self._received += 1
        return decode(payload)

    def poll(self, timeout: float | None) -> bool:
        """Whether a frame can be read within ``timeout`` seconds."""
        ready, _, _ = select.select([self._sock], [], [], timeout)
        return bool(ready)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            with contextlib.suppress(OSError):
                self._sock.close()

    def __enter__(self) -> Channel:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def _read(sock: socket.socket, n: int) -> bytes:
    """Exactly ``n`` bytes, ``EOFError`` when the peer closed first."""
    buffer = bytearray(n)
    view = memoryview(buffer)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], min(n - got, 1 << 24))
        if k == 0:
            raise EOFError("the peer closed the connection")
        got += k
    return bytes(buffer)


def connect(address: tuple[str, int], key: bytes, timeout: float = HANDSHAKE_TIMEOUT) -> Channel:
    """A client channel to ``address``, after the mutual handshake (module docstring)."""
    sock = socket.create_connection(address, timeout=timeout)
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        hello = _read(sock, len(HELLO) + NONCE)
        if hello[: len(HELLO)] != HELLO:
            raise WireError(f"{address[0]}:{address[1]} is not a shard host of this protocol")
        ns, nc = hello[len(HELLO) :], os.urandom(NONCE)
        sock.sendall(nc + _mac(key, b"client", ns, nc))
        try:
            proof = _read(sock, TAG)
        except EOFError:
            raise WireError(f"{address[0]}:{address[1]} refused the handshake: a wrong key") from None
        if not hmac.compare_digest(proof, _mac(key, b"server", nc, ns)):
            raise WireError(f"{address[0]}:{address[1]} does not hold the run's key")
        sock.settimeout(None)
        return Channel(sock, _mac(key, b"session", ns, nc), client=True)
    except BaseException:
        sock.close()
        raise


class Listener:
    """A listening socket on ``address``; :meth:`accept` returns a connected socket and :meth:`handshake`
    (to be called on the connection's own thread) authenticates it."""

    def __init__(self, address: tuple[str, int], key: bytes) -> None:
        self._key = key
        self._sock = socket.create_server(address, backlog=64)
        self.address: tuple[str, int] = self._sock.getsockname()[:2]

    def accept(self) -> socket.socket:
        conn, _peer = self._sock.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn

    def handshake(self, sock: socket.socket, timeout: float = HANDSHAKE_TIMEOUT) -> Channel:
        """The server's side of the handshake: a channel, or :class:`WireError` (the socket is closed)."""
        try:
            sock.settimeout(timeout)
            ns = os.urandom(NONCE)
            sock.sendall(HELLO + ns)
            answer = _read(sock, NONCE + TAG)
            nc = answer[:NONCE]
            if not hmac.compare_digest(answer[NONCE:], _mac(self._key, b"client", ns, nc)):
                raise WireError("a client failed the handshake (it does not hold the run's key)")
            sock.sendall(_mac(self._key, b"server", nc, ns))
            sock.settimeout(None)
            return Channel(sock, _mac(self._key, b"session", ns, nc), client=False)
        except BaseException:
            sock.close()
            raise

    def close(self) -> None:
        self._sock.close()


# --- data-only encoding ------------------------------------------------------------------------------------

#: the classes a message may hold, by name: name -> (class, its fields).  Filled by :func:`_register`.
CLASSES: dict[str, tuple[type, tuple[str, ...]]] = {}
_NAMES: dict[type, str] = {}


def _register(cls: type, fields: tuple[str, ...] | None = None) -> None:
    if fields is None:
        if dataclasses.is_dataclass(cls):
            fields = tuple(f.name for f in dataclasses.fields(cls))
        elif hasattr(cls, "_fields"):  # a NamedTuple
            fields = tuple(cls._fields)  # type: ignore[attr-defined]
        else:
            fields = tuple(cls.__slots__)  # type: ignore[attr-defined]
    name = f"{cls.__module__}.{cls.__qualname__}"
    CLASSES[name] = (cls, fields)
    _NAMES[cls] = name


_RecordBatch: type = type(None)  # set by _registry (imported late: this module is imported by the pipeline's)
_DYADICS: tuple[type, ...] = ()
_READY = threading.Event()
_REGISTERING = threading.Lock()


def _registry() -> None:
    """The classes of the placement's messages and of the engines' result values."""
    if not _READY.is_set():
        with _REGISTERING:
            if not _READY.is_set():
                _fill()
                _READY.set()


def _fill() -> None:
    global _RecordBatch, _DYADICS
    from ivm.processor.pipeline import RecordBatch
    from ivm.rings import exact

    _RecordBatch, _DYADICS = RecordBatch, (exact.PyDyadic, exact.Dyadic)
    from ivm.processor.pipeline import PackedUpdate, Record
    from ivm.processor.placement.slices import Piece, Seal, SliceResponse
    from ivm.rings.base import Pair
    from ivm.rings.covariance import Covariance
    from ivm.rings.generalized_covariance import GeneralizedCovariance
    from ivm.rings.matrix import Matrix
    from ivm.rings.relational import Relation

    messages = (Piece, Seal, SliceResponse, Record, PackedUpdate)
    for cls in (*messages, Pair, Covariance, GeneralizedCovariance, Matrix, Relation):
        _register(cls)


def encode(message: Any) -> bytes:
    """``message`` as bytes (module docstring); ``TypeError`` names a value of a type no message holds."""
    _registry()
    out: list[bytes] = []
    _encode(message, out.append)
    return b"".join(out)


def decode(data: bytes) -> Any:
    """The message ``data`` encodes; :class:`WireError` if it is not a valid one (nothing else is run)."""
    _registry()
    reader = _Reader(data)
    try:
        value = reader.value(0)
    except WireError:
        raise
    except (struct.error, IndexError, ValueError, TypeError, UnicodeDecodeError, OverflowError) as err:
        raise WireError(f"not a valid message: {type(err).__name__}: {err}") from None
    if reader.at != len(data):
        raise WireError(f"not a valid message: {len(data) - reader.at} bytes after its end")
    return value


def _encode(value: Any, put: Callable[[bytes], Any]) -> None:
    kind = type(value)
    if value is None:
        put(b"N")
    elif kind is bool:
        put(b"T" if value else b"F")
    elif kind is int:
        if -(1 << 63) <= value < (1 << 63):
            put(b"i" + _I64.pack(value))
        else:
            raw = value.to_bytes((value.bit_length() + 8) // 8, "little", signed=True)
            put(b"J" + _U32.pack(len(raw)) + raw)
    elif kind is float:
        put(b"f" + _F64.pack(value))
    elif kind is str:
        raw = value.encode("utf-8", "surrogatepass")
        put(b"s" + _U32.pack(len(raw)) + raw)
    elif kind is bytes:
        put(b"b" + _U32.pack(len(value)) + value)
    elif kind is list or kind is tuple or kind is set or kind is frozenset:
        put({list: b"l", tuple: b"t", set: b"e", frozenset: b"z"}[kind] + _U32.pack(len(value)))
        for item in value:
            _encode(item, put)
    elif kind is dict:
        if len(value) >= _COLUMNAR and _encode_columns(value, put):
            return
        put(b"d" + _U32.pack(len(value)))
        for k, v in value.items():
            _encode(k, put)
            _encode(v, put)
    elif kind is _RecordBatch:
        _encode_batch(value, put)
    elif kind is np.ndarray:
        _encode_array(value, put)
    elif isinstance(value, np.generic) and value.dtype.kind in _NUMERIC_KINDS:
        put(b"g")
        _encode_array(np.asarray(value), put)
    elif kind is Fraction:
        put(b"q")
        _encode(value.numerator, put)
        _encode(value.denominator, put)
    elif kind is Decimal:
        put(b"m")
        _encode(str(value), put)
    elif isinstance(value, _DYADICS):
        put(b"y")
        _encode(int(value.m), put)
        _encode(int(value.e), put)
    elif kind in _NAMES:
        name = _NAMES[kind]
        put(b"o")
        _encode(name, put)
        for field in CLASSES[name][1]:
            _encode(getattr(value, field), put)
    elif isinstance(value, BaseException):
        put(b"x")
        _encode(type(value).__name__, put)
        _encode(str(value), put)
    elif isinstance(value, (int, float, str, bytes, tuple)):  # a subclass (an IntEnum, a NamedTuple): its base
        base = next(b for b in (int, float, str, bytes, tuple) if isinstance(value, b))
        _encode(base(value), put)
    else:
        raise TypeError(f"a shard host message cannot hold a {kind.__module__}.{kind.__qualname__}")


_COLUMNAR = 16  # a dict this large whose keys are ints or int tuples goes in columns


def _encode_columns(value: dict[Any, Any], put: Callable[[bytes], Any]) -> bool:
    """A group-by result (keys: tuples of ints of one length, or ints) as an int64 key array and its values
    (an int64 or float64 array when they are all ints or all floats, else a list); ``False`` (nothing
    written) for any other dict.  Decoding gives back the same types: only exact ``int``/``float`` pass."""
    keys = list(value)
    first = keys[0]
    if type(first) is tuple:
        width = len(first)
        if not width or not all(type(k) is tuple and len(k) == width for k in keys):
            return False
        if not all(type(x) is int for k in keys for x in k):
            return False
    elif type(first) is int:
        width = 0
        if not all(type(k) is int for k in keys):
            return False
    else:
        return False
    try:
        key_array = np.array(keys, dtype=np.int64)
    except OverflowError:
        return False
    values = list(value.values())
    put(b"D" + bytes([width]))
    _encode_array(key_array, put)
    if all(type(v) is int for v in values):
        try:
            _encode_array(np.array(values, dtype=np.int64), put)
            return True
        except OverflowError:
            pass
    if all(type(v) is float for v in values):
        _encode_array(np.array(values, dtype=np.float64), put)
    else:
        _encode(values, put)
    return True


def _encode_array(array: np.ndarray, put: Callable[[bytes], Any]) -> None:
    if array.dtype.kind not in _NUMERIC_KINDS:
        raise TypeError(f"a shard host message cannot hold a numpy array of dtype {array.dtype}")
    dtype = array.dtype.str.encode()
    raw = np.ascontiguousarray(array).tobytes()
    put(b"a" + bytes([len(dtype)]) + dtype + bytes([array.ndim]) + b"".join(_LEN.pack(n) for n in array.shape))
    put(_LEN.pack(len(raw)) + raw)


def _int_column(values: list[Any]) -> np.ndarray | None:
    """``values`` as int64 if every one is an int (else ``None``: the column goes as a list)."""
    if not values:
        return np.zeros(0, dtype=np.int64)
    try:
        array = np.array(values)
    except (ValueError, OverflowError):
        return None
    return array.astype(np.int64, copy=False) if array.dtype.kind in "iu" and array.dtype != np.uint64 else None


def _bytes_column(values: list[bytes | None]) -> tuple[np.ndarray, bytes] | None:
    """Lengths (-1 for ``None``) and the concatenated values, if every value is bytes or ``None``."""
    try:
        if None in values:
            lengths = np.fromiter((-1 if v is None else len(v) for v in values), dtype=np.int32, count=len(values))
            data = b"".join(v for v in values if v is not None)
        else:
            data = b"".join(values)  # type: ignore[arg-type]  # TypeError for a str or an int among them
            lengths = np.fromiter(map(len, values), dtype=np.int32, count=len(values))  # type: ignore[arg-type]
    except (TypeError, OverflowError):
        return None
    return lengths, data


def _encode_batch(batch: Any, put: Callable[[bytes], Any]) -> None:
    """A RecordBatch in columns: topics as names and indexes, int columns and byte columns as buffers; a
    column holding other values (a test's ``None`` timestamp) goes as a plain list."""
    put(b"R" + _U32.pack(len(batch)))
    topics = batch.topic
    if topics and topics.count(topics[0]) == len(topics):  # a piece: one partition's records
        names, indexes = {topics[0]: 0}, np.zeros(len(topics), dtype=np.int32)
    else:
        names = {}
        indexes = np.array([names.setdefault(t, len(names)) for t in topics], dtype=np.int32)
    _encode(list(names), put)
    _encode_array(indexes, put)
    for column in (batch.partition, batch.offset, batch.timestamp_ms):
        array = _int_column(column)
        if array is None:
            put(b"L")
            _encode(list(column), put)
        else:
            _encode_array(array, put)
    for column in (batch.key, batch.value):
        packed = _bytes_column(column)
        if packed is None:
            put(b"L")
            _encode(list(column), put)
        else:
            _encode_array(packed[0], put)
            _encode(packed[1], put)


class _Reader:
    """Reads one encoded value at a time from ``data`` (``at`` is the position)."""

    MAX_DEPTH = 200

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.view = memoryview(data)
        self.at = 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.at + n > len(self.data):
            raise WireError("not a valid message: it ends inside a value")
        out = self.data[self.at : self.at + n]
        self.at += n
        return out

    def u32(self) -> int:
        return _U32.unpack(self.take(4))[0]

    def value(self, depth: int) -> Any:
        if depth > self.MAX_DEPTH:
            raise WireError("not a valid message: nested too deep")
        data, at = self.data, self.at
        if at >= len(data):
            raise WireError("not a valid message: it ends inside a value")
        tag = data[at]
        self.at = at + 1
        if tag == 0x69:  # i
            self.at = at + 9
            return _I64.unpack_from(data, at + 1)[0]
        if tag == 0x73:  # s
            return self.take(_U32.unpack_from(data, at + 1)[0] + 4)[4:].decode("utf-8", "surrogatepass")
        if tag == 0x74 or tag == 0x6C or tag == 0x65 or tag == 0x7A:  # t l e z
            (n,) = _U32.unpack_from(data, at + 1)
            self.at = at + 5
            value = self.value
            items = [value(depth + 1) for _ in range(n)]
            return (
                items
                if tag == 0x6C
                else tuple(items)
                if tag == 0x74
                else set(items)
                if tag == 0x65
                else frozenset(items)
            )
        if tag == 0x64:  # d
            (n,) = _U32.unpack_from(data, at + 1)
            self.at = at + 5
            value = self.value
            out = {}
            for _ in range(n):
                k = value(depth + 1)
                out[k] = value(depth + 1)
            return out
        if tag == 0x66:  # f
            self.at = at + 9
            return _F64.unpack_from(data, at + 1)[0]
        if tag == 0x4E:  # N
            return None
        if tag == 0x54:  # T
            return True
        if tag == 0x46:  # F
            return False
        if tag == 0x62:  # b
            return self.take(_U32.unpack_from(data, at + 1)[0] + 4)[4:]
        if tag == 0x4A:  # J
            return int.from_bytes(self.take(self.u32()), "little", signed=True)
        if tag == 0x61:  # a
            return self.array()
        if tag == 0x67:  # g
            if self.take(1) != b"a":
                raise WireError("not a valid message: a numpy scalar without its array")
            return self.array()[()]
        if tag == 0x71:  # q
            return Fraction(self.integer(depth), self.integer(depth))
        if tag == 0x6D:  # m
            text = self.value(depth + 1)
            if type(text) is not str:
                raise WireError("not a valid message: a Decimal that is not a string")
            return Decimal(text)
        if tag == 0x79:  # y
            return _DYADICS[-1](self.integer(depth), self.integer(depth))
        if tag == 0x6F:  # o
            return self.instance(depth)
        if tag == 0x78:  # x
            kind, message = self.value(depth + 1), self.value(depth + 1)
            return RemoteError(str(kind), str(message))
        if tag == 0x52:  # R
            return self.batch(depth)
        if tag == 0x44:  # D
            return self.columns(depth)
        raise WireError(f"not a valid message: unknown tag {bytes([tag])!r} at byte {at}")

    def columns(self, depth: int) -> dict[Any, Any]:
        """A dict written by :func:`_encode_columns`."""
        width = self.take(1)[0]
        if self.take(1) != b"a":
            raise WireError("not a valid message: a columnar dict without its keys")
        keys = self.array()
        if keys.dtype != np.int64 or keys.ndim != (2 if width else 1) or (width and keys.shape[1] != width):
            raise WireError("not a valid message: a columnar dict's keys do not match their width")
        if self.data[self.at : self.at + 1] == b"a":
            self.at += 1
            array = self.array()
            if array.dtype not in (np.int64, np.float64) or array.ndim != 1:
                raise WireError("not a valid message: a columnar dict's values are not int64 or float64")
            values = array.tolist()
        else:
            values = self.value(depth + 1)
            if type(values) is not list:
                raise WireError("not a valid message: a columnar dict's values are not a list")
        if len(values) != len(keys):
            raise WireError("not a valid message: a columnar dict with more keys than values or fewer")
        rows = keys.tolist()
        return dict(zip(map(tuple, rows) if width else rows, values, strict=True))

    def integer(self, depth: int) -> int:
        value = self.value(depth + 1)
        if type(value) is not int:
            raise WireError(f"not a valid message: {type(value).__name__} where an int belongs")
        return value

    def array(self) -> np.ndarray:
        dtype = np.dtype(self.take(self.take(1)[0]).decode("ascii"))
        if dtype.kind not in _NUMERIC_KINDS or dtype.fields is not None or dtype.subdtype is not None:
            raise WireError(f"not a valid message: a numpy array of dtype {dtype}")
        ndim = self.take(1)[0]
        shape = tuple(_LEN.unpack(self.take(8))[0] for _ in range(ndim))
        raw = self.take(_LEN.unpack(self.take(8))[0])
        count = int(np.prod(shape, dtype=np.uint64)) if shape else 1
        if count * dtype.itemsize != len(raw):
            raise WireError(f"not a valid message: {len(raw)} bytes for an array {shape} of {dtype}")
        return np.frombuffer(raw, dtype=dtype).reshape(shape).copy()

    def instance(self, depth: int) -> Any:
        name = self.value(depth + 1)
        entry = CLASSES.get(name) if type(name) is str else None
        if entry is None:
            raise WireError(f"not a valid message: {name!r} is not a class a shard host message holds")
        cls, fields = entry
        values = [self.value(depth + 1) for _ in fields]
        if dataclasses.is_dataclass(cls):
            return cls(*values)
        if hasattr(cls, "_fields"):
            return cls(*values)
        obj = object.__new__(cls)
        for field, value in zip(fields, values, strict=True):
            object.__setattr__(obj, field, value)
        return obj

    def column(self, n: int, depth: int, kind: str) -> list[Any]:
        if self.data[self.at : self.at + 1] == b"L":
            self.at += 1
            values = self.value(depth + 1)
            if type(values) is not list or len(values) != n:
                raise WireError("not a valid message: a record column of the wrong length")
            return values
        if self.take(1) != b"a":
            raise WireError("not a valid message: a record column without its array")
        array = self.array()
        if len(array) != n or array.dtype.kind not in "iu":
            raise WireError("not a valid message: a record column of the wrong length or type")
        if kind == "int":
            return array.tolist()
        data = self.value(depth + 1)
        if type(data) is not bytes:
            raise WireError("not a valid message: a byte column without its data")
        if int(array.sum(dtype=np.int64)) + int((array < 0).sum()) != len(data):
            raise WireError("not a valid message: a byte column whose lengths do not add up")
        if n and array.min() < -1:
            raise WireError("not a valid message: a byte column with a negative length")
        ends = np.cumsum(np.maximum(array, 0), dtype=np.int64).tolist()
        starts = [0, *ends[:-1]]
        out = [data[a:b] for a, b in zip(starts, ends, strict=True)]
        if n and array.min() < 0:
            for i in np.flatnonzero(array < 0).tolist():
                out[i] = None
        return out

    def batch(self, depth: int) -> Any:
        from ivm.processor.pipeline import RecordBatch

        n = self.u32()
        names = self.value(depth + 1)
        if type(names) is not list or not all(type(t) is str for t in names):
            raise WireError("not a valid message: a record batch's topics are not strings")
        if self.take(1) != b"a":
            raise WireError("not a valid message: a record batch without its topic column")
        indexes = self.array()
        if len(indexes) != n or (n and (indexes.min() < 0 or indexes.max() >= len(names))):
            raise WireError("not a valid message: a record batch's topic column does not match its topics")
        topics = [names[0]] * n if len(names) == 1 else list(map(names.__getitem__, indexes.tolist()))
        partition, offset, timestamp = (self.column(n, depth, "int") for _ in range(3))
        key, value = (self.column(n, depth, "bytes") for _ in range(2))
        return RecordBatch(topics, partition, offset, key, value, timestamp)
