"""``ivm produce``: load a file (CSV, JSON lines, Avro, an edge list) into relation topics as Avro updates."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from ivm.processor.cli import CommandError

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
DEFAULT_PACK = 500  # updates per packed record (--pack)

USAGE = """\
ivm produce [-c CONFIG] RELATION FILE|- [options]
       ivm produce [-c CONFIG] FILE|- -r RELATION [-r RELATION ...] [options]"""

DESCRIPTION = """\
Each input row becomes an update of the relation keyed by the tuple, encoded as the pipeline decodes it:
an insert (+1), a delete (-1) with --delete, or the row's own multiplicity from a 'mult' column.
The whole input is read and checked before anything is sent: an input with an error sends nothing.

Relations: with -c CONFIG, the configuration's [[relations]]: each relation's schema, topic (--topic
overrides it) and encoding (plain Avro, or the Confluent wire format with [kafka] schema_registry);
the broker is the configuration's [kafka] bootstrap unless --bootstrap-server.  Without -c, the .avsc
files of the schemas folder's relations/ ($IVM_SCHEMAS, else the checkout's schemas/), topic = the
relation's name, --encoding and --schema-registry say how to encode.  Topics are created if missing.

Input: FILE, plain or gzipped (by its content), or - for standard input, which is read whole into
memory and checked before anything is sent (buffered, not streamed).  The format is --format's, else
by the file's extension: .csv/.tsv csv, .jsonl/.ndjson jsonl, .avro avro, anything else (.txt,
.edges, ...) edges.  In the FILE -r RELATION form, .csv/.tsv files are read as edges (as this form
always read them) unless --format csv.  Standard input: jsonl if it starts with '{', avro if it
starts with Avro's magic bytes, else csv (RELATION FILE) or edges (FILE -r).
  csv    a header line naming the columns: each an attribute of the relation (every attribute, except
         those with a schema default) or 'mult'; comma-separated (tab-separated if the header has tabs
         and no comma), CSV quoting; blank lines, and # or % comment lines before the header, skipped.
  jsonl  one JSON object per line, keyed by the attributes (and optionally 'mult'); blank lines skipped.
  avro   an Avro container file of records with the attributes (and optionally 'mult').
  edges  an edge list or CSV as SNAP and KONECT write them: '#'/'%' comments; tab, space or comma
         separated; a header naming the attributes (or --header/--skip-header/--no-header/--columns);
         extra columns ignored.
Values are typed by the relation's Avro schema: int, long (integers), float, double, string, boolean
(true/false/1/0), bytes (base64, RFC 4648, padded), a nullable union ["null", T] (an empty field or
'null' in text, null in JSON), timestamp-millis/-micros (ISO-8601 text, UTC when it has no offset, or
an epoch number in the type's unit) and date (ISO-8601, or days since 1970-01-01).
Multiplicities: 'mult' is any non-zero integer (0 is an error); --delete negates every row's
multiplicity (-1 for a row without one).

Packed relations (encoding avro-packed or confluent-packed, or --pack N without -c): up to --pack N updates
(default 500) of a relation per Kafka record, each tuple's updates in one bucket per partition of the topic,
so they stay in one partition and in order (README: packed records).

--rate N sends at most N updates a second (a token bucket); a progress bar is drawn on stderr when it
is a terminal; the last line gives the counts.
Errors (one line each, exit 2): a value that does not fit its field, an unknown column or field, a
missing attribute (each naming the file, the line or Avro record number, and the field: 'r.csv: line
12, field B: 'x' is not a long'), a file that does not exist, a relation that is not configured, a
schema file that does not read.  A broker or schema registry that cannot be reached: exit 1, within
seconds, naming the address.
"""


#: ivm.processor.kafka.produce's FORMATS and SEPARATORS (tests/unit/test_packaging.py checks they agree): that module
#: imports fastavro, an extra's, and `ivm --help` builds this parser on a base install
FORMATS = ("csv", "jsonl", "avro", "edges")
SEPARATORS = ("auto", "comma", "tab", "whitespace")


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "produce",
        help="load a CSV, JSON lines, Avro or edge-list file into relation topics",
        usage=USAGE,
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "inputs", nargs="+", metavar="[RELATION] FILE",
        help="the relation and the input file (- for standard input), or the file alone with -r",
    )  # fmt: skip
    p.add_argument("--config", "-c", help="the pipeline configuration: relations' schemas, topics, encodings, broker")
    p.add_argument(
        "--relation", "-r", action="append",
        help="relation to load into (repeat for several, e.g. -r R -r S -r T), instead of RELATION",
    )  # fmt: skip
    p.add_argument("--format", choices=FORMATS, help="the input's format (default: by the file's extension)")
    p.add_argument("--topic", help="the topic to produce to (default: the relation's configured topic, or its name)")
    p.add_argument(
        "--bootstrap-server", "--bootstrap", dest="bootstrap", metavar="HOST:PORT",
        help=f"Kafka bootstrap servers (default: the configuration's [kafka] bootstrap, else {DEFAULT_BOOTSTRAP})",
    )  # fmt: skip
    p.add_argument("--rate", type=float, metavar="N", help="send at most N updates a second (default: no limit)")
    p.add_argument("--delete", action="store_true", help="produce deletes: every row's multiplicity negated")
    p.add_argument(
        "--columns", metavar="COLS",
        help="edges: the columns of the relation's attributes, in order: 1-based positions or header names, "
        "comma-separated (default: the attributes' names if the file has a header, else the first columns)",
    )  # fmt: skip
    header = p.add_mutually_exclusive_group()
    header.add_argument(
        "--header", dest="header", action="store_const", const="names", default="auto",
        help="edges: the first non-comment line is a header naming the columns",
    )  # fmt: skip
    header.add_argument(
        "--skip-header", dest="header", action="store_const", const="skip",
        help="edges: skip the first non-comment line unread (a 'nodes edges' count line, or an unused header)",
    )  # fmt: skip
    header.add_argument(
        "--no-header", dest="header", action="store_const", const="none",
        help="edges: every non-comment line is data, even one that names the attributes",
    )  # fmt: skip
    p.add_argument(
        "--separator", choices=SEPARATORS, default="auto",
        help="field separator; auto: edges, comma if the first non-comment line has one, else tabs or spaces; "
        "csv, comma unless the header has tabs and no comma",
    )  # fmt: skip
    p.add_argument(
        "--both-directions", action="store_true", help="two-attribute relations: also load (v, u) for each (u, v)"
    )
    p.add_argument("--sample", type=float, default=1.0, help="keep each row with this probability")
    p.add_argument("--seed", type=int, default=0, help="seed of --sample")
    p.add_argument(
        "--encoding", choices=["avro", "confluent", "avro-packed", "confluent-packed"],
        help="without -c: plain Avro (default) or the Confluent wire format with --schema-registry; -packed: "
        "many updates per record (--pack)",
    )  # fmt: skip
    p.add_argument(
        "--pack", type=int, metavar="N",
        help="packed encodings (avro-packed, confluent-packed): up to N updates of a relation per Kafka record "
        f"(default {DEFAULT_PACK}); without -c, --pack alone means --encoding avro-packed",
    )  # fmt: skip
    p.add_argument("--schema-registry", help="URL of the Confluent-compatible registry API (overrides -c's)")
    p.add_argument(
        "--no-register", dest="register", action="store_false",
        help="confluent encoding: register no schema; write with the latest one registered under <topic>-key and "
        "<topic>-value, which must be the relation's schema (refused by name otherwise)",
    )  # fmt: skip
    return p


def relation_codecs(directory: Path | None = None) -> dict[str, Any]:
    """Every relation schema of ``directory`` (default: the schemas folder's ``relations/``) by relation name.

    A file that is not JSON, or not a relation update record (a record with an int or long
    ``mult``), is a :class:`~ivm.processor.cli.CommandError` (exit 2) with one line per such file.
    """
    from ivm.processor.codecs.avro import RelationCodec, load_schema, schemas_dir

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


def _inputs(args: argparse.Namespace) -> tuple[list[str], str, bool]:
    """``(relations, file, named)`` from the positionals and ``-r``; ``named``: the RELATION FILE form."""
    given = list(args.inputs)
    if args.relation:
        if len(given) != 1:
            raise CommandError(f"with -r, give one FILE, got {len(given)} ({' '.join(given)}): "
                               "use RELATION FILE or FILE -r RELATION, not both")  # fmt: skip
        return list(dict.fromkeys(args.relation)), given[0], False
    if len(given) != 2:
        raise CommandError(f"expected RELATION FILE (or FILE -r RELATION), got {' '.join(given)}")
    return [given[0]], given[1], True


def _configured(args: argparse.Namespace, relations: list[str]) -> tuple[dict[str, Any], dict[str, str], str]:
    """``(codecs, topics, bootstrap)`` of ``relations`` from the configuration ``-c``, as the pipeline decodes them."""
    from ivm.processor.codecs.avro import load_schema, uses_registry
    from ivm.processor.config import load_config
    from ivm.processor.pipeline import relation_codec

    config = load_config(args.config)
    if args.encoding:
        raise CommandError(f"--encoding: with -c the relation's encoding is the configuration's ({args.config})")
    if args.schema_registry:
        config = config.with_overrides(schema_registry=args.schema_registry)
    configured = {r.name: r for r in config.relations}
    unknown = [r for r in relations if r not in configured]
    if unknown:
        raise CommandError(f"relation {unknown[0]} is not in {args.config} (its relations: {', '.join(configured)})")
    topics = {r: args.topic or configured[r].topic for r in relations}
    codecs: dict[str, Any] = {}
    for r in relations:
        rel = configured[r]
        if uses_registry(rel.encoding) and not config.schema_registry:
            raise CommandError(f"relation {r} is encoded {rel.encoding!r}: it needs [kafka] schema_registry in "
                               f"{args.config} or --schema-registry")  # fmt: skip
        schema = load_schema(rel.schema_file())
        codecs[r] = relation_codec(config, topics[r], schema, rel.encoding, rel.name, register=args.register)
    return codecs, topics, config.kafka.with_bootstrap(args.bootstrap)


def _unconfigured(args: argparse.Namespace, relations: list[str]) -> tuple[dict[str, Any], dict[str, str], str]:
    """``(codecs, topics, bootstrap)`` of ``relations`` from the schemas folder and the command line."""
    from ivm.processor.codecs.avro import PackedCodec, is_packed, schemas_dir, uses_registry

    codecs = relation_codecs()
    unknown = [r for r in relations if r not in codecs]
    if unknown:
        known = ", ".join(sorted(codecs)) or "none"
        raise CommandError(f"no schema for {', '.join(unknown)} in {schemas_dir() / 'relations'} (known: {known})")
    topics = {r: args.topic or r for r in relations}
    encoding = args.encoding or ("avro-packed" if args.pack is not None else "avro")
    if uses_registry(encoding):
        if not args.schema_registry:
            raise CommandError(f"--encoding {encoding} needs --schema-registry URL")
        from ivm.processor.codecs.confluent import PackedWireCodec, RegistryClient, WireCodec

        registry = RegistryClient(args.schema_registry)
        wire = PackedWireCodec if is_packed(encoding) else WireCodec
        return (
            {r: wire.for_relation(r, registry, topics[r], register=args.register) for r in relations},
            topics,
            args.bootstrap or DEFAULT_BOOTSTRAP,
        )
    if is_packed(encoding):
        return {r: PackedCodec(codecs[r]) for r in relations}, topics, args.bootstrap or DEFAULT_BOOTSTRAP
    return {r: codecs[r] for r in relations}, topics, args.bootstrap or DEFAULT_BOOTSTRAP


def run(args: argparse.Namespace) -> int:
    from ivm.processor.codecs.confluent import WireCodec
    from ivm.processor.config import TopicSettings, load_config
    from ivm.processor.kafka.produce import (
        InMemory,
        PackedProducer,
        Target,
        UpdateProducer,
        format_of,
        parse_columns,
        read_updates,
        send_updates,
    )
    from ivm.processor.kafka.topics import create_kind, require_broker
    from ivm.processor.operations.progress import ProgressBar

    started = time.monotonic()
    relations, file, named = _inputs(args)
    if args.rate is not None and not args.rate > 0:
        raise CommandError(f"--rate: expected a positive number of updates a second, got {args.rate:g}")
    if args.topic and len(relations) != 1:
        raise CommandError(f"--topic names one topic; {len(relations)} relations given ({', '.join(relations)})")
    configure = _configured if args.config else _unconfigured
    codecs, topics, bootstrap = configure(args, relations)
    packed = [r for r in relations if getattr(codecs[r], "packed", False)]
    if args.pack is not None and (args.pack < 1 or len(packed) < len(relations)):
        one = next(r for r in relations if r not in packed) if len(packed) < len(relations) else None
        raise CommandError(
            f"--pack: expected a positive number of updates per record, got {args.pack}" if one is None else
            f"--pack: relation {one} is encoded one update per record ({args.config}); --pack is for the "
            "packed encodings (avro-packed, confluent-packed)"
        )  # fmt: skip
    plain = [r for r in relations if not isinstance(codecs[r], WireCodec)]
    if not args.register and plain:
        raise CommandError(f"--no-register: only for the confluent encoding; relation {plain[0]} is plain Avro "
                           "(no registry involved)")  # fmt: skip
    try:
        targets = [Target.of(codecs[r]) for r in relations]
    except ValueError as err:  # an attribute type files cannot give
        raise CommandError(str(err)) from err
    source: Any = InMemory(sys.stdin.buffer.read()) if file == "-" else file
    form = args.format or format_of(source, default="csv" if named else "edges")
    if not named and args.format is None and form == "csv":
        form = "edges"  # the FILE -r form reads .csv files as it always did
    try:
        updates = read_updates(
            source,
            targets,
            -1 if args.delete else 1,
            columns=parse_columns(args.columns) if args.columns else None,
            header=args.header,
            separator=args.separator,
            both_directions=args.both_directions,
            fraction=args.sample,
            seed=args.seed,
            format=form,
        )
    except ValueError as err:  # InputError: the file (its name, line and field); ValueError: the options
        raise CommandError(str(err)) from err
    for codec in codecs.values():  # now: a registry that cannot be reached is one line (RegistryError, exit 1)
        if isinstance(codec, WireCodec):
            codec.register()
    require_broker(bootstrap)
    # a missing relation topic: as ivm run creates it ([topics.relations] of -c, else the cluster's defaults)
    settings = load_config(args.config).topics.relations if args.config else TopicSettings()
    create_kind(bootstrap, sorted(set(topics.values())), settings)
    if packed:  # each tuple's updates in one bucket per partition: its order holds (PackedProducer)
        from ivm.processor.kafka.topics import partitions_of

        counts = {t: len(p) for t, p in partitions_of(bootstrap, sorted(set(topics.values()))).items()}
        producer: UpdateProducer = PackedProducer(
            bootstrap, codecs, topics, pack=args.pack or DEFAULT_PACK, buckets=counts
        )
    else:
        producer = UpdateProducer(bootstrap, codecs, topics)
    sending = time.monotonic()
    bar = ProgressBar("produce", len(updates), unit="updates") if sys.stderr.isatty() else None
    try:
        send_updates(producer, updates, rate=args.rate, progress=bar.advance if bar else None)
        producer.flush()
    finally:
        if bar is not None:
            bar.close()
    done = time.monotonic()
    inserts = sum(1 for u in updates if u.mult > 0)
    rate = len(updates) / (done - sending) if done > sending else 0.0
    records = f" in {producer.records:,} packed records" if isinstance(producer, PackedProducer) else ""
    print(f"produced {producer.sent:,} updates{records} ({inserts:,} inserts, {len(updates) - inserts:,} deletes) "
          f"to {', '.join(dict.fromkeys(topics.values()))} from {source} ({form}) in {done - started:.1f}s "
          f"(sending: {done - sending:.1f}s, {rate:,.0f} updates/s)")  # fmt: skip
    return 0
