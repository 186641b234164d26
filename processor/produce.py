"""Load tuples from files into relation topics as Avro updates (``ivm produce``).

Input files are read as users have them (:class:`TupleFile`):

- plain text or gzip (recognised by its first bytes, whatever the file's name);
- blank lines and comment lines (first character ``#`` or ``%``, as SNAP and
  KONECT write them) are skipped;
- fields are separated by commas (with CSV quoting) or by runs of tabs and
  spaces; ``separator="auto"`` takes commas when the first non-comment line has one;
- the first non-comment line is a header when declared (``header="names"``:
  it names the columns; ``header="skip"``: skipped unread, such as a
  ``nodes edges`` count line), or, with ``header="auto"``, when it contains
  every attribute name of a relation being loaded (``A,B`` for ``R(A, B)``);
- a relation's attributes come from columns picked by name (from the header)
  or by position, by default the attributes' own names when there is a header,
  else the first columns: further columns (a weight, a timestamp) are ignored.

Every other line is a data line, and one that does not parse raises
:class:`InputError`: one line naming the file, the line number, what was
expected and what the line holds.  Nothing is ever dropped silently.

That is the ``edges`` format.  Files of any relation, its attributes typed by
its Avro schema (:class:`Field`: int, long, float, double, string, bytes as
base64, boolean, nullable unions ``["null", T]``, the logical types
``timestamp-millis``, ``timestamp-micros`` and ``date``), come in three more
formats (:data:`FORMATS`, :func:`format_of`):

- ``csv``: a header naming the columns (each an attribute, or ``mult``; an
  attribute with a schema default may be left out), then one row per line,
  comma- or tab-separated (CSV quoting);
- ``jsonl``: one JSON object per line, keyed by the attributes (and ``mult``);
- ``avro``: an Avro container file (``fastavro.reader``) of records with the
  attributes (and ``mult``).

An optional ``mult`` column gives each row's multiplicity (any non-zero
integer).  A value that does not fit its field, an unknown column, a missing
attribute: one :class:`InputError` line naming the file, the line (the record,
for Avro) and the field, e.g. ``r.csv: line 12, field B: 'x' is not a long``.
:func:`send_updates` sends updates, at most ``rate`` per second (:class:`TokenBucket`).
"""

from __future__ import annotations

import base64
import binascii
import csv
import datetime
import gzip
import io
import json
import random
import re
import struct
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Literal

from ivm.processor.codecs.avro import RelationCodec
from ivm.processor.kafka.sink import KafkaSink, Sink
from ivm.updates import Row, Update

if TYPE_CHECKING:
    from ivm.processor.kafka.clients import Kafka

Header = Literal["auto", "names", "skip", "none"]
Separator = Literal["auto", "comma", "tab", "whitespace"]
Format = Literal["csv", "jsonl", "avro", "edges"]
HEADERS: tuple[Header, ...] = ("auto", "names", "skip", "none")
SEPARATORS: tuple[Separator, ...] = ("auto", "comma", "tab", "whitespace")
FORMATS: tuple[Format, ...] = ("csv", "jsonl", "avro", "edges")
COMMENT_MARKS = "#%"
_GZIP_MAGIC = b"\x1f\x8b"
_SEPARATOR_WORDS = {"comma": "commas", "tab": "tabs", "whitespace": "tabs or spaces"}


class InputError(ValueError):
    """A file, or a line of it, that is not what was expected; the message names the file and line."""


@dataclass(frozen=True)
class InMemory:
    """Input already read into memory (standard input): its bytes, and the name error messages give it."""

    data: bytes
    name: str = "<stdin>"

    def __str__(self) -> str:
        return self.name


Source = str | Path | InMemory

_EXTENSIONS: dict[str, Format] = {
    ".csv": "csv",
    ".tsv": "csv",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".avro": "avro",
}
_AVRO_MAGIC = b"Obj\x01"


def format_of(source: Source, default: Format = "edges") -> Format:
    """The format of ``source`` by its name's extension (``.gz`` aside): ``.csv``/``.tsv`` csv,
    ``.jsonl``/``.ndjson`` jsonl, ``.avro`` avro, anything else ``default``.

    Input in memory (standard input) has no name: its first bytes decide (Avro's magic
    ``Obj\\x01``: avro; a first line starting with ``{``: jsonl; else ``default``).

    >>> format_of("r.csv.gz"), format_of("e.jsonl"), format_of("x.avro"), format_of("facebook.edges.gz")
    ('csv', 'jsonl', 'avro', 'edges')
    >>> format_of(InMemory(b'{"A": 1}\\n'), default="csv")
    'jsonl'
    """
    if isinstance(source, InMemory):
        head = source.data[:4096]
        if head[:2] == _GZIP_MAGIC:
            try:
                head = gzip.GzipFile(fileobj=io.BytesIO(source.data)).read(4096)
            except (OSError, EOFError, zlib.error):
                return default
        if head.startswith(_AVRO_MAGIC):
            return "avro"
        if head.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"{"):
            return "jsonl"
        return default
    suffixes = [x.lower() for x in Path(source).suffixes]
    if suffixes and suffixes[-1] == ".gz":
        suffixes.pop()
    return _EXTENSIONS.get(suffixes[-1], default) if suffixes else default


# --- the Avro types a file can give -----------------------------------------------------------------

_INTEGER = re.compile(r"[+-]?[0-9]+")
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_EPOCH_DAY = datetime.date(1970, 1, 1)
_NO_DEFAULT: Any = object()
_TIMESTAMP_UNITS = {"timestamp-millis": "milliseconds", "timestamp-micros": "microseconds"}
_REFUSED_LOGICAL = ("decimal", "uuid", "time-millis", "time-micros", "local-timestamp-millis",
                    "local-timestamp-micros", "duration")  # fmt: skip
SUPPORTED_TYPES = (
    'int, long, float, double, string, bytes (base64), boolean, a union ["null", T] of one of these, '
    "and the logical types timestamp-millis, timestamp-micros (ISO-8601 or epoch numbers) and date"
)


class _Unfit(ValueError):
    """Why a value does not fit its field, when its type alone does not say (an integer out of range)."""


def _show_value(value: Any, limit: int = 60) -> str:
    """A value as an error message shows it: text quoted, JSON's null/true/false as JSON spells them."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _integer(bits: int) -> tuple[Callable[[str], Any], Callable[[Any], Any]]:
    low, high = -(1 << (bits - 1)), (1 << (bits - 1)) - 1

    def check(value: int) -> int:
        if not low <= value <= high:
            raise _Unfit(f"out of range ({bits}-bit)")
        return value

    def text(t: str) -> int:
        t = t.strip()
        if not _INTEGER.fullmatch(t):
            raise ValueError
        return check(int(t))

    def value(v: Any) -> int:
        if isinstance(v, bool) or not isinstance(v, int):
            raise ValueError
        return check(v)

    return text, value


def _real(single: bool) -> tuple[Callable[[str], Any], Callable[[Any], Any]]:
    def fit(x: float) -> float:
        if single:  # what a float field holds (the pipeline decodes this value)
            try:
                return struct.unpack("<f", struct.pack("<f", x))[0]
            except OverflowError:
                raise _Unfit("out of range (32-bit float)") from None
        return x

    def text(t: str) -> float:
        return fit(float(t))

    def value(v: Any) -> float:
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise ValueError
        return fit(float(v))

    return text, value


def _string() -> tuple[Callable[[str], Any], Callable[[Any], Any]]:
    def value(v: Any) -> str:
        if not isinstance(v, str):
            raise ValueError
        return v

    return (lambda t: t), value


def _bytes() -> tuple[Callable[[str], Any], Callable[[Any], Any]]:
    def text(t: str) -> bytes:
        try:
            return base64.b64decode(t.strip(), validate=True)
        except (binascii.Error, ValueError):
            raise ValueError from None

    def value(v: Any) -> bytes:
        if isinstance(v, bytes | bytearray):
            return bytes(v)
        if isinstance(v, str):
            return text(v)
        raise ValueError

    return text, value


def _bool() -> tuple[Callable[[str], Any], Callable[[Any], Any]]:
    def value(v: Any) -> bool:
        if not isinstance(v, bool):
            raise ValueError
        return v

    return (lambda t: _boolean(t.strip())), value


def _timestamp(unit: str) -> tuple[Callable[[str], Any], Callable[[Any], Any]]:
    def normal(d: datetime.datetime) -> datetime.datetime:
        d = d.replace(tzinfo=datetime.UTC) if d.tzinfo is None else d.astimezone(datetime.UTC)
        return d.replace(microsecond=d.microsecond // 1000 * 1000) if unit == "milliseconds" else d

    def epoch(n: int) -> datetime.datetime:
        try:
            return _EPOCH + datetime.timedelta(**{unit: n})
        except OverflowError:
            raise _Unfit("out of range") from None

    def text(t: str) -> datetime.datetime:
        t = t.strip()
        if _INTEGER.fullmatch(t):
            return epoch(int(t))
        return normal(datetime.datetime.fromisoformat(t))

    def value(v: Any) -> datetime.datetime:
        if isinstance(v, datetime.datetime):
            return normal(v)
        if isinstance(v, str):
            return text(v)
        if isinstance(v, int) and not isinstance(v, bool):
            return epoch(v)
        raise ValueError

    return text, value


def _date() -> tuple[Callable[[str], Any], Callable[[Any], Any]]:
    def days(n: int) -> datetime.date:
        try:
            return _EPOCH_DAY + datetime.timedelta(days=n)
        except OverflowError:
            raise _Unfit("out of range") from None

    def text(t: str) -> datetime.date:
        t = t.strip()
        return days(int(t)) if _INTEGER.fullmatch(t) else datetime.date.fromisoformat(t)

    def value(v: Any) -> datetime.date:
        if isinstance(v, datetime.date) and not isinstance(v, datetime.datetime):
            return v
        if isinstance(v, str):
            return text(v)
        if isinstance(v, int) and not isinstance(v, bool):
            return days(v)
        raise ValueError

    return text, value


# Avro type (or logical type) -> (the word for it in error messages, its text and value parsers)
_TYPES: dict[str, tuple[str, Callable[[], tuple[Callable[[str], Any], Callable[[Any], Any]]]]] = {
    "int": ("an int", lambda: _integer(32)),
    "long": ("a long", lambda: _integer(64)),
    "float": ("a float", lambda: _real(True)),
    "double": ("a double", lambda: _real(False)),
    "string": ("a string", _string),
    "bytes": ("base64 bytes", _bytes),
    "boolean": ("a boolean (true or false)", _bool),
    "timestamp-millis": ("a timestamp (ISO-8601, or epoch milliseconds)", lambda: _timestamp("milliseconds")),
    "timestamp-micros": ("a timestamp (ISO-8601, or epoch microseconds)", lambda: _timestamp("microseconds")),
    "date": ("a date (ISO-8601, or days since 1970-01-01)", _date),
}


@dataclass(frozen=True)
class Field:
    """One field of a relation's Avro schema, as files give it: from text (csv, edges) or a value (jsonl, avro).

    ``text`` and ``value`` raise :class:`ValueError` for what does not fit; the
    error message is ``<shown value> is not <word>``.  A nullable field
    (``["null", T]``) takes an empty text field, ``null``, or JSON's null as null.

    >>> f = Field.of({"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}})
    >>> f.text("2024-05-01T12:00:00.250Z")
    datetime.datetime(2024, 5, 1, 12, 0, 0, 250000, tzinfo=datetime.timezone.utc)
    >>> f.value(0) == f.text("1970-01-01T00:00:00+00:00")
    True
    """

    name: str
    kind: str  # "long", "timestamp-millis", ...
    word: str  # "a long", ...: error messages say "'x' is not a long"
    nullable: bool
    parse_text: Callable[[str], Any] = field(repr=False, compare=False)
    parse_value: Callable[[Any], Any] = field(repr=False, compare=False)
    default: Any = field(default=_NO_DEFAULT, repr=False, compare=False)

    @classmethod
    def of(cls, avro_field: Mapping[str, Any]) -> Field:
        """The field of a (parsed or JSON) Avro record field; :class:`ValueError` naming it for a type files
        cannot give."""
        name = avro_field["name"]
        avro = avro_field["type"]
        nullable = False
        if isinstance(avro, list):
            others = [t for t in avro if t != "null"]
            if len(avro) != 2 or len(others) != 1:
                raise ValueError(f"attribute {name} has the Avro union type {json.dumps(avro)}; files can give "
                                 f"{SUPPORTED_TYPES}")  # fmt: skip
            nullable, avro = True, others[0]
        kind = avro
        if isinstance(avro, dict):
            logical = avro.get("logicalType")
            kind = logical if logical in _TYPES or logical in _REFUSED_LOGICAL else avro.get("type")
        if not isinstance(kind, str) or kind not in _TYPES:
            raise ValueError(f"attribute {name} has the Avro type {json.dumps(avro)}; files can give "
                             f"{SUPPORTED_TYPES}")  # fmt: skip
        word, make = _TYPES[kind]
        text, value = make()
        default = avro_field.get("default", _NO_DEFAULT)
        if default is not _NO_DEFAULT and default is not None:
            try:  # Avro spells a bytes default as a string of code points 0-255
                default = default.encode("latin-1") if kind == "bytes" else value(default)
            except (ValueError, AttributeError, UnicodeEncodeError):
                default = _NO_DEFAULT
        if nullable:
            word = f"{word} or null"
        return cls(name, kind, word, nullable, text, value, default)

    def text(self, text: str) -> Any:
        """The value of a text field (csv, edges)."""
        if self.nullable and text.strip() in ("", "null"):
            return None
        return self.parse_text(text)

    def value(self, value: Any) -> Any:
        """The value of a JSON or Avro value."""
        if value is None and self.nullable:
            return None
        return self.parse_value(value)


def _mult_field(codec: RelationCodec) -> Field:
    mult = next(f for f in codec.value_schema["fields"] if f["name"] == "mult")
    return Field.of({"name": "mult", "type": mult["type"]})


def _boolean(text: str) -> bool:
    """``true``/``false`` (any case), ``1``/``0``."""
    value = {"true": True, "1": True, "false": False, "0": False}.get(text.lower())
    if value is None:
        raise ValueError(text)
    return value


# Avro field type -> (parse a text field, the word for it in error messages)
_CONVERTERS: dict[str, tuple[Callable[[str], Any], str]] = {
    "int": (int, "an integer"),
    "long": (int, "an integer"),
    "float": (float, "a number"),
    "double": (float, "a number"),
    "string": (str, "a string"),
    "boolean": (_boolean, "true or false"),
}


@dataclass(frozen=True)
class Target:
    """A relation loaded from a file: its attributes and how each is parsed from text.

    ``fields`` (set by :meth:`of`, from the Avro schema) type the attributes for the
    csv, jsonl and avro formats, ``mult`` the multiplicity column; ``parsers`` and
    ``kinds`` are the edges format's.
    """

    relation: str
    attributes: tuple[str, ...]
    parsers: tuple[Callable[[str], Any], ...]
    kinds: tuple[str, ...]  # "an integer", ... (error messages)
    fields: tuple[Field, ...] = ()
    mult: Field | None = None

    @classmethod
    def of(cls, codec: Any) -> Target:
        """The target of a relation's codec (a :class:`RelationCodec` or a
        :class:`~ivm.processor.codecs.confluent.WireCodec`), its attributes typed by their Avro types;
        :class:`ValueError` for a type files cannot give.

        >>> from ivm.processor.codecs.avro import load_relation_codecs
        >>> Target.of(load_relation_codecs()["S"]).attributes
        ('B', 'C')
        """
        codec = getattr(codec, "codec", codec)  # a WireCodec's RelationCodec
        types = {f["name"]: f for f in codec.value_schema["fields"]}
        fields, parsers, kinds = [], [], []
        for a in codec.attributes:
            try:
                typed = Field.of(types[a])
            except ValueError as err:
                raise ValueError(f"relation {codec.relation}: {err}") from None
            fields.append(typed)
            avro = types[a]["type"]
            if isinstance(avro, str) and avro in _CONVERTERS:  # the edges format's words for plain types
                parser, kind = _CONVERTERS[avro]
            else:
                parser, kind = typed.text, typed.word
            parsers.append(parser)
            kinds.append(kind)
        return cls(codec.relation, codec.attributes, tuple(parsers), tuple(kinds), tuple(fields), _mult_field(codec))

    @classmethod
    def integers(cls, relation: str, attributes: Sequence[str]) -> Target:
        """A relation whose attributes are all integers."""
        return cls(relation, tuple(attributes), (int,) * len(attributes), ("an integer",) * len(attributes))


def _open(source: Source) -> IO[bytes]:
    """A binary stream of ``source``; :class:`InputError` for a file that does not exist or cannot be read."""
    if isinstance(source, InMemory):
        return io.BytesIO(source.data)
    try:
        return Path(source).open("rb")
    except FileNotFoundError:
        raise InputError(f"{source}: no such file") from None
    except OSError as err:
        raise InputError(f"{source}: cannot read it: {err.strerror}") from None


def _binary(raw: IO[bytes]) -> IO[bytes]:
    """``raw``, or its decompressed content when it is gzip (by its first bytes)."""
    compressed = raw.read(2) == _GZIP_MAGIC
    raw.seek(0)
    return gzip.GzipFile(fileobj=raw) if compressed else raw  # type: ignore[return-value]


def _lines(path: Path | InMemory, comments: bool = True) -> Iterator[tuple[int, str]]:
    """``(line number, stripped text)`` of each line that is neither blank nor (``comments``) a comment
    line, gzip or not."""
    raw = _open(path)
    n = 0
    marks = COMMENT_MARKS if comments else ""
    with raw:
        stream = _binary(raw)
        try:
            for n, data in enumerate(stream, 1):
                try:
                    text = data.decode("utf-8")
                except UnicodeDecodeError:
                    raise InputError(f"{path}:{n}: expected UTF-8 text, got bytes {data[:40]!r}") from None
                text = text.strip().lstrip("\ufeff")  # a byte-order mark (spreadsheets write one)
                if text and text[0] not in marks:
                    yield n, text
        except (OSError, EOFError, zlib.error) as err:  # a truncated or corrupt gzip stream
            raise InputError(f"{path}:{n + 1}: unreadable gzip data ({err})") from None


def _split_commas(text: str) -> list[str]:
    fields = next(csv.reader([text])) if '"' in text else text.split(",")
    return [f.strip() for f in fields]


def _split_tabs(text: str) -> list[str]:
    return [f.strip() for f in text.split("\t")]


_SPLITTERS: dict[str, Callable[[str], list[str]]] = {
    "comma": _split_commas,
    "tab": _split_tabs,
    "whitespace": str.split,
}


def _show(text: str, limit: int = 80) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")


class TupleFile:
    """One input file: its separator and header, settled by its first non-comment line, and its rows.

    ``header``: ``"names"``, the first non-comment line names the columns;
    ``"skip"``, it is skipped unread; ``"none"``, every line is data;
    ``"auto"``, it is the header when it contains every name of one of
    ``header_names`` (the attribute names of the relations being loaded).
    """

    def __init__(
        self,
        path: Source,
        *,
        header: Header = "auto",
        separator: Separator = "auto",
        header_names: Iterable[Sequence[str]] = (),
    ) -> None:
        self.path: Path | InMemory = path if isinstance(path, InMemory) else Path(path)
        self._guessed = header == "auto"  # the header was not declared: a failing first line may be one
        lines = _lines(self.path)
        try:
            first = next(lines, None)
        finally:
            lines.close()
        self.first_line = first[0] if first else 0
        if separator == "auto":
            separator = "comma" if first and "," in first[1] else "whitespace"
        self.separator: Separator = separator
        self._split = _SPLITTERS[separator]
        self.header: list[str] | None = None  # the column names, when the file has a header
        self.header_line = 0  # the line number of the header or of the skipped line; 0: none
        if first is None:
            if header == "names":
                raise InputError(f"{self.path}: expected a header line naming the columns; the file has no "
                                 "line that is not blank or a comment")  # fmt: skip
            return
        fields = self._split(first[1])
        if header == "auto":
            header = "names" if any(names and set(names) <= set(fields) for names in header_names) else "none"
        if header != "none":
            self.header_line = first[0]
        if header == "names":
            self.header = fields

    def columns_for(self, target: Target, columns: Sequence[str | int] | None = None) -> tuple[int, ...]:
        """0-based column indexes of ``target``'s attributes, in order.

        ``columns``: header names or 1-based positions (default: the attribute
        names if the file has a header, else the first columns).
        """
        if columns is not None and len(columns) != len(target.attributes):
            raise ValueError(f"--columns gives {len(columns)} columns; relation {target.relation} has "
                             f"{len(target.attributes)} attributes ({', '.join(target.attributes)})")  # fmt: skip
        if columns is None:
            if self.header is None:
                return tuple(range(len(target.attributes)))
            columns = target.attributes
        out = []
        for attribute, column in zip(target.attributes, columns, strict=True):
            if isinstance(column, int):
                if column < 1:
                    raise ValueError(f"--columns: positions count from 1, got {column}")
                out.append(column - 1)
            elif self.header is None:
                raise InputError(f"{self.path}: column {column!r} needs a header line naming the columns, "
                                 "and this file has none (or it was skipped)")  # fmt: skip
            elif column in self.header:
                out.append(self.header.index(column))
            else:
                raise InputError(
                    f"{self.path}:{self.header_line}: no column {column!r} (for {target.relation}.{attribute}) "
                    f"in the header; its columns: {', '.join(self.header)}"
                )
        return tuple(out)

    def rows(self, target: Target, indexes: Sequence[int]) -> Iterator[Row]:
        """The rows of ``target`` in the file's data lines, its attributes from columns ``indexes``."""
        need = max(indexes) + 1
        split = self._split
        picks = tuple(zip(indexes, target.parsers, strict=True))
        lines = _lines(self.path)
        try:
            for n, text in lines:
                if n == self.header_line:
                    continue
                fields = split(text)
                if len(fields) < need:
                    raise InputError(self._expected(n, text, target, indexes, f"{len(fields)} column(s)"))
                try:
                    yield tuple(parse(fields[i]) for i, parse in picks)
                except ValueError:
                    bad = next(k for k, (i, parse) in enumerate(picks) if not _parses(parse, fields[i]))
                    i = indexes[bad]
                    found = f"column {i + 1} is {fields[i]!r}, not {target.kinds[bad]}"
                    raise InputError(self._expected(n, text, target, indexes, found)) from None
        finally:
            lines.close()

    def _expected(self, n: int, text: str, target: Target, indexes: Sequence[int], found: str) -> str:
        """The one-line error of data line ``n``."""
        wanted = ", ".join(f"{a} ({kind}, column {i + 1})"
                           for a, kind, i in zip(target.attributes, target.kinds, indexes, strict=True))  # fmt: skip
        hint = ""
        if self._guessed and n == self.first_line and self.header_line == 0:
            hint = " (a header line? --header takes column names from it, --skip-header skips it)"
        return (f"{self.path}:{n}: {found}; expected {target.relation}'s {wanted}, separated by "
                f"{_SEPARATOR_WORDS[self.separator]}: {_show(text)}{hint}")  # fmt: skip


def _parses(parse: Callable[[str], Any], text: str) -> bool:
    try:
        parse(text)
    except ValueError:
        return False
    return True


def read_edges(path: Source) -> Iterator[tuple[int, int]]:
    """Pairs ``(u, v)`` of the first two columns of an edge list, gzip or not; further columns are ignored.

    Comment lines are skipped; every other line must be an edge (no header).
    """
    file = TupleFile(path, header="none")
    yield from file.rows(Target.integers("the edge", ("u", "v")), (0, 1))


def parse_columns(text: str) -> list[str | int]:
    """``--columns``: comma-separated header names or 1-based positions.

    >>> parse_columns("src, dst")
    ['src', 'dst']
    >>> parse_columns("2,1")
    [2, 1]
    """
    return [int(c) if c.isdigit() else c for c in (c.strip() for c in text.split(","))]


# --- csv, jsonl and avro: files of any relation ------------------------------------------------------

Entry = tuple[Row, int | None]  # a row and its multiplicity from the file (None: no mult column)


def _unfit(name: str, where: str, typed: Field, shown: Any, err: ValueError) -> InputError:
    """``r.csv: line 12, field B: 'x' is not a long``."""
    reason = f": {err}" if isinstance(err, _Unfit) else ""
    return InputError(f"{name}: {where}, field {typed.name}: {_show_value(shown)} is not {typed.word}{reason}")


def _nonzero(name: str, where: str, mult: int, shown: Any) -> int:
    if mult == 0:
        raise InputError(f"{name}: {where}, field mult: {_show_value(shown)} is not a multiplicity "
                         "(a non-zero integer: 0 is no update)")  # fmt: skip
    return mult


def _attributes_text(target: Target) -> str:
    return f"relation {target.relation}'s attributes are {', '.join(target.attributes)}, and an optional mult"


def _check_names(name: str, where: str, names: Sequence[str], target: Target, what: str) -> None:
    """Every name an attribute or ``mult``, each once; every attribute without a default named."""
    seen: set[str] = set()
    for column in names:
        if column in seen:
            raise InputError(f"{name}: {where}, field {column}: named twice")
        seen.add(column)
        if column != "mult" and column not in target.attributes:
            raise InputError(f"{name}: {where}, field {column}: unknown {what}; {_attributes_text(target)}")
    for typed in target.fields:
        if typed.name not in seen and typed.default is _NO_DEFAULT:
            raise InputError(f"{name}: {where}, field {typed.name}: missing; {_attributes_text(target)}")


def _fields_of(target: Target, form: str) -> tuple[Field, ...]:
    if not target.fields or target.mult is None:
        raise ValueError(f"the {form} format needs relation {target.relation}'s Avro types (Target.of)")
    return target.fields


def _text_lines(source: Source) -> Iterator[tuple[int, str]]:
    """``(line number, line with its ending)`` of ``source`` as UTF-8 text, gzip or not."""
    raw = _open(source)
    n = 0
    with raw:
        stream = _binary(raw)
        try:
            for n, data in enumerate(stream, 1):
                try:
                    text = data.decode("utf-8")
                except UnicodeDecodeError:
                    raise InputError(f"{source}: line {n}: expected UTF-8 text, got bytes {data[:40]!r}") from None
                yield n, text.lstrip("\ufeff") if n == 1 else text
        except (OSError, EOFError, zlib.error) as err:
            raise InputError(f"{source}: line {n + 1}: unreadable gzip data ({err})") from None


def read_csv(source: Source, target: Target, separator: Separator = "auto") -> Iterator[Entry]:
    """The rows of a CSV file with a header naming its columns: ``target``'s attributes (those with a schema
    default may be left out) and optionally ``mult``.

    Blank lines, and comment lines (``#``, ``%``) before the header, are skipped; fields are separated by
    commas, or tabs when the header has tabs and no comma (``separator``: ``comma`` or ``tab``), with CSV
    quoting.  Each field is typed by :meth:`Field.text`.
    """
    fields = _fields_of(target, "csv")
    if separator == "whitespace":
        raise ValueError("--separator whitespace is for the edges format; csv fields are separated by commas or tabs")
    name = str(source)
    lines = _text_lines(source)
    header_line, header_text = 0, ""
    for n, text in lines:
        stripped = text.strip()
        if stripped and stripped[0] not in COMMENT_MARKS:
            header_line, header_text = n, text
            break
    if not header_line:
        raise InputError(f"{name}: expected a header line naming the columns ({', '.join(target.attributes)}); "
                         "the file has no line that is not blank or a comment")  # fmt: skip
    if separator == "auto":
        separator = "tab" if "\t" in header_text and "," not in header_text else "comma"
    delimiter = "\t" if separator == "tab" else ","
    header = [h.strip() for h in next(csv.reader([header_text], delimiter=delimiter))]
    _check_names(name, f"line {header_line}", header, target, "column")
    by_name = {f.name: f for f in fields}
    picks = [(i, by_name[c]) for i, c in enumerate(header) if c != "mult"]
    mult_at = header.index("mult") if "mult" in header else None
    mult_field = target.mult
    assert mult_field is not None
    order = {f.name: k for k, f in enumerate(fields)}
    defaults = [f.default for f in fields]
    slots = [order[f.name] for _, f in picks]
    last = [header_line]

    def counted() -> Iterator[str]:
        for n, text in lines:
            last[0] = n
            yield text

    reader = csv.reader(counted(), delimiter=delimiter)
    end = header_line
    while True:
        try:
            values = next(reader)
        except StopIteration:
            break
        except csv.Error as err:
            raise InputError(f"{name}: line {end + 1}: not CSV: {err}") from None
        line, end = end + 1, last[0]
        if not values or (len(values) == 1 and not values[0].strip() and len(header) > 1):
            continue  # a blank line
        if len(values) != len(header):
            raise InputError(f"{name}: line {line}: {len(values)} fields, the header (line {header_line}) has "
                             f"{len(header)}: {_show(delimiter.join(values))}")  # fmt: skip
        row = list(defaults)
        for (i, typed), slot in zip(picks, slots, strict=True):
            try:
                row[slot] = typed.text(values[i])
            except ValueError as err:
                raise _unfit(name, f"line {line}", typed, values[i], err) from None
        mult = None
        if mult_at is not None:
            try:
                mult = mult_field.text(values[mult_at])
            except ValueError as err:
                raise _unfit(name, f"line {line}", mult_field, values[mult_at], err) from None
            mult = _nonzero(name, f"line {line}", mult, values[mult_at])
        yield tuple(row), mult


def _record_entry(name: str, where: str, record: Mapping[str, Any], target: Target) -> Entry:
    """The row and multiplicity of a JSON object or Avro record keyed by attribute names."""
    _check_names(name, where, list(record), target, "field")
    row = []
    for typed in target.fields:
        if typed.name not in record:
            row.append(typed.default)
            continue
        value = record[typed.name]
        try:
            row.append(typed.value(value))
        except ValueError as err:
            raise _unfit(name, where, typed, value, err) from None
    mult = None
    if "mult" in record:
        assert target.mult is not None
        try:
            mult = target.mult.value(record["mult"])
        except ValueError as err:
            raise _unfit(name, where, target.mult, record["mult"], err) from None
        mult = _nonzero(name, where, mult, record["mult"])
    return tuple(row), mult


def _kind_of_json(value: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}.get(
        type(value), "null" if value is None else "a number"
    )


def read_jsonl(source: Source, target: Target) -> Iterator[Entry]:
    """The rows of a JSON lines file: one object per line, keyed by ``target``'s attributes (and ``mult``).

    Blank lines are skipped.  Values are typed by :meth:`Field.value`: JSON numbers for the numeric types
    (integers for int and long), strings for string, base64 strings for bytes, true/false for boolean,
    ISO-8601 strings or epoch numbers for timestamps and dates, null for a nullable attribute.
    """
    _fields_of(target, "jsonl")
    name = str(source)
    for n, text in _lines(source if isinstance(source, InMemory) else Path(source), comments=False):
        try:
            record = json.loads(text)
        except json.JSONDecodeError as err:
            raise InputError(f"{name}: line {n}: not JSON ({err.msg}, column {err.colno}): {_show(text)}") from None
        if not isinstance(record, dict):
            raise InputError(f"{name}: line {n}: expected a JSON object keyed by relation {target.relation}'s "
                             f"attributes, got {_kind_of_json(record)}: {_show(text)}")  # fmt: skip
        yield _record_entry(name, f"line {n}", record, target)


def read_avro(source: Source, target: Target) -> Iterator[Entry]:
    """The rows of an Avro container file (read with ``fastavro.reader``): records with ``target``'s
    attributes (and ``mult``), each value typed by :meth:`Field.value`; errors name the record's number."""
    import fastavro

    _fields_of(target, "avro")
    name = str(source)
    raw = _open(source)
    n = 0
    with raw:
        try:
            reader = fastavro.reader(_binary(raw))
        except Exception as err:  # fastavro raises ValueError and others for what is not a container file
            raise InputError(f"{name}: not an Avro container file ({err})") from None
        try:
            for n, record in enumerate(reader, 1):
                if not isinstance(record, dict):
                    raise InputError(f"{name}: record {n}: expected a record with relation {target.relation}'s "
                                     f"attributes, got {_show_value(record)}")  # fmt: skip
                yield _record_entry(name, f"record {n}", record, target)
        except InputError:
            raise
        except Exception as err:  # a truncated or corrupt block
            raise InputError(f"{name}: record {n + 1}: unreadable Avro data ({type(err).__name__}: {err})") from None


def read_entries(source: Source, target: Target, form: Format, separator: Separator = "auto") -> list[Entry]:
    """Every row of ``source`` in format ``form`` (csv, jsonl or avro) for ``target``, checked whole."""
    if form == "csv":
        return list(read_csv(source, target, separator))
    if form == "jsonl":
        return list(read_jsonl(source, target))
    if form == "avro":
        return list(read_avro(source, target))
    raise ValueError(f"read_entries reads csv, jsonl and avro, not {form!r}")


def read_updates(
    path: Source,
    targets: Sequence[Target],
    mult: int,
    *,
    columns: Sequence[str | int] | None = None,
    header: Header = "auto",
    separator: Separator = "auto",
    both_directions: bool = False,
    fraction: float = 1.0,
    seed: int = 0,
    format: Format = "edges",
) -> list[Update]:
    """The updates a file gives ``targets``: each row of each relation with multiplicity ``mult``
    (times the row's own ``mult`` column, in the csv, jsonl and avro formats).

    ``format="edges"``: relations that take the same columns (by default all of
    them, unless a header names their attributes) read the file once: for each
    row, an update of each relation in turn.  The csv, jsonl and avro formats
    read the file for each relation in turn.  With ``both_directions``, an update
    of ``(v, u)`` after each ``(u, v)``.  ``fraction`` keeps a seeded random subset
    of the rows.  Raises :class:`InputError` (the file) or :class:`ValueError` (the options).
    """
    if both_directions:
        for t in targets:
            if len(t.attributes) != 2:
                raise ValueError(f"--both-directions needs relations of two attributes; {t.relation} has "
                                 f"{len(t.attributes)}")  # fmt: skip
            if t.fields and t.fields[0].kind != t.fields[1].kind:
                a, b = t.attributes
                raise ValueError(f"--both-directions needs attributes of one type; {t.relation}'s {a} is "
                                 f"{t.fields[0].word}, {b} {t.fields[1].word}")  # fmt: skip
    if format != "edges":
        if columns is not None:
            raise ValueError(f"--columns is for the edges format; a {format} file names its columns itself")
        if header in ("skip", "none"):
            raise ValueError(f"--skip-header and --no-header are for the edges format, not {format}")
        updates: list[Update] = []
        for t in targets:
            entries = read_entries(path, t, format, separator)
            for row, m in sample(entries, fraction, seed):
                n = mult if m is None else mult * m
                updates.append(Update(t.relation, row, n))
                if both_directions:
                    updates.append(Update(t.relation, row[::-1], n))
        return updates
    named = columns is not None and any(isinstance(c, str) for c in columns)
    if named and header == "skip":
        raise ValueError("--columns names need the header line that --skip-header skips; give positions (1, 2, ...)")
    if named and header == "auto":
        header = "names"
    file = TupleFile(path, header=header, separator=separator, header_names=[t.attributes for t in targets])
    groups: dict[tuple[tuple[int, ...], tuple[Callable[[str], Any], ...]], list[Target]] = {}
    for t in targets:
        groups.setdefault((file.columns_for(t, columns), t.parsers), []).append(t)
    updates = []
    for (indexes, _), group in groups.items():
        for row in sample(file.rows(group[0], indexes), fraction, seed):
            for t in group:
                updates.append(Update(t.relation, row, mult))
                if both_directions:
                    updates.append(Update(t.relation, row[::-1], mult))
    return updates


def sample(rows: Iterable[Any], fraction: float, seed: int) -> list[Any]:
    """A seeded random subset of ``rows``, each kept with probability ``fraction``."""
    rng = random.Random(seed)
    return [row for row in rows if rng.random() < fraction]


def edge_updates(
    edges: Iterable[tuple[int, int]], relations: Sequence[str], mult: int, both_directions: bool
) -> Iterator[Update]:
    """Each edge as an update of every relation, in one or both directions."""
    for u, v in edges:
        for relation in relations:
            yield Update(relation, (u, v), mult)
            if both_directions:
                yield Update(relation, (v, u), mult)


class TokenBucket:
    """At most ``rate`` takes a second on average: a token bucket that fills at ``rate`` tokens a second up to
    ``burst`` (default: a tenth of a second's worth, at least one), starting with one token.

    :meth:`take` sleeps until a token is there.  It sleeps at least ``min_sleep`` at a time, so that
    high rates are not lost to the cost of many tiny sleeps: the tokens that accrue meanwhile (up to
    ``burst``) are spent without sleeping, and the long-run rate stays ``rate``.  ``clock`` and
    ``sleep`` are injectable for tests.
    """

    def __init__(
        self,
        rate: float,
        burst: float | None = None,
        *,
        min_sleep: float = 0.001,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not rate > 0:
            raise ValueError(f"the rate must be positive, got {rate}")
        self.rate = float(rate)
        self.burst = max(1.0, burst if burst is not None else self.rate / 10)
        self.min_sleep = min_sleep
        self._clock = clock
        self._sleep = sleep
        self.tokens = 1.0
        self._last = clock()

    def _refill(self) -> None:
        now = self._clock()
        self.tokens = min(self.burst, self.tokens + (now - self._last) * self.rate)
        self._last = now

    def take(self, n: float = 1.0) -> None:
        """Wait until ``n`` tokens (at most ``burst``) are there and spend them."""
        self._refill()
        while self.tokens < n - 1e-9:  # a rounding error's worth short is there (no endless tiny sleeps)
            self._sleep(max((n - self.tokens) / self.rate, self.min_sleep))
            self._refill()
        self.tokens -= n


def send_updates(
    producer: UpdateProducer,
    updates: Sequence[Update],
    *,
    rate: float | None = None,
    progress: Callable[[int], None] | None = None,
    bucket: TokenBucket | None = None,
) -> int:
    """Send ``updates`` in order through ``producer``, at most ``rate`` a second (``None``: as fast as the
    producer takes them); ``progress(n)`` after every group of ``n`` sent (about ten times a second
    under a rate).  The number sent.  ``bucket`` replaces the rate's own (tests)."""
    if bucket is None and rate is not None:
        bucket = TokenBucket(rate)
    step = 10_000 if bucket is None else max(1, min(10_000, int(bucket.rate / 10)))
    sent = 0
    for start in range(0, len(updates), step):
        chunk = updates[start : start + step]
        for update in chunk:
            if bucket is not None:
                bucket.take()
            producer.send(update)
        sent += len(chunk)
        if progress is not None:
            progress(len(chunk))
    return sent


class UpdateProducer:
    """Produce updates to their relation topics, keyed by tuple (an idempotent producer).

    ``codecs``: a :class:`RelationCodec` or :class:`~ivm.processor.codecs.confluent.WireCodec` per relation;
    ``topics``: each relation's topic (default: its name); ``sink``: where the records go
    (default: a :class:`KafkaSink` on ``bootstrap``; tests pass their own).
    """

    def __init__(
        self,
        bootstrap: Kafka,
        codecs: Mapping[str, Any],
        topics: dict[str, str] | None = None,
        *,
        sink: Sink | None = None,
    ) -> None:
        self.codecs = codecs
        self.topics = topics or {name: name for name in codecs}
        self.sent = 0
        self._sink: Sink = sink if sink is not None else KafkaSink(bootstrap, flush_timeout=120, **{"linger.ms": 20})

    def send_raw(self, topic: str, key: bytes | None, value: bytes | None) -> None:
        self._sink.send(topic, key, value)
        self.sent += 1

    def send(self, update: Update) -> None:
        try:
            codec = self.codecs[update.relation]
        except KeyError:
            raise ValueError(f"no schema for relation {update.relation!r}; known: {sorted(self.codecs)}") from None
        key, value = codec.encode(update.row, update.mult)
        self.send_raw(self.topics[update.relation], key, value)

    def send_all(self, updates: Iterable[Update]) -> int:
        before = self.sent
        for update in updates:
            self.send(update)
        return self.sent - before

    def flush(self) -> None:
        """Wait until every update is delivered; raises on any delivery failure."""
        self._sink.commit()


class PackedProducer(UpdateProducer):
    """Produce updates as packed records (``encoding = "avro-packed"`` or ``"confluent-packed"``): up to
    ``pack`` updates of one relation in one Kafka record (``codec.encode_many``).

    Every tuple keeps its order: its updates go to one of ``buckets[topic]`` buckets (a CRC-32 of the
    tuple's Avro key; give the topic's partition count), a bucket's updates are packed in the order
    they are sent, and every record of a bucket has the same Kafka key (``<relation>#<bucket>``), so
    it goes to the same partition as the bucket's earlier records.  A bucket's record is sent when it
    holds ``pack`` updates, and by :meth:`flush` for the rest.  ``sent`` counts updates;
    ``records`` the Kafka records.
    """

    def __init__(
        self,
        bootstrap: Kafka,
        codecs: Mapping[str, Any],
        topics: dict[str, str] | None = None,
        *,
        pack: int,
        buckets: Mapping[str, int] | None = None,
        sink: Sink | None = None,
    ) -> None:
        if pack < 1:
            raise ValueError(f"pack: at least 1 update per record, got {pack}")
        super().__init__(bootstrap, codecs, topics, sink=sink)
        for name, codec in codecs.items():
            if not getattr(codec, "packed", False):
                raise ValueError(f"relation {name}'s codec writes one-update records, not packed ones")
        self.pack = pack
        self.buckets = dict(buckets or {})
        self.records = 0
        self._open: dict[tuple[str, int], list[tuple[Row, int]]] = {}

    def send(self, update: Update) -> None:
        try:
            codec = self.codecs[update.relation]
        except KeyError:
            raise ValueError(f"no schema for relation {update.relation!r}; known: {sorted(self.codecs)}") from None
        topic = self.topics[update.relation]
        n = self.buckets.get(topic, 1)
        bucket = zlib.crc32(codec.codec.encode(update.row, update.mult)[0]) % n if n > 1 else 0
        pending = self._open.setdefault((update.relation, bucket), [])
        pending.append((update.row, update.mult))
        if len(pending) >= self.pack:
            self._send_bucket(update.relation, bucket)

    def _send_bucket(self, relation: str, bucket: int) -> None:
        pending = self._open.pop((relation, bucket), None)
        if not pending:
            return
        value = self.codecs[relation].encode_many(pending)
        self._sink.send(self.topics[relation], f"{relation}#{bucket}".encode(), value)
        self.sent += len(pending)
        self.records += 1

    def flush(self) -> None:
        """Send every bucket's partial record, then wait until every update is delivered."""
        for relation, bucket in list(self._open):
            self._send_bucket(relation, bucket)
        super().flush()
