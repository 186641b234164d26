"""``ivm explain QUERY`` or ``ivm explain -c CONFIG QUERYNAME``: classify a query, plan its maintenance
and state the guarantee.

Both forms build the view the way ``ivm run`` does (:func:`ivm.processor.planning.maintain_query`,
:func:`ivm.processor.planning.plan_pipeline`), so explain refuses what run refuses (exit 2, one line
per reason): an ``--engine`` that cannot serve the query, an ``--eps`` outside [0, 1] or for an
engine without one, a ``--pattern`` naming a relation the query does not use.
"""

from __future__ import annotations

import argparse
import json
import re
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
        "(default for SQL: the relation schemas of schemas/relations/, or of $IVM_SCHEMAS/relations/)",
    )  # fmt: skip
    p.add_argument(
        "--pattern", action="append", default=[], metavar="R=KIND",
        help="update pattern: R=insert-only, R=fifo, R=delete-only, R=arbitrary, or R+S=fifo for joint FIFO "
        "(repeatable); relations not named are arbitrary",
    )  # fmt: skip
    p.add_argument(
        "--eps", type=float, default=None,
        help="IVM^eps heavy/light threshold exponent in [0, 1] (default 0.5; only for IVM^eps engines)",
    )  # fmt: skip
    p.add_argument("--engine", default=None, help="override the engine choice (e.g. first_order, ivm_eps, fivm)")
    p.add_argument(
        "--json", action="store_true",
        help="print the analysis as one JSON object (the fields of the text form; numbers exact, no NaN)",
    )  # fmt: skip
    return p


def read_schema(specs: list[str]) -> dict[str, list[str]] | None:
    """``R=A,B`` items, JSON objects, or Avro schema files/directories, merged; ``None`` if none given.

    A spec that does not read is a ``ValueError`` naming it (and the file): a path that does
    not exist, a file that is not JSON, an ``.avsc`` file with no relation update record.
    """
    if not specs:
        return None
    schema: dict[str, list[str]] = {}
    for spec in specs:
        text = spec.strip()
        if text.startswith("{"):
            schema.update(_json_schema(text, f"--schema {text}"))
        elif Path(text).exists():
            path = Path(text)
            if path.suffix == ".json":
                schema.update(_json_schema(_read(path), f"--schema {text}"))
            else:
                schema.update(avro_schemas(path))
        elif text.endswith((".avsc", ".json")) or "/" in text:
            raise ValueError(f"--schema {text}: no such file or directory")
        elif "=" in text or ":" in text:
            name, attrs = text.split("=", 1) if "=" in text else text.split(":", 1)
            schema[name.strip()] = [a.strip() for a in attrs.split(",") if a.strip()]
        else:
            raise ValueError(f"--schema {spec}: use R=A,B, a JSON object, or an .avsc file or folder")
    return schema


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as err:
        raise ValueError(f"--schema {path}: {(err.strerror or str(err)).lower()}") from None


def _json_schema(text: str, where: str) -> dict[str, list[str]]:
    """``{"R": ["A", "B"], ...}`` from JSON text; ``ValueError`` naming ``where`` otherwise."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"{where}: not JSON: {err}") from None
    if not isinstance(data, dict) or not all(
        isinstance(v, list) and all(isinstance(a, str) for a in v) for v in data.values()
    ):
        raise ValueError(f'{where}: expected an object of attribute lists, {{"R": ["A", "B"]}}')
    return {k: list(v) for k, v in data.items()}


def avro_schemas(path: Path) -> dict[str, list[str]]:
    """Relation name -> attributes of the relation update records in an ``.avsc`` file or a folder of them.

    ``ValueError`` naming the file for one that is not JSON, or, given as a file, has no relation
    update record (an Avro record with a ``mult`` field).
    """
    from ivm.query.schemas import load_avro_schemas

    files = sorted(path.rglob("*.avsc")) if path.is_dir() else [path]
    found: dict[str, list[str]] = {}
    for file in files:
        try:
            json.loads(_read(file))
            relations = load_avro_schemas(file)
        except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as err:
            what = "not JSON" if isinstance(err, json.JSONDecodeError) else "not an Avro schema"
            where = f"--schema {path}: {file}" if path.is_dir() else f"--schema {file}"
            raise ValueError(f"{where}: {what}: {err}") from None
        if not relations and not path.is_dir():
            raise ValueError(
                f"--schema {path}: not a relation update schema (an Avro record with the attributes and 'mult')"
            )
        found.update(relations)
    return found


def default_schema() -> dict[str, list[str]]:
    """The relations of SQL queries given no ``--schema``: the schemas folder's ``relations/``
    (``$IVM_SCHEMAS``, else the checkout's ``schemas/``), wherever ``ivm`` runs from."""
    from ivm.processor.codecs.avro import schemas_dir

    folder = schemas_dir() / "relations"
    return avro_schemas(folder) if folder.is_dir() else {}


def is_sql(text: str) -> bool:
    """Whether the query text is SQL (as :func:`ivm.query.parse.parse` tells it) rather than a rule."""
    return re.match(r"\s*(with\b|select\b|\()", text, re.IGNORECASE) is not None


_FLAGS = {"engine": "--engine", "eps": "--eps", "patterns": "--pattern"}


def run(args: argparse.Namespace) -> int:
    from ivm.query.explain import render_text

    result = _explain_configured(args) if getattr(args, "config", None) else _explain_query(args)
    if args.json:
        from ivm.processor.codecs.avro import json_value

        print(json.dumps(json_value(result), indent=2, ensure_ascii=False, allow_nan=False))
    else:
        print(render_text(result))
    return 0


def _explain_query(args: argparse.Namespace) -> dict:
    """``view.explain()`` of the view ``ivm run`` would build for QUERY with these options.

    What ``ivm run`` would refuse raises: a :class:`~ivm.query.parse.QuerySyntaxError` (the
    query, with its line and column), or a :class:`~ivm.processor.cli.CommandError` naming the option.
    """
    from ivm.processor.cli import CommandError
    from ivm.processor.planning import Refused, maintain_query
    from ivm.query.parse import QuerySyntaxError, parse

    if not args.query:
        raise CommandError("give a QUERY, or -c CONFIG and a query name")
    try:
        schema = read_schema(args.schema)
        if schema is None and is_sql(args.query):
            schema = default_schema()
        query = parse(args.query, schema)
        view = maintain_query(query, args.engine or "auto", args.eps, args.pattern)
    except QuerySyntaxError:
        raise
    except Refused as error:
        raise CommandError(f"{_FLAGS[error.key]}: {error}" if error.key in _FLAGS else str(error)) from error
    except ValueError as error:  # a --schema or --pattern that does not read
        raise CommandError(str(error)) from error
    return view.explain()


def _explain_configured(args: argparse.Namespace) -> dict:
    """The configured query's ``view.explain()`` as ``ivm run`` plans it (options overridden).

    A configuration finding raises :class:`~ivm.processor.config.ConfigError` (one line each).
    """
    import dataclasses

    from ivm.processor.cli import CommandError
    from ivm.processor.config import load_config
    from ivm.processor.planning import plan_pipeline

    if args.schema:
        raise CommandError("--schema does not apply with -c: the configuration names the relation schemas")
    config = load_config(args.config)
    names = [q.name for q in config.queries]
    name = args.query if args.query else (names[0] if len(names) == 1 else None)
    if name not in names:
        what = f"no query {name!r} in {args.config}" if name else f"{args.config} has several queries"
        raise CommandError(f"{what}; give one of: {', '.join(names)}")
    q = config.queries[names.index(name)]
    q = dataclasses.replace(
        q,
        engine=args.engine or q.engine,
        eps=args.eps if args.eps is not None else q.eps,
        patterns=(*q.patterns, *args.pattern),
    )
    plan = plan_pipeline(dataclasses.replace(config, queries=(q,)))
    return dict(plan.query(name).explain)
