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
"""

from __future__ import annotations

import csv
import gzip
import random
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ivm.updates import Row, Update
from processor.codec import RelationCodec
from processor.sink import KafkaSink

Header = Literal["auto", "names", "skip", "none"]
Separator = Literal["auto", "comma", "tab", "whitespace"]
HEADERS: tuple[Header, ...] = ("auto", "names", "skip", "none")
SEPARATORS: tuple[Separator, ...] = ("auto", "comma", "tab", "whitespace")
COMMENT_MARKS = "#%"
_GZIP_MAGIC = b"\x1f\x8b"
_SEPARATOR_WORDS = {"comma": "commas", "tab": "tabs", "whitespace": "tabs or spaces"}


class InputError(ValueError):
    """A file, or a line of it, that is not what was expected; the message names the file and line."""


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
    """A relation loaded from a file: its attributes and how each is parsed from text."""

    relation: str
    attributes: tuple[str, ...]
    parsers: tuple[Callable[[str], Any], ...]
    kinds: tuple[str, ...]  # "an integer", ... (error messages)

    @classmethod
    def of(cls, codec: RelationCodec) -> Target:
        """The target of a relation's codec, its attributes parsed by their Avro types.

        >>> from processor.codec import load_relation_codecs
        >>> Target.of(load_relation_codecs()["S"]).attributes
        ('B', 'C')
        """
        types = {f["name"]: f["type"] for f in codec.value_schema["fields"]}
        parsers, kinds = [], []
        for a in codec.attributes:
            avro = types[a]["type"] if isinstance(types[a], dict) else types[a]
            if not isinstance(avro, str) or avro not in _CONVERTERS:
                raise ValueError(f"relation {codec.relation}: attribute {a} has Avro type {avro!r}; "
                                 f"files can give {', '.join(_CONVERTERS)}")  # fmt: skip
            parser, kind = _CONVERTERS[avro]
            parsers.append(parser)
            kinds.append(kind)
        return cls(codec.relation, codec.attributes, tuple(parsers), tuple(kinds))

    @classmethod
    def integers(cls, relation: str, attributes: Sequence[str]) -> Target:
        """A relation whose attributes are all integers."""
        return cls(relation, tuple(attributes), (int,) * len(attributes), ("an integer",) * len(attributes))


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` of each line that is neither blank nor a comment, gzip or not."""
    try:
        raw = path.open("rb")
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except OSError as err:
        raise InputError(f"{path}: cannot read it: {err.strerror}") from None
    n = 0
    with raw:
        compressed = raw.read(2) == _GZIP_MAGIC
        raw.seek(0)
        stream = gzip.GzipFile(fileobj=raw) if compressed else raw
        try:
            for n, data in enumerate(stream, 1):
                try:
                    text = data.decode("utf-8")
                except UnicodeDecodeError:
                    raise InputError(f"{path}:{n}: expected UTF-8 text, got bytes {data[:40]!r}") from None
                text = text.strip().lstrip("\ufeff")  # a byte-order mark (spreadsheets write one)
                if text and text[0] not in COMMENT_MARKS:
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
        path: str | Path,
        *,
        header: Header = "auto",
        separator: Separator = "auto",
        header_names: Iterable[Sequence[str]] = (),
    ) -> None:
        self.path = Path(path)
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


def read_edges(path: str | Path) -> Iterator[tuple[int, int]]:
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


def read_updates(
    path: str | Path,
    targets: Sequence[Target],
    mult: int,
    *,
    columns: Sequence[str | int] | None = None,
    header: Header = "auto",
    separator: Separator = "auto",
    both_directions: bool = False,
    fraction: float = 1.0,
    seed: int = 0,
) -> list[Update]:
    """The updates a file gives ``targets``: each row of each relation with multiplicity ``mult``.

    Relations that take the same columns (by default all of them, unless a
    header names their attributes) read the file once: for each row, an update
    of each relation in turn, and of ``(v, u)`` after ``(u, v)`` with
    ``both_directions``.  ``fraction`` keeps a seeded random subset of the rows.
    Raises :class:`InputError` (the file) or :class:`ValueError` (the options).
    """
    named = columns is not None and any(isinstance(c, str) for c in columns)
    if named and header == "skip":
        raise ValueError("--columns names need the header line that --skip-header skips; give positions (1, 2, ...)")
    if named and header == "auto":
        header = "names"
    if both_directions:
        for t in targets:
            if len(t.attributes) != 2:
                raise ValueError(f"--both-directions needs relations of two attributes; {t.relation} has "
                                 f"{len(t.attributes)}")  # fmt: skip
    file = TupleFile(path, header=header, separator=separator, header_names=[t.attributes for t in targets])
    groups: dict[tuple[tuple[int, ...], tuple[Callable[[str], Any], ...]], list[Target]] = {}
    for t in targets:
        groups.setdefault((file.columns_for(t, columns), t.parsers), []).append(t)
    updates: list[Update] = []
    for (indexes, _), group in groups.items():
        for row in sample(file.rows(group[0], indexes), fraction, seed):
            for t in group:
                updates.append(Update(t.relation, row, mult))
                if both_directions:
                    updates.append(Update(t.relation, row[::-1], mult))
    return updates


def sample(rows: Iterable[Row], fraction: float, seed: int) -> list[Row]:
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


class UpdateProducer:
    """Produce updates to their relation topics, keyed by tuple (an idempotent producer)."""

    def __init__(self, bootstrap: str, codecs: dict[str, RelationCodec], topics: dict[str, str] | None = None) -> None:
        self.codecs = codecs
        self.topics = topics or {name: name for name in codecs}
        self.sent = 0
        self._sink = KafkaSink(bootstrap, flush_timeout=120, **{"linger.ms": 20})

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
