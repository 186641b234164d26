"""``ivm explain``: the classification, the plan and the guarantee, as a dict and as text.

:func:`explain` returns the dict that ``ivm explain --json`` prints and
``View.explain()`` returns; :func:`render_text` turns it into words.  Keys
(DESIGN §3): ``acyclic``, ``free_connex``, ``hierarchical``, ``q_hierarchical``,
``weak_q_hierarchical`` (booleans), ``witness`` (why not, per false key),
``constant_time``, ``engine``, ``guarantee`` (``update``, ``delay``, ``space``,
``preprocessing``, plus ``amortized`` and ``lower_bound``), ``aggregate`` with
its ``ring`` (``in_ring`` false for AVG, MIN, MAX and COUNT(DISTINCT), which are
computed per group from ring results), ``having`` (HAVING's conditions), ``entry`` (per
relation, SQL's selection on it and its computed attributes, done where its updates
enter: :mod:`ivm.query.expr`), and more.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ivm.query.model import Query
from ivm.query.parse import parse
from ivm.query.patterns import UpdatePatterns
from ivm.query.plan import TriangleShape, plan


def explain(
    query: str | Query,
    patterns: UpdatePatterns | Mapping[str, str] | list[str] | None = None,
    eps: float | None = None,
    engine: str | None = None,
    schema: Mapping[str, list[str]] | None = None,
    registered: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The analysis and plan of ``query`` as a JSON-ready dict.

    >>> d = explain("Q() :- R(a,b), S(b,c), T(c,a)", registered={})
    >>> d["acyclic"], d["best_engine"], d["guarantee"]["update"], d["witness"]["acyclic"]
    (False, 'ivm_eps', 'O(N^0.5) amortized', 'cyclic: GYO leaves R(a, b), S(b, c), T(c, a) irreducible')
    """
    q = query if isinstance(query, Query) else parse(query, schema)
    p = plan(q, patterns, eps=eps, engine=engine, registered=registered)
    a = p.analysis
    verdicts = {
        "acyclic": a.acyclic,
        "free_connex": a.free_connex,
        "hierarchical": a.hierarchical,
        "q_hierarchical": a.q_hierarchical,
        "weak_q_hierarchical": a.weak_q_hierarchical,
    }
    out: dict[str, Any] = {"query": str(q)}
    out.update({k: bool(v) for k, v in verdicts.items()})
    out["witness"] = {k: v.reason for k, v in verdicts.items() if not v}
    out["reasons"] = {k: v.reason for k, v in verdicts.items()}
    out["self_join_free"] = q.self_join_free
    out["core"] = str(a.core)
    out["core_q_hierarchical"] = bool(a.core_q_hierarchical)
    out["triangle"] = isinstance(a.triangle, TriangleShape)
    out["three_relations"] = a.three_relations.witness.i if a.three_relations else None
    out["loomis_whitney"] = a.loomis_whitney.witness.degree if a.loomis_whitney else None
    out["four_path"] = bool(a.four_path)
    out["aggregate"] = str(q.aggregate)
    out["ring"] = q.aggregate.ring
    out["in_ring"] = q.aggregate.in_ring
    out["having"] = [str(c) for c in q.having]
    # per relation: SQL's selection on it and its computed attributes, done where its updates enter (ivm.query.expr)
    out["entry"] = {
        e.relation: {
            "where": None if e.where is None else str(e.where),
            "computed": {name: str(value) for name, value in e.derived},
        }
        for e in q.entry
    }
    out["patterns"] = p.patterns.describe(q.relations)
    out["mixdetect"] = None if p.mixdetect is None else bool(p.mixdetect)
    out["constant_time"] = p.constant_time
    out["engine"] = p.engine
    out["best_engine"] = p.best_engine  # an engine that accepts the query (when engines are registered)
    out["papers_best_engine"] = p.papers_best or p.best_engine
    out["eps"] = p.eps
    out["guarantee"] = p.guarantee.as_dict()
    out["plan"] = {"why": p.why, "structure": p.structure, "views": list(p.views), "notes": list(p.notes)}
    out["runtime_choices"] = [dict(c) for c in p.runtime]
    return out


def render_text(d: Mapping[str, Any]) -> str:
    """The explain dict in words a user understands."""

    def yes(key: str) -> str:
        return "yes" if d[key] else "no"

    g = d["guarantee"]
    if d.get("in_ring", True):
        aggregate = f"aggregate: {d['aggregate']} in the {d['ring']} ring"
    else:  # AVG, MIN, MAX, COUNT(DISTINCT): computed per group from ring results
        aggregate = f"aggregate: {d['aggregate']}, computed from {d['ring']}"
    lines = [f"query: {d['query']}", aggregate]
    if d.get("having"):
        lines.append(f"having: {', '.join(d['having'])} (the groups failing it are absent from the result)")
    for relation, entry in (d.get("entry") or {}).items():
        if entry["where"] is not None:
            lines.append(
                f"selection on {relation}: {entry['where']} (applied where {relation}'s updates enter: an update "
                "failing it is dropped and counted, not applied; the engine and the guarantee below are unchanged)"
            )
        for name, value in entry["computed"].items():
            lines.append(
                f"computed attribute {relation}.{name} := {value} (appended to each {relation} row where it enters: "
                "a lifting of the relation's own attributes, F-IVM §2.4; the plan is unchanged)"
            )
    lines += ["", "classification:"]
    for key in ("acyclic", "free_connex", "hierarchical", "q_hierarchical", "weak_q_hierarchical"):
        lines.append(f"  {key.replace('_', '-'):<20} {yes(key):<4} {d['reasons'][key]}")
    if not d["self_join_free"]:
        lines.append(f"  self-joins: core {d['core']} (q-hierarchical: {yes('core_q_hierarchical')})")
    if d["triangle"]:
        lines.append("  triangle shape:      yes")
    if d["three_relations"] is not None:
        lines.append(f"  3R class:            3R^{d['three_relations']}")
    if d.get("loomis_whitney") and d["loomis_whitney"] > 3:
        lines.append(f"  Loomis-Whitney:      degree {d['loomis_whitney']}")
    if d.get("four_path"):
        lines.append("  4-path count:        yes")
    lines.append("  update patterns:     " + ", ".join(f"{k}={v}" for k, v in d["patterns"].items()))
    if d["mixdetect"] is not None:
        lines.append(f"  MixDetect:           {'true' if d['mixdetect'] else 'false'}")
    lines += ["", f"plan: {d['plan']['why']}"]
    engine = d["engine"] or "none registered"
    best = d["best_engine"]
    lines.append(f"  engine: {engine}" + (f" (best per the papers: {best})" if best != d["engine"] else ""))
    if d["eps"] is not None:
        lines.append(f"  eps: {d['eps']}")
    lines.append("  structure:")
    lines += ["    " + line for line in d["plan"]["structure"].splitlines()]
    if d["plan"]["views"]:
        lines.append("  views to materialize:")
        lines += [f"    {v}" for v in d["plan"]["views"]]
    for note in d["plan"]["notes"]:
        lines.append(f"  note: {note}")
    runtime = d.get("runtime_choices") or []
    if runtime:
        lines += ["", "decided at run time, from the data:"]
        for c in runtime:
            lines += [f"  {c['choice']}", f"    statistic: {c['statistic']}", f"    rule:      {c['rule']}"]
    lines += [
        "",
        "guarantee (N = database size):",
        f"  preprocessing: {g['preprocessing']}",
        f"  update:        {g['update']}",
        f"  enumeration:   {g['delay']}",
        f"  space:         {g['space']}",
        f"  constant time: {'yes' if d['constant_time'] else 'no'} (O(1) amortized updates with O(1) delay)",
        f"  why no better: {g['lower_bound']}",
    ]
    return "\n".join(lines)
