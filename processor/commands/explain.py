"""``ivm explain QUERY``: classify a query, plan its maintenance and state the guarantee."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "explain",
        help="classify a query and show the engine, plan and guarantee",
        description="Classify a query (acyclic, free-connex, hierarchical, q-hierarchical, weak-q-hierarchical), "
        "choose the engine for the given update patterns and state its guarantee and lower bound. "
        "QUERY is a rule 'Q(a) :- R(a,b), S(b)' or SQL 'SELECT ... FROM ...'.",
    )
    p.add_argument("query", help="the query, as a rule or as SQL")
    p.add_argument(
        "--schema", action="append", default=[], metavar="SPEC",
        help="relation attributes: R=A,B (repeatable), a JSON object, or an .avsc file or directory "
        "(default for SQL: the registered Avro schemas in schemas/)",
    )  # fmt: skip
    p.add_argument(
        "--pattern", action="append", default=[], metavar="R=KIND",
        help="update pattern: R=insert-only, R=fifo, R=arbitrary, or R+S=fifo for joint FIFO (repeatable); "
        "relations not named are arbitrary",
    )  # fmt: skip
    p.add_argument("--eps", type=float, default=None, help="IVM^eps heavy/light threshold exponent (default 0.5)")
    p.add_argument("--engine", default=None, help="override the engine choice (e.g. first_order, ivm_eps, fivm)")
    p.add_argument("--json", action="store_true", help="print the analysis as JSON")
    return p


def read_schema(specs: list[str]) -> dict[str, list[str]] | None:
    """``R=A,B`` items, JSON objects, or Avro schema files/directories, merged."""
    from ivm.query.schemas import load_avro_schemas

    if not specs:
        return None
    schema: dict[str, list[str]] = {}
    for spec in specs:
        text = spec.strip()
        if text.startswith("{"):
            schema.update({k: list(v) for k, v in json.loads(text).items()})
        elif Path(text).exists():
            path = Path(text)
            if path.suffix == ".json":
                schema.update({k: list(v) for k, v in json.loads(path.read_text()).items()})
            else:
                schema.update(load_avro_schemas(path))
        elif "=" in text or ":" in text:
            name, attrs = text.split("=", 1) if "=" in text else text.split(":", 1)
            schema[name.strip()] = [a.strip() for a in attrs.split(",") if a.strip()]
        else:
            raise ValueError(f"cannot read schema {spec!r}: use R=A,B, a JSON object, or an .avsc path")
    return schema


def run(args: argparse.Namespace) -> int:
    from ivm.query.explain import explain, render_text
    from ivm.query.parse import QuerySyntaxError
    from ivm.query.patterns import parse_patterns

    try:
        schema = read_schema(args.schema)
        patterns = parse_patterns(args.pattern)
        result = explain(args.query, patterns, eps=args.eps, engine=args.engine, schema=schema)
    except (QuerySyntaxError, ValueError) as error:
        print(f"ivm explain: {error}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=2, ensure_ascii=False) if args.json else render_text(result))
    return 0
