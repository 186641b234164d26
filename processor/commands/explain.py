"""``ivm explain QUERY`` or ``ivm explain -c CONFIG QUERYNAME``: classify a query, plan its maintenance
and state the guarantee.

Both forms build the view the way ``ivm run`` does (:func:`processor.planning.maintain_query`,
:func:`processor.planning.plan_pipeline`), so explain refuses what run refuses (exit 2, one line
per reason): an ``--engine`` that cannot serve the query, an ``--eps`` outside [0, 1] or for an
engine without one, a ``--pattern`` naming a relation the query does not use.
"""

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
        "QUERY is a rule 'Q(a) :- R(a,b), S(b)' or SQL 'SELECT ... FROM ...'; with -c CONFIG, the name of a "
        "configured query (--engine, --eps and --pattern then override or add to its configuration). "
        "Exit 2 if ivm run would refuse the query with these options.",
    )
    p.add_argument("query", nargs="?", help="the query, as a rule or as SQL; with -c, a configured query's name")
    p.add_argument("--config", "-c", help="explain a query of this pipeline configuration (TOML), as ivm run plans it")
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
    p.add_argument(
        "--eps", type=float, default=None,
        help="IVM^eps heavy/light threshold exponent in [0, 1] (default 0.5; only for IVM^eps engines)",
    )  # fmt: skip
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


_FLAGS = {"engine": "--engine", "eps": "--eps", "patterns": "--pattern"}


def run(args: argparse.Namespace) -> int:
    from ivm.query.explain import render_text

    result = _explain_configured(args) if getattr(args, "config", None) else _explain_query(args)
    if result is None:
        return 2
    print(json.dumps(result, indent=2, ensure_ascii=False) if args.json else render_text(result))
    return 0


def _fail(message: str) -> None:
    print(f"ivm explain: {message}", file=sys.stderr)


def _explain_query(args: argparse.Namespace) -> dict | None:
    """``view.explain()`` of the view ``ivm run`` would build for QUERY with these options, or ``None``."""
    from ivm.query.parse import QuerySyntaxError, parse
    from processor.planning import Refused, maintain_query

    if not args.query:
        _fail("give a QUERY, or -c CONFIG and a query name")
        return None
    try:
        query = parse(args.query, read_schema(args.schema))
        view = maintain_query(query, args.engine or "auto", args.eps, args.pattern)
    except Refused as error:
        _fail(f"{_FLAGS[error.key]}: {error}" if error.key in _FLAGS else str(error))
        return None
    except (QuerySyntaxError, ValueError) as error:
        _fail(str(error))
        return None
    return view.explain()


def _explain_configured(args: argparse.Namespace) -> dict | None:
    """The configured query's ``view.explain()`` as ``ivm run`` plans it (options overridden), or ``None``."""
    import dataclasses

    from processor.commands.check import report
    from processor.config import ConfigError, load_config
    from processor.planning import plan_pipeline

    if args.schema:
        _fail("--schema does not apply with -c: the configuration names the relation schemas")
        return None
    try:
        config = load_config(args.config)
    except ConfigError as err:
        report(err, "explain")
        return None
    names = [q.name for q in config.queries]
    name = args.query if args.query else (names[0] if len(names) == 1 else None)
    if name not in names:
        what = f"no query {name!r} in {args.config}" if name else f"{args.config} has several queries"
        _fail(f"{what}; give one of: {', '.join(names)}")
        return None
    q = config.queries[names.index(name)]
    q = dataclasses.replace(
        q,
        engine=args.engine or q.engine,
        eps=args.eps if args.eps is not None else q.eps,
        patterns=(*q.patterns, *args.pattern),
    )
    try:
        plan = plan_pipeline(dataclasses.replace(config, queries=(q,)))
    except ConfigError as err:
        report(err, "explain")
        return None
    return dict(plan.query(name).explain)
