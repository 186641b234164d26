"""``ivm produce``: load an edge file or a CSV into relation topics as Avro updates."""

from __future__ import annotations

import argparse
import sys
import time

from processor.codec import load_relation_codecs


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "produce",
        help="load an edge file or CSV into relation topics",
        description="Each input tuple becomes an Avro update keyed by the tuple: an insert (+1), "
        "or a delete (-1) with --delete.",
    )
    p.add_argument("file", help="an edge list ('u v' per line) or a CSV file with a header")
    p.add_argument("--bootstrap", default="127.0.0.1:9092", help="Kafka bootstrap servers")
    p.add_argument(
        "--relation", "-r", action="append", required=True,
        help="relation to load into (repeat for several, e.g. -r R -r S -r T)",
    )  # fmt: skip
    p.add_argument("--format", choices=["edges", "csv"], help="input format (default: from the file suffix)")
    p.add_argument("--both-directions", action="store_true", help="edges: also load (v, u) for each (u, v)")
    p.add_argument("--delete", action="store_true", help="produce deletes (-1) instead of inserts")
    p.add_argument("--sample", type=float, default=1.0, help="keep each tuple with this probability")
    p.add_argument("--seed", type=int, default=0, help="seed of --sample")
    p.add_argument(
        "--encoding", choices=["avro", "confluent"], default="avro",
        help="plain Avro (schemas/) or the Confluent wire format with --schema-registry",
    )  # fmt: skip
    p.add_argument("--schema-registry", help="URL of the Confluent-compatible registry API")
    return p


def run(args: argparse.Namespace) -> int:
    from ivm.updates import Update
    from processor.produce import UpdateProducer, edge_updates, read_csv, read_edges, sample
    from processor.progress import ProgressBar
    from processor.topics import create_topics

    codecs = load_relation_codecs()
    if args.encoding == "confluent":
        if not args.schema_registry:
            print("ivm produce: --encoding confluent needs --schema-registry URL", file=sys.stderr)
            return 2
        from processor.wire import RegistryClient, WireCodec

        registry = RegistryClient(args.schema_registry)
        codecs = {name: WireCodec.for_relation(name, registry) for name in codecs}
    unknown = [r for r in args.relation if r not in codecs]
    if unknown:
        print(f"ivm produce: no schema for relations {unknown}; known: {sorted(codecs)}", file=sys.stderr)
        return 2
    fmt = args.format or ("csv" if args.file.endswith(".csv") else "edges")
    mult = -1 if args.delete else 1
    started = time.monotonic()
    create_topics(args.bootstrap, args.relation)
    producer = UpdateProducer(args.bootstrap, codecs)
    if fmt == "edges":
        edges = sample(read_edges(args.file), args.sample, args.seed)
        updates = list(edge_updates(edges, args.relation, mult, args.both_directions))
    else:
        updates = []
        for relation in args.relation:
            codec = codecs[relation]
            types = [int] * len(codec.attributes)
            rows = sample(read_csv(args.file, codec.attributes, types), args.sample, args.seed)
            updates += [Update(relation, row, mult) for row in rows]
    with ProgressBar("produce", len(updates), unit="updates") as bar:
        for start in range(0, len(updates), 10_000):
            bar.advance(producer.send_all(updates[start : start + 10_000]))
        producer.flush()
    print(f"produced {producer.sent:,} updates in {time.monotonic() - started:.1f}s")
    return 0
