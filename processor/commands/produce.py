"""``ivm produce``: load an edge list or a CSV file into relation topics as Avro updates."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from processor.cli import CommandError

DESCRIPTION = """\
Each input tuple becomes an Avro update keyed by the tuple: an insert (+1), or a delete (-1) with --delete.
The whole file is read and checked before anything is sent.

Input: an edge list ('u v' per line, SNAP and KONECT files as they are) or a CSV file, plain or gzipped (.gz).
  - Blank lines and comment lines (first character # or %) are skipped.
  - Fields are separated by commas (CSV quoting) when the first non-comment line has one, else by runs of
    tabs and spaces (--separator to choose).
  - A relation R(A, B) takes the file's first two columns; further columns (a weight, a timestamp) are ignored.
    --columns picks others, by position (--columns 2,1) or by header name (--columns src,dst).
  - Header: the first non-comment line is a header naming the columns when it contains every attribute name
    of a relation being loaded (A,B for R(A, B)), or with --header, or with --columns names; the attributes
    are then taken by name.  --skip-header skips that line unread (a 'nodes edges' count line, or a header
    you don't take names from).  Every other line is data: a line that does not parse (a non-numeric value
    for an integer attribute, too few columns) stops the command with its file, line number and what was
    expected; nothing is dropped silently.

Relations: their schemas are the .avsc files of the schemas folder's relations/ ($IVM_SCHEMAS, else the
checkout's schemas/), each a record with the attributes and a long 'mult'; topics are created if missing.
Errors (one line each): a file that does not exist or a line that does not parse, an unknown relation or a
schema file that does not read (exit 2); a broker or schema registry that cannot be reached (exit 1,
within seconds, naming the address).
"""


def add_parser(subparsers) -> argparse.ArgumentParser:
    from processor.produce import SEPARATORS

    p = subparsers.add_parser(
        "produce",
        help="load an edge list or CSV file into relation topics",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("file", help="an edge list or CSV file, plain or gzipped")
    p.add_argument("--bootstrap", default="127.0.0.1:9092", help="Kafka bootstrap servers (default 127.0.0.1:9092)")
    p.add_argument(
        "--relation", "-r", action="append", required=True,
        help="relation to load into (repeat for several, e.g. -r R -r S -r T)",
    )  # fmt: skip
    p.add_argument(
        "--columns", metavar="COLS",
        help="the columns of the relation's attributes, in order: 1-based positions or header names, "
        "comma-separated (default: the attributes' names if the file has a header, else the first columns)",
    )  # fmt: skip
    header = p.add_mutually_exclusive_group()
    header.add_argument(
        "--header", dest="header", action="store_const", const="names", default="auto",
        help="the first non-comment line is a header naming the columns",
    )  # fmt: skip
    header.add_argument(
        "--skip-header", dest="header", action="store_const", const="skip",
        help="skip the first non-comment line unread (a 'nodes edges' count line, or an unused header)",
    )  # fmt: skip
    header.add_argument(
        "--no-header", dest="header", action="store_const", const="none",
        help="every non-comment line is data, even one that names the attributes",
    )  # fmt: skip
    p.add_argument(
        "--separator", choices=SEPARATORS, default="auto",
        help="field separator; auto: comma if the first non-comment line has one, else tabs or spaces",
    )  # fmt: skip
    p.add_argument(
        "--both-directions", action="store_true", help="two-attribute relations: also load (v, u) for each (u, v)"
    )
    p.add_argument("--delete", action="store_true", help="produce deletes (-1) instead of inserts")
    p.add_argument("--sample", type=float, default=1.0, help="keep each tuple with this probability")
    p.add_argument("--seed", type=int, default=0, help="seed of --sample")
    p.add_argument(
        "--encoding", choices=["avro", "confluent"], default="avro",
        help="plain Avro (schemas/) or the Confluent wire format with --schema-registry",
    )  # fmt: skip
    p.add_argument("--schema-registry", help="URL of the Confluent-compatible registry API")
    return p


def relation_codecs(directory: Path | None = None) -> dict[str, Any]:
    """Every relation schema of ``directory`` (default: the schemas folder's ``relations/``) by relation name.

    A file that is not JSON, or not a relation update record (a record with an int or long
    ``mult``), is a :class:`~processor.cli.CommandError` (exit 2) with one line per such file.
    """
    from processor.codec import RelationCodec, load_schema, schemas_dir

    directory = Path(directory) if directory is not None else schemas_dir() / "relations"
    codecs: dict[str, Any] = {}
    problems: list[str] = []
    for path in sorted(directory.glob("*.avsc")):
        try:
            schema = load_schema(path)
        except json.JSONDecodeError as err:
            problems.append(f"schema file {path} is not JSON: {err}")
            continue
        except OSError as err:
            problems.append(f"schema file {path} cannot be read: {(err.strerror or str(err)).lower()}")
            continue
        if not isinstance(schema, dict):
            problems.append(f"schema file {path} is not a relation update schema: not an Avro record")
            continue
        try:
            codec = RelationCodec.from_schema(schema)
        except Exception as err:  # ValueError for a missing mult; fastavro's own for an invalid Avro schema
            problems.append(f"schema file {path} is not a relation update schema: {err}")
            continue
        codecs[codec.relation] = codec
    if problems:
        raise CommandError("\n".join(problems))
    return codecs


def run(args: argparse.Namespace) -> int:
    from processor.codec import schemas_dir
    from processor.produce import Target, UpdateProducer, parse_columns, read_updates
    from processor.progress import ProgressBar
    from processor.topics import create_topics, require_broker

    codecs = relation_codecs()
    unknown = [r for r in args.relation if r not in codecs]
    if unknown:
        known = ", ".join(sorted(codecs)) or "none"
        raise CommandError(f"no schema for {', '.join(unknown)} in {schemas_dir() / 'relations'} (known: {known})")
    if args.encoding == "confluent" and not args.schema_registry:
        raise CommandError("--encoding confluent needs --schema-registry URL")
    started = time.monotonic()
    try:
        updates = read_updates(
            args.file,
            [Target.of(codecs[r]) for r in args.relation],
            -1 if args.delete else 1,
            columns=parse_columns(args.columns) if args.columns else None,
            header=args.header,
            separator=args.separator,
            both_directions=args.both_directions,
            fraction=args.sample,
            seed=args.seed,
        )
    except ValueError as err:  # InputError: the file (its name, line and what was expected); ValueError: the options
        raise CommandError(str(err)) from err
    if args.encoding == "confluent":
        from processor.wire import RegistryClient, WireCodec

        registry = RegistryClient(args.schema_registry)
        codecs = {name: WireCodec.for_relation(name, registry) for name in args.relation}
        for codec in codecs.values():  # now: a registry that cannot be reached is one line (RegistryError, exit 1)
            codec.register()
    require_broker(args.bootstrap)
    create_topics(args.bootstrap, args.relation)
    producer = UpdateProducer(args.bootstrap, codecs)
    with ProgressBar("produce", len(updates), unit="updates") as bar:
        for start in range(0, len(updates), 10_000):
            bar.advance(producer.send_all(updates[start : start + 10_000]))
        producer.flush()
    print(f"produced {producer.sent:,} updates in {time.monotonic() - started:.1f}s")
    return 0
