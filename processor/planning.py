"""One planning path for ``ivm explain``, ``ivm check`` and ``ivm run``.

:func:`build_view` turns one configured query into its maintained view,
exactly as the running pipeline does (``Pipeline._maintain`` calls it);
:func:`maintain_query` is its core, shared with ``ivm explain QUERY``: it
refuses what the runtime would refuse (an engine that cannot serve the query,
an eps outside [0, 1] or for an engine without one, a pattern naming a
relation the query does not use) with the key to blame.  :func:`plan_pipeline`
plans a whole configuration without connecting to anything: it reads the
relation schemas, builds every query's view on an empty database and reports
every failure as a :class:`~ivm.processor.config.ConfigError` line naming the key.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ivm
from ivm.engines import ENGINES
from ivm.patterns.windows import Windows
from ivm.policy import Policy
from ivm.processor.config import ConfigError, PipelineConfig, QueryConfig, RelationConfig
from ivm.query.lifted import Lifted, lifted_positions, ordered_positions
from ivm.query.model import Query
from ivm.query.parse import QuerySyntaxError


class Refused(ValueError):
    """The runtime would refuse this query's options; ``key`` names the option to blame
    (``query``, ``engine``, ``eps``, ``patterns``, ``model``, ``label``)."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


def request_errors(query: Query, engine: str, eps: float | None, patterns: Sequence[str]) -> list[Refused]:
    """What ``ivm.maintain`` would refuse, or silently ignore, in a query's engine, eps and patterns.

    Validates: the engine is ``auto`` or registered; eps is a number in
    [0, 1] and, with a named engine, one that takes an eps; each pattern reads
    ``R=level`` and names only relations of the query.  Whether the engine can
    serve the query, the engine itself says (:func:`maintain_query`).
    """
    from ivm.query.patterns import parse_patterns

    found: list[Refused] = []
    if engine != "auto" and engine not in ENGINES:
        found.append(Refused("engine", f"unknown engine {engine!r}; known: auto, {', '.join(sorted(ENGINES))}"))
    if eps is not None:
        if isinstance(eps, bool) or not isinstance(eps, int | float) or not 0 <= eps <= 1:
            found.append(Refused("eps", f"eps must be a number in [0, 1], got {eps!r}"))
        elif engine in ENGINES and not _takes_eps(engine):
            found.append(Refused("eps", f"engine {engine!r} has no eps (only IVM^eps engines take one)"))
    for pattern in patterns:
        try:
            parse_patterns([pattern])
        except ValueError as err:
            found.append(Refused("patterns", str(err)))
            continue
        named = {n.strip() for n in pattern.split("=", 1)[0].split("+") if n.strip()}
        unused = sorted(named - set(query.relations))
        if unused:
            found.append(
                Refused(
                    "patterns",
                    f"pattern {json.dumps(pattern)} names {', '.join(unused)}, which the query does not use "
                    f"(it uses {', '.join(sorted(query.relations))})",
                )
            )
    return found


def maintain_query(
    query: Query,
    engine: str = "auto",
    eps: float | None = None,
    patterns: Sequence[str] = (),
    *,
    implied: Sequence[str] = (),
    policy: Policy | None = None,
    shards: int = 1,
    options: Mapping[str, Any] | None = None,
) -> Any:
    """``ivm.maintain`` after :func:`request_errors`; raises :class:`Refused` naming the key
    (an ``EngineRefused`` from the engine blames ``engine`` if it was named, else ``query``).

    ``patterns`` are the declared ones (checked), ``implied`` those a window
    adds.  An eps under ``engine = "auto"`` that the chosen engine does not
    take is refused too: it would be silently unused.
    """
    found = request_errors(query, engine, eps, patterns)
    if found:
        raise found[0]
    every = [*patterns, *implied]
    extra: dict[str, Any] = {"eps": eps} if eps is not None else {}
    if options:
        extra["options"] = dict(options)
    try:
        view = ivm.maintain(query, engine=engine, policy=policy, shards=shards, patterns=every or None, **extra)
    except ValueError as err:  # EngineRefused, or an option the named engine does not take
        raise Refused("engine" if engine != "auto" else "query", str(err)) from None
    chosen = engine_of(view)
    if eps is not None and not _takes_eps(chosen):
        raise Refused("eps", f"eps {eps} is not used: the planner chose engine {chosen!r}, which has no eps")
    return view


def build_view(
    config: PipelineConfig,
    q: QueryConfig,
    schema_of: Mapping[str, Sequence[str]],
    windows: Windows | None,
    policy: Policy,
) -> Any:
    """The maintained view of query ``q`` over relations with attributes ``schema_of``.

    Raises ``QuerySyntaxError`` (the query text), ``ValueError`` (a relation
    with no configured topic) or :class:`Refused`, a ``ValueError`` naming the
    option the runtime refuses (:func:`maintain_query`).
    """
    query = ivm.parse(q.query, schema_of)
    missing = set(query.relations) - set(schema_of)
    if missing:
        raise ValueError(f"query {q.name!r} uses relations {sorted(missing)} with no configured topic")
    implied: list[str] = []
    if windows is not None:  # a window makes its relations (jointly) FIFO
        implied = [p for p in windows.patterns() if set(p.split("=")[0].split("+")) <= set(query.relations)]
    options: dict[str, Any] | None = None
    engine = q.engine
    if q.model == "chow_liu":
        engine = "fivm" if engine == "auto" else engine
        options = {"categorical": query.aggregate.variables}
    view = maintain_query(
        query,
        engine,
        q.eps,
        list(q.patterns),
        implied=implied,
        policy=policy,
        shards=q.shards or config.shards,
        options=options,
    )
    lifted = lifted_positions(query, view.engine.lifted_variables)
    types = _field_types(config, set(lifted) | set(ordered_positions(query)))
    wrong = not_numbers(lifted, schema_of, types) + not_one_kind(query, schema_of, types)
    if wrong:
        raise Refused("query", "; ".join(wrong))
    return view


def engine_of(view: Any) -> str:
    """The name of the engine maintaining ``view`` (of its first shard if sharded)."""
    shards = getattr(view, "shards", None)
    return (shards[0] if shards else view).engine.name


def _takes_eps(engine: str) -> bool:
    return engine in ENGINES and "eps" in inspect.signature(ENGINES[engine].__init__).parameters


@dataclass(frozen=True)
class RelationPlan:
    """A configured relation with its schema read."""

    config: RelationConfig
    schema_file: Path
    attributes: tuple[str, ...]

    @property
    def window(self) -> str | None:
        """The sliding window in words, or ``None``."""
        rel = self.config
        if rel.window_count is None and rel.window_seconds is None:
            return None
        size = f"last {rel.window_count} tuples" if rel.window_count is not None else f"last {rel.window_seconds} s"
        return size + (f", shared by window group {rel.window_group!r}" if rel.window_group else "")


@dataclass(frozen=True)
class QueryPlan:
    """A configured query, parsed, with the view that maintains it and its ``view.explain()``."""

    config: QueryConfig
    query: Query
    view: Any
    explain: Mapping[str, Any]

    @property
    def engine(self) -> str:
        return engine_of(self.view)

    @property
    def guarantee(self) -> Mapping[str, Any]:
        """``update``, ``delay``, ``space``, ``preprocessing`` (and ``amortized``, ``lower_bound``)."""
        return self.explain["guarantee"]

    @property
    def output_topics(self) -> list[str]:
        q = self.config
        return [q.result_topic, *([q.delta_topic] if self.query.free else []), *([q.model_topic] if q.model else [])]


@dataclass(frozen=True)
class PipelinePlan:
    """What ``ivm run`` would maintain: relations with their schemas, queries with their views."""

    config: PipelineConfig
    relations: tuple[RelationPlan, ...]
    queries: tuple[QueryPlan, ...]

    @property
    def topics(self) -> list[str]:
        """The input topics, one per relation."""
        return [r.config.topic for r in self.relations]

    @property
    def schemas(self) -> dict[str, tuple[str, ...]]:
        """Relation name -> attributes."""
        return {r.config.name: r.attributes for r in self.relations}

    def query(self, name: str) -> QueryPlan:
        for q in self.queries:
            if q.config.name == name:
                return q
        raise KeyError(name)


#: Avro types whose values a ring lifts: numbers (booleans as 0 and 1)
_NUMERIC_AVRO = frozenset({"int", "long", "float", "double", "boolean"})


def _numeric_avro(avro_type: Any) -> bool:
    """Whether every value of a field of ``avro_type`` decodes to a number: the numeric primitives, or a
    ``decimal`` logical type (Python ``Decimal``); not a union (``null`` is no number), string, bytes, ..."""
    if isinstance(avro_type, dict):
        if avro_type.get("logicalType") == "decimal":
            return True
        if "logicalType" in avro_type:
            return False  # dates, times, uuids: not numbers to lift
        return _numeric_avro(avro_type.get("type"))
    return isinstance(avro_type, str) and avro_type in _NUMERIC_AVRO


def _field_types(config: PipelineConfig, relations: set[str]) -> dict[str, dict[str, Any]]:
    """The Avro type of each field of the named relations' schemas (those that can be read)."""
    from ivm.processor.codecs.avro import load_schema

    out = {}
    for rel in config.relations:
        if rel.name in relations:
            try:
                out[rel.name] = {f["name"]: f["type"] for f in load_schema(rel.schema_file())["fields"]}
            except (OSError, ValueError, KeyError, TypeError):
                continue  # (plan_pipeline reports an unreadable schema by its key)
    return out


def not_numbers(
    lifted: Mapping[str, Sequence[Lifted]],
    attributes: Mapping[str, Sequence[str]],
    types: Mapping[str, Mapping[str, Any]],
) -> list[str]:
    """One line per attribute the view lifts (SUM, AVG, COVAR but categorical ones: :mod:`ivm.query.lifted`)
    whose schema field may hold something other than a number (a string, a nullable union, ...):
    every such update would be refused, so the query is refused at planning, naming the field."""
    out = []
    for relation, found in lifted.items():
        if relation not in types:
            continue
        for x in found:
            field = attributes[relation][x.position]
            avro_type = types[relation].get(field)
            if not _numeric_avro(avro_type):
                out.append(
                    f"{x.aggregate} lifts {x.variable}, bound to {relation}.{field} of Avro type "
                    f"{json.dumps(avro_type)}: not a number type (int, long, float, double, boolean or decimal)"
                )
    return out


def not_one_kind(
    query: Query, attributes: Mapping[str, Sequence[str]], types: Mapping[str, Mapping[str, Any]]
) -> list[str]:
    """One line per attribute MIN or MAX compares whose schema field is a union (e.g. nullable): its
    values could be of two kinds (``None`` and a number), which do not compare."""
    out = []
    for relation, found in ordered_positions(query).items():
        for x in found:
            field = attributes[relation][x.position]
            avro_type = types.get(relation, {}).get(field)
            if isinstance(avro_type, list):
                out.append(
                    f"{x.aggregate} compares {x.variable}, bound to {relation}.{field} of Avro type "
                    f"{json.dumps(avro_type)}: a union's values need not compare (null is not ordered); "
                    "MIN and MAX need a field of one type"
                )
    return out


def placement_errors(config: PipelineConfig) -> list[str]:
    """What ``[processor] placement = "executors"`` cannot serve (``ivm.processor.placement``), one line each."""
    if config.placement != "executors":
        return []
    errors = []
    windowed = [r.name for r in config.relations if r.window_count is not None or r.window_seconds is not None]
    if windowed:
        errors.append(
            f'[processor] placement: "executors" cannot keep sliding windows (relations {windowed}): a window '
            f'expires tuples in the order of the whole input, which no slice sees; use placement = "driver"'
        )
    if not config.exactly_once:
        errors.append(
            '[processor] placement: "executors" needs exactly_once = true: the slices apply a batch on top of the '
            "previous committed one, and rebuild from the committed positions"
        )
    return errors


def plan_pipeline(config: PipelineConfig) -> PipelinePlan:
    """Plan every query of ``config`` without connecting to anything; raise :class:`ConfigError`.

    Validates, one line per finding naming the key: each relation's schema
    file exists, is JSON and is a relation update schema
    (``RelationCodec.from_schema``); each query parses against those schemas,
    names configured relations, and ``ivm.maintain`` accepts its engine, eps
    and patterns (:func:`maintain_query`); a model's query is a ``COVAR``
    aggregate and a regression's label one of its variables (the pipeline's
    own model check).
    """
    from ivm.processor.codecs.avro import RelationCodec, load_schema
    from ivm.processor.pipeline import _model, _windows

    errors: list[str] = []
    relations: list[RelationPlan] = []
    unread: set[str] = set()
    for rel in config.relations:
        where = f"[relations.{rel.name}] schema"
        path = rel.schema_file()
        try:
            codec = RelationCodec.from_schema(load_schema(path))
        except FileNotFoundError:
            errors.append(f"{where}: schema file {path} does not exist")
        except (OSError, json.JSONDecodeError) as err:
            errors.append(f"{where}: cannot read {path}: {err}")
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            errors.append(f"{where}: {path} is not a relation update schema: {err}")
        else:
            relations.append(RelationPlan(rel, path, tuple(codec.attributes)))
            continue
        unread.add(rel.name)
    schema_of = {r.config.name: list(r.attributes) for r in relations}
    try:
        windows = _windows(config)
    except (ValueError, TypeError) as err:
        errors.append(f"[relations] window: {err}")
        windows = None
    errors += placement_errors(config)
    queries: list[QueryPlan] = []
    for q in config.queries:
        where = f"[queries.{q.name}]"
        try:
            query = ivm.parse(q.query, schema_of)
            if set(query.relations) & unread:
                continue  # its relation's schema is reported above
            view = build_view(config, q, schema_of, windows, config.policy)
        except QuerySyntaxError as err:
            errors.append(f"{where} query: {err}")
            continue
        except Refused as err:
            errors.append(f"{where} {err.key}: {err}")
            continue
        except ValueError as err:
            errors.append(f"{where} query: {err}")
            continue
        if q.model:
            try:
                _model(q, view)
            except ValueError as err:
                key = "label" if q.label is not None and repr(q.label) in str(err) else "model"
                errors.append(f"{where} {key}: {str(err).removeprefix(f'query {q.name!r}: ')}")
                continue
        queries.append(QueryPlan(q, view.query, view, view.explain()))
    if errors:
        raise ConfigError(errors)
    return PipelinePlan(config, tuple(relations), tuple(queries))
