"""Incremental view maintenance: the engine library.

>>> view = maintain("Q() :- R(a,b), S(b,c), T(c,a)")
>>> _ = view.apply([("R", (1, 2), 1), ("S", (2, 3), 1), ("T", (3, 1), 1)])
>>> view.result()
1
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence

from ivm.engines import ENGINES, Engine, EngineRefused
from ivm.policy import Policy, policy_for
from ivm.query import Query, parse
from ivm.query.patterns import UpdatePatterns
from ivm.shards import HyperCube, ShardedView, per_atom_relations
from ivm.updates import Update
from ivm.view import Outcome, Rejected, View

__all__ = [
    "Engine",
    "EngineRefused",
    "Outcome",
    "Policy",
    "Query",
    "Rejected",
    "ShardedView",
    "Update",
    "View",
    "maintain",
    "parse",
]


def maintain(
    query: str | Query,
    *,
    engine: str = "auto",
    eps: float | None = None,
    schema: Mapping[str, Sequence[str]] | None = None,
    policy: Policy | None = None,
    patterns: UpdatePatterns | Mapping[str, str] | Sequence[str] | None = None,
    shards: int = 1,
    options: Mapping[str, object] | None = None,
) -> View | ShardedView:
    """Start maintaining ``query`` (rule syntax, or a parsed :class:`Query`).

    ``engine`` is ``"auto"`` (the planner chooses) or an engine name from
    :data:`ivm.engines.ENGINES`; an engine that cannot serve the query raises
    :class:`EngineRefused` with the reason.  ``patterns`` declares update
    patterns (``["R=insert-only", "R+S=fifo"]``, DESIGN §3): the planner uses
    them, and engines that monitor patterns (``propagation``) verify them; a
    relation declared ``delete-only`` gets its tuples from :meth:`View.load`
    (the initial database) and has every later insert refused.
    ``shards > 1`` splits the state into HyperCube shards (:mod:`ivm.shards`);
    AVG, MIN, MAX, COUNT(DISTINCT) and HAVING do not add up across shards and
    are refused there.
    ``options`` are further engine options (for ``fivm``: ``ring``,
    ``categorical``, ...); the named engine must accept each of them.
    """
    q = query if isinstance(query, Query) else parse(query, schema)
    if shards > 1 and q.beyond_rings:
        raise EngineRefused(
            f"{q} cannot be split into {shards} shards: {q.aggregate}"
            f"{' and HAVING' if q.having else ''} do not add up across shards (use shards = 1)"
        )
    if shards > 1:
        shard_query, _ = per_atom_relations(q)
        name = _choose_engine(shard_query, patterns) if engine == "auto" else engine
        views = [_view(shard_query, name, engine, eps, policy, patterns, options) for _ in range(shards)]
        return ShardedView(q, views, HyperCube(q, shards))
    name = _choose_engine(q, patterns) if engine == "auto" else engine
    return _view(q, name, engine, eps, policy, patterns, options)


def _view(q: Query, name: str, requested: str, eps, policy, patterns, extra=None) -> View:
    if name not in ENGINES:
        raise ValueError(f"unknown engine {name!r}; known: {sorted(ENGINES)}")
    refusal = ENGINES[name].refuses(q)
    if refusal:  # before options are checked, and for engines whose constructor checks less
        raise EngineRefused(f"engine {name!r} cannot maintain {q}: {refusal}")
    options = _engine_options(ENGINES[name], {"eps": eps}, explicit=requested != "auto")
    options.update(_engine_options(ENGINES[name], dict(extra or {}), explicit=True))
    if patterns is not None and "patterns" in inspect.signature(ENGINES[name].__init__).parameters:
        options["patterns"] = patterns
    # relations declared delete-only are held to it by the policy: inserts refused (003 App. C)
    engine = ENGINES[name](q, **options)
    return View(q, engine, policy_for(policy, patterns), patterns=patterns, planned=requested == "auto")


def _engine_options(cls: type[Engine], given: Mapping[str, object], explicit: bool) -> dict[str, object]:
    """The options given (not ``None``) that ``cls`` accepts; a named engine must accept them all."""
    accepted = inspect.signature(cls.__init__).parameters
    options = {}
    for key, value in given.items():
        if value is None:
            continue
        if key in accepted:
            options[key] = value
        elif explicit:
            raise ValueError(f"engine {cls.name!r} takes no option {key!r}")
    return options


def _choose_engine(query: Query, patterns: object = None) -> str:
    """The planner's engine for ``query`` (:func:`ivm.query.plan.plan`) under the declared patterns."""
    from ivm.query.plan import plan

    chosen = plan(query, patterns, registered=ENGINES)  # type: ignore[arg-type]
    if chosen.engine is None:
        raise EngineRefused(f"no engine can maintain {query}: " + "; ".join(chosen.notes))
    return chosen.engine
