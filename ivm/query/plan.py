"""Planning: from a query and its update patterns to an engine and a guarantee.

The rules, best first (each cites the result that makes it optimal):

1. the query is q-hierarchical: ``qhier``, O(N) preprocessing, expected O(1)
   updates (hash tables), O(1) delay (Berkholz et al. Thm 3.2); nothing can be
   faster.  When F-IVM's view tree over the free-top variable order has the
   same bounds (update exponent 0 and linear views: always for a scalar
   aggregate, and for group-by queries whose free variables every atom
   contains, F-IVM Thm 13), the measured faster of the two
   (``bench/choices.py``, engine/q-hier): ``qhier`` on its compiled compact
   state for a COUNT (1.04-4.9x fivm, 2026-11-25), ``fivm`` for other
   aggregates (qhier maintains COUNT only) and wherever the compact state is
   not built (qhier's Python reference was 1.7-4.2x slower than fivm).  A
   query with self-joins that is q-hierarchical only through its core is not
   planned on ``qhier``: COUNT over Z-relations (bag semantics,
   the library's default) counts the query's valuations, which the core does
   not preserve (002 §8 example F); the O(1) bound of Thm 3.4/3.5 holds for
   set semantics on the core (``QHierEngine(query, semantics="set")``), and
   the plan says so in its notes.
2. free-connex, self-join-free, and MixDetect accepts the update patterns:
   ``propagation`` over a compatible join tree, O(1) amortized updates, O(1)
   delay (Hu & Wang Lemma 4.16; Cor 1.6 for insert-only, Lemma 3.8 for FIFO).
   Every relation declared delete-only (``R=delete-only``): the same engine
   and bound on any free-connex tree (Hu & Wang App. C, the mirror image of
   insertion-only); not free-connex: no O(1) even then (Thm C.3).  Inserts
   into a delete-only relation after the initial database are refused.
3. triangle shape (also over one edge relation): ``ivm_eps``,
   O(N^max(ε,1−ε)) amortized, O(1) answer; optimal at ε = 1/2 under OMv
   (IVM^ε Thm 3, Prop. 4, Cor. 5).
4. any other count over three relations of class 3R² or 3R³ (self-joins read
   as copies): ``ivm_eps_3r`` (IVM^ε App. H, Thm 37; optimal under OMv at
   ε = 1/2, Prop. 38).
5. a Loomis-Whitney count of degree n ≥ 4: ``ivm_eps_lw`` (IVM^ε App. F,
   Thm 25, Prop. 26); the 4-path count ``R(a)·S(a,b)·T(b,c)·U(c)``:
   ``ivm_eps_path4`` (App. G, Thm 27, Prop. 28).  Rules 3-5 run under
   ``engine="auto"`` with ε chosen from the data (first-order while no key is
   heavy, ε = 1/2 once one is: :mod:`ivm.engines.ivm_eps.skew_switch`).
6. otherwise ``fivm`` on a free-top variable order (F-IVM Thm 13), whose
   update exponent is read off the view tree; the lower bound is OMv's
   (non-q-hierarchical: no O(N^(1/2−γ)) update with O(N^(1/2−γ)) delay) and,
   under the declared patterns, Hu & Wang's Thm 1.7 / 3.12 / 1.12.

AVG, MIN, MAX, COUNT(DISTINCT) and HAVING are no ring payload: ``aggregates``
computes them per group from ring queries over the same body
(:func:`ivm.query.model.aggregate_inputs`), each planned by the rules above;
its guarantee is theirs plus O(log n) per change of a (group, x) count for
MIN/MAX and O(1) for COUNT(DISTINCT) (:func:`_aggregates_plan`).

The best engine per the papers may not be registered yet; the plan then runs
on a registered engine that accepts the query and says so.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ivm.query.acyclic import acyclic
from ivm.query.core import core
from ivm.query.four_path import four_path
from ivm.query.free_connex import free_connex
from ivm.query.hierarchical import hierarchical
from ivm.query.join_tree import compatible_tree, height_one_tree
from ivm.query.loomis_whitney import loomis_whitney
from ivm.query.mixdetect import mixdetect
from ivm.query.model import VALUE_KINDS, Query, aggregate_inputs
from ivm.query.parse import parse  # noqa: F401  (doctests)
from ivm.query.patterns import UpdatePatterns, parse_patterns
from ivm.query.q_hierarchical import q_hierarchical
from ivm.query.three_relations import as_distinct_relations, three_relation_class
from ivm.query.triangle import TriangleShape, triangle_shape
from ivm.query.variable_order import size_exponent, update_exponent, variable_order, view_keys
from ivm.query.verdict import Verdict
from ivm.query.weak_q_hierarchical import weak_q_hierarchical

DEFAULT_EPS = 0.5
#: the engine of AVG, MIN, MAX, COUNT(DISTINCT) and HAVING (ivm.engines.aggregates.engine)
AGGREGATES = "aggregates"
#: the triangle count's engine under ``engine="auto"``: IVM^ε with eps chosen per relation from the data
ADAPTIVE = "ivm_eps_auto"
#: IVM^ε beyond the triangle: one engine per appendix, each with ε chosen at run time under ``engine="auto"``
IVM_EPS_3R, IVM_EPS_LW, IVM_EPS_PATH4 = "ivm_eps_3r", "ivm_eps_lw", "ivm_eps_path4"
#: what ``engine="auto"`` runs for them: F-IVM while no join value is heavy, then the IVM^ε engine
HYBRID = "ivm_eps_hybrid"
#: its switch cutoff, max(skew·√N, floor) (ivm.engines.ivm_eps.hybrid.DEFAULT_SKEW, DEFAULT_FLOOR)
_SKEW_CUTOFF = (32.0, 1024)
FALLBACK_ORDER = ("fivm", "propagation", "qhier", "ivm_eps", "first_order")
#: qhier's update bound: O(1) per update in the RAM model of Berkholz et al. (not amortized); the
#: engine's hash tables make it expected O(1) (002 §1, §9.10)
QHIER_UPDATE = "expected O(1) (hash tables)"
#: why a q-hierarchical query whose F-IVM tree is O(1) runs on fivm rather than qhier (bench/choices.py)
QHIER_ON_FIVM_MEASURED = (
    "chosen over qhier (same bounds) because qhier's compiled compact state is not built here, and qhier's Python "
    "reference was measured 1.7-4.2x slower than fivm at commits of 1,000 (bench/choices.py, 2026-11-21)"
)


def _fivm_over_qhier(query: Query) -> str:
    """Why a q-hierarchical query with an O(1) F-IVM tree runs on ``fivm``."""
    aggregate = getattr(query, "aggregate", None)
    if aggregate is not None and aggregate.kind != "count":
        return f"qhier maintains COUNT, not {aggregate}"
    if getattr(query, "having", None):
        return "qhier has no HAVING"
    return QHIER_ON_FIVM_MEASURED


#: why a q-hierarchical COUNT whose F-IVM tree is O(1) runs on qhier when its compact state is built
QHIER_COMPACT_MEASURED = (
    "chosen over fivm (same bounds: F-IVM Thm 13) because qhier's compiled compact state was measured 1.04-4.9x "
    "faster on uniform, skewed, mixed and duplicate-heavy streams at commits of 1, 10 and 1,000 (bench/choices.py)"
)


def _qhier_compact(query: Query) -> bool:
    """Does ``qhier`` run ``query`` on its compiled compact state (a COUNT without HAVING, the kernel built)?

    Then it is measured faster than ``fivm``'s O(1) view tree for the same bounds (bench/choices.py,
    engine/q-hier); the Python reference of qhier was slower, so without the kernel ``fivm`` stays.
    """
    aggregate = getattr(query, "aggregate", None)
    if (aggregate is not None and aggregate.kind != "count") or getattr(query, "having", None):
        return False
    from ivm.engines.qhier.compact import compact_available

    return compact_available()


@dataclass(frozen=True)
class Guarantee:
    """The cost bounds of a plan, in data complexity (N = database size), as words."""

    preprocessing: str
    update: str
    delay: str
    space: str
    amortized: bool
    lower_bound: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "preprocessing": self.preprocessing,
            "update": self.update,
            "delay": self.delay,
            "space": self.space,
            "amortized": self.amortized,
            "lower_bound": self.lower_bound,
        }


@dataclass(frozen=True)
class Analysis:
    """Every structural verdict of a query (on its core when it has self-joins)."""

    query: Query
    core: Query
    acyclic: Verdict
    free_connex: Verdict
    hierarchical: Verdict
    q_hierarchical: Verdict
    core_q_hierarchical: Verdict
    weak_q_hierarchical: Verdict
    triangle: TriangleShape | str
    three_relations: Verdict
    loomis_whitney: Verdict
    four_path: Verdict


def analyze(query: Query) -> Analysis:
    """Run every structural test on ``query``.

    >>> a = analyze(parse("Q() :- E(x,x), E(x,y), E(y,y)"))
    >>> bool(a.q_hierarchical), bool(a.core_q_hierarchical), str(a.core)
    (False, True, 'Q() :- E(x, x)')
    """
    reduced = core(query).query if not query.self_join_free else query
    return Analysis(
        query=query,
        core=reduced,
        acyclic=acyclic(query),
        free_connex=free_connex(query),
        hierarchical=hierarchical(query),
        q_hierarchical=q_hierarchical(query),
        core_q_hierarchical=q_hierarchical(reduced),
        weak_q_hierarchical=weak_q_hierarchical(query),
        triangle=triangle_shape(query),
        three_relations=three_relation_class(query),
        loomis_whitney=loomis_whitney(query),
        four_path=four_path(query),
    )


@dataclass(frozen=True)
class Plan:
    """The chosen engine, the structure it maintains, and the guarantee with its lower bound."""

    analysis: Analysis
    patterns: UpdatePatterns
    best_engine: str
    engine: str | None
    eps: float | None
    guarantee: Guarantee
    constant_time: bool
    structure: str
    views: tuple[str, ...]
    why: str
    notes: tuple[str, ...] = field(default=())
    mixdetect: Verdict | None = None
    #: the choices the chosen engine makes at run time from the data: ``choice``, ``statistic``, ``rule``
    runtime: tuple[dict[str, str], ...] = field(default=())
    #: the papers' best engine for the query, even when it is not registered or refuses the query
    papers_best: str | None = None


def plan(
    query: Query,
    patterns: UpdatePatterns | Mapping[str, str] | list[str] | None = None,
    eps: float | None = None,
    engine: str | None = None,
    registered: Mapping[str, Any] | None = None,
) -> Plan:
    """Choose the engine for ``query`` under ``patterns`` and state its guarantee.

    >>> plan(parse("Q() :- R(a,b), S(b,c), T(c,a)"), registered={}).best_engine
    'ivm_eps'
    >>> p = plan(parse("Q(x,y) :- R(x,y), S(x,z), T(x)"), registered={})
    >>> p.best_engine, p.guarantee.update, p.constant_time
    ('qhier', 'expected O(1) (hash tables)', True)
    >>> plan(parse("Q(SUM(y)) :- R(x,y), S(x,z), T(x)"), registered={}).best_engine  # qhier: COUNT only
    'fivm'
    >>> plan(parse("Q(x1) :- R1(x1,x2), R2(x2,x3), R3(x3)"), ["R2=insert-only", "R3=insert-only"],
    ...      registered={}).best_engine
    'propagation'
    """
    sigma = parse_patterns(patterns)
    analysis = analyze(query)
    notes: list[str] = []
    if registered is None:
        from ivm.engines import ENGINES

        registered = ENGINES
    if query.beyond_rings:
        return _aggregates_plan(analysis, sigma, engine, registered)
    best, eps_used, guarantee, constant, structure, views, why, mix = _best(analysis, sigma, eps, notes)
    papers_best = best
    accepting = _best_accepting(query, best, registered, guarantee, notes)
    if accepting is not None:  # name a best engine only if it accepts the query
        best = accepting
        guarantee = _engine_guarantee(best, analysis, eps, guarantee)
        constant = constant and best in ("qhier", "propagation")
    want = engine or best
    if (
        want == best == "ivm_eps"
        and eps is None
        and ADAPTIVE in registered
        and registered[ADAPTIVE].refuses(query) is None
    ):
        want = ADAPTIVE  # eps depends on the data, not the query: chosen at run time (ivm.engines.ivm_eps.adaptive)
    elif (
        engine is None
        and want == best
        and best in (IVM_EPS_3R, IVM_EPS_LW, IVM_EPS_PATH4)
        and eps is None
        and HYBRID in registered
        and registered[HYBRID].refuses(query) is None
    ):
        want = HYBRID  # F-IVM until a join value is heavy, then `best` (ivm.engines.ivm_eps.hybrid)
    chosen = _registered_engine(query, want, registered, notes, forced=engine is not None)
    runtime = tuple(_runtime_choices(query, chosen, registered))
    hybrid = best in (IVM_EPS_3R, IVM_EPS_LW, IVM_EPS_PATH4) and HYBRID in (engine, chosen)
    if hybrid:
        guarantee = dataclasses.replace(
            guarantee,
            preprocessing="O(N) (F-IVM) from empty; " + guarantee.preprocessing + f" when {best} takes over",
            update=f"{guarantee.update} once a join value is heavy ({best}); before that F-IVM, while every join "
            f"value occurs in fewer than max({_SKEW_CUTOFF[0]:g}·√N, {_SKEW_CUTOFF[1]}) tuples of an atom",
        )
    if engine is not None and engine != best and not (engine == ADAPTIVE and best == "ivm_eps") and not hybrid:
        notes.append(
            f"engine {engine!r} was requested; "
            + ("the papers' best plan" if best == papers_best else "the best engine that accepts it")
            + f" for this query is {best!r} ({guarantee.update})"
        )
        guarantee = _engine_guarantee(engine, analysis, eps, guarantee)
        constant = constant and engine in ("qhier", "propagation")
    elif chosen is not None and chosen != best and chosen != HYBRID:
        guarantee = _engine_guarantee(chosen, analysis, eps, guarantee)
        constant = False
    return Plan(
        analysis,
        sigma,
        best,
        chosen,
        eps_used,
        guarantee,
        constant,
        structure,
        views,
        why,
        tuple(notes),
        mix,
        runtime,
        papers_best,
    )


def _best_accepting(
    query: Query, best: str, registered: Mapping[str, Any], guarantee: Guarantee, notes: list[str]
) -> str | None:
    """The engine to name as best when the papers' best engine is registered but refuses the query, else ``None``.

    With no engines registered (analysis only, ``registered={}``) the papers'
    best stays; one that is not registered or refuses the query is replaced by
    the first registered engine that accepts it (the one ``auto`` runs).
    """
    if not registered or (best in registered and registered[best].refuses(query) is None):
        return None
    reason = registered[best].refuses(query) if best in registered else "it is not registered"
    for name in (*FALLBACK_ORDER, *registered):
        if name in registered and name != best and registered[name].refuses(query) is None:
            notes.append(
                f"the papers' best plan {best!r} ({guarantee.update}) does not accept this query ({reason}); "
                f"the best engine that accepts it is {name!r}"
            )
            return name
    return None


def _aggregates_plan(a: Analysis, sigma: UpdatePatterns, engine: str | None, registered: Mapping[str, Any]) -> Plan:
    """The plan of a query with AVG, MIN, MAX, COUNT(DISTINCT) or HAVING: its inputs' plans, composed.

    Each input of :func:`~ivm.query.model.aggregate_inputs` is planned as a
    query of its own; the update time is theirs plus the per-group work of
    :class:`ivm.engines.aggregates.engine.GroupAggregates` on each change of a
    (group, x) count; results are read in O(1) per group.

    >>> p = plan(parse("Q(a, MIN(c)) :- R(a, b), S(b, c)"), registered={})
    >>> p.best_engine
    'aggregates'
    >>> p.guarantee.update.split(", then ")[0]
    'O(N) per single-tuple update (Q(a, c) :- R(a, b), S(b, c))'
    >>> p.guarantee.update.split(", then ")[1]
    'O(log n) per change of a (group, c) count (n = the distinct c values of the group: a sorted list)'
    """
    query = a.query
    notes: list[str] = []
    inner = [(q, plan(q, sigma, registered=registered)) for q in aggregate_inputs(query)]
    chosen = _registered_engine(query, engine or AGGREGATES, registered, notes, forced=engine is not None)
    for q, p in inner:
        if p.engine is None and registered:
            notes.append(f"no registered engine maintains the input {q}: " + "; ".join(p.notes))
    kinds = {agg.kind: agg for agg in query.aggregates}
    values = {x for agg in query.aggregates if agg.kind in VALUE_KINDS for x in agg.variables} - set(query.free)
    ordered = {x for agg in query.aggregates if agg.kind in ("min", "max") for x in agg.variables} - set(query.free)
    per_change = [
        f"O(log n) per change of a (group, {x}) count (n = the distinct {x} values of the group: a sorted list)"
        if x in ordered
        else f"O(1) per change of a (group, {x}) count"
        for x in sorted(values)
    ]
    update = "; ".join(f"{p.guarantee.update} ({q})" for q, p in inner)
    if per_change:
        update += ", then " + ", ".join(per_change)
    for q, p in inner:
        cls = registered.get(p.engine) if p.engine else None
        if len(q.free) > len(query.free) and cls is not None and not hasattr(cls, "drain_delta"):
            update += f"; O(|answers of {q}|) per batch to find its changes ({p.engine} has no drain_delta)"
        elif len(q.free) > len(query.free) and p.engine == "propagation":  # its drain_delta: the delta rule
            update += f"; O(|batch| + its delta join on {q}) per batch to find its changes (propagation's drain_delta)"
    if query.free:
        delay = "O(1) per group of the result (O(#groups) for the whole result)"
        if query.having:
            delay += "; groups failing HAVING are skipped, O(#HAVING conditions) each"
    else:
        delay = "O(1) answer time"
    space = "; ".join(f"{p.guarantee.space} ({q})" for q, p in inner)
    if values:
        space += " plus O(1) per (group, value) pair"
    lower = "; ".join(dict.fromkeys(p.guarantee.lower_bound for _, p in inner))
    preprocessing = {p.guarantee.preprocessing for _, p in inner}
    guarantee = Guarantee(
        preprocessing.pop()
        if len(preprocessing) == 1
        else "; ".join(f"{p.guarantee.preprocessing} ({q})" for q, p in inner),
        update,
        delay,
        space,
        any(p.guarantee.amortized for _, p in inner) or bool(ordered),
        f"the inputs' bounds: {lower}",
    )
    structure = "\n".join(
        f"{q}: {p.engine or p.best_engine}\n" + "\n".join("  " + line for line in p.structure.splitlines())
        for q, p in inner
    )
    views = [f"{v} ({q})" for q, p in inner for v in p.views]
    views += [
        f"per group: the {x} values with a positive count, sorted (MIN/MAX at its ends)"
        if x in ordered
        else f"per group: the number of {x} values with a positive count (COUNT(DISTINCT {x}))"
        for x in sorted(values)
    ]
    parts = []
    if "avg" in kinds or "sum" in kinds:
        parts.append("AVG/SUM from the count and sum of each group (the Z × Z/R payload of the SUM query)")
    if values:
        parts.append(
            "MIN/MAX/COUNT(DISTINCT) from each group's multiset of values (the COUNT grouped by the free "
            "variables and the value)"
        )
    if query.having:
        parts.append(f"HAVING {', '.join(str(c) for c in query.having)} evaluated per group when the result is read")
    why = (
        f"{query.aggregate}{' with HAVING' if query.having else ''} is no ring payload: computed per group from "
        "ring views over the same body (F-IVM §2.4, Remark 18): " + "; ".join(parts)
    )
    return Plan(a, sigma, AGGREGATES, chosen, None, guarantee, False, structure, tuple(views), why, tuple(notes))


def _runtime_choices(query: Query, chosen: str | None, registered: Mapping[str, Any]) -> list[dict[str, str]]:
    """What the chosen engine decides at run time from the data, and from which statistic (``ivm explain``).

    Engines describe their own rules (:meth:`ivm.engines.base.Engine.runtime_choices`);
    the adaptive IVM^ε's rule is stated here from its defaults.
    """
    if chosen is None or chosen not in registered:
        return []
    cls = registered[chosen]
    choices = list(cls.runtime_choices(query)) if hasattr(cls, "runtime_choices") else []
    if chosen == ADAPTIVE and not choices:
        import inspect

        defaults = {k: p.default for k, p in inspect.signature(cls.__init__).parameters.items()}
        skew, dwell, hot = defaults.get("skew", 8.0), defaults.get("dwell", 0.25), defaults.get("eps", DEFAULT_EPS)
        cost = defaults.get("cost", 4096)
        choices.append(
            {
                "choice": "eps per relation: first-order IVM (eps = 1, no heavy part) or IVM^ε's heavy/light "
                f"partition at eps = {hot:g}",
                "statistic": "the first-order work of each update (the smaller row its intersection walks) against "
                f"the partitioned mode's estimate r = min({cost}, {skew:g}·√N) per update (N = database size); "
                "the largest degree of a join key in each relation, against √N",
                "rule": "first-order while the excess E := max(0, E + work - r) stays below |D| (ski rental; no "
                "worst-case bound per update meanwhile: one update may cost O(N) before the switch); then "
                f"eps = {hot:g} for the relations with a key of degree ≥ N^{hot:g} (a major rebalancing, the count "
                f"unchanged); a first-order relation beside a partitioned one follows once a key reaches "
                f"{skew:g}·√N; back to first-order when its largest degree falls below {skew / 4:g}·√N and "
                f"{dwell:g}·|D| updates have passed since its last switch (promote='degree': partition once a key "
                f"reaches {skew:g}·√N, O(√N) worst-case per first-order update); the view's explain()['choice'] "
                "and stats() ('eps', 'partitioned', 'work_excess') show the current choice",
            }
        )
    return choices


def _best(
    a: Analysis, sigma: UpdatePatterns, eps: float | None, notes: list[str]
) -> tuple[str, float | None, Guarantee, bool, str, tuple[str, ...], str, Verdict | None]:
    query = a.query
    counting = not query.free
    delay_word = "O(1) answer time" if counting else "O(1) delay"
    if not query.self_join_free and len(a.core.atoms) < len(query.atoms):
        notes.append(f"the query has self-joins; its core is {a.core} (same answers, Chandra–Merlin)")
    if a.core_q_hierarchical and not a.q_hierarchical:
        notes.append(_set_semantics_note(a))
    notes += _deletion_only_notes(a, sigma)
    if a.q_hierarchical and _fivm_constant(query) and not _qhier_compact(query):
        order = variable_order(query)
        return (
            "fivm",
            None,
            _qhier_guarantee(delay_word),
            True,
            order.render(query),
            tuple(f"V@{v}[{', '.join(sorted(view_keys(query, order, v)))}]" for v in order.parent),
            "q-hierarchical, and F-IVM's view tree over the free-top variable order has update exponent 0 "
            "and linear views: every delta is a primary-key lookup per sibling view (F-IVM Thm 13; the bound "
            f"of Berkholz et al. Thm 3.2); {_fivm_over_qhier(query)}",
            None,
        )
    if a.q_hierarchical:
        return (
            "qhier",
            None,
            _qhier_guarantee(delay_word),
            True,
            height_one_tree(query).render(query),
            ("one weight and fit-list per q-tree node value (Berkholz et al. §6)",),
            "q-hierarchical: every atom's variables form a root path of the q-tree (Berkholz et al. Thm 3.2)"
            + (f"; {QHIER_COMPACT_MEASURED}" if _fivm_constant(query) else ""),
            None,
        )
    if query.self_join_free and a.free_connex and sigma.all_deletion_only(query.relations):
        return (
            "propagation",
            None,
            Guarantee(
                "O(N)",
                "O(1) amortized",
                delay_word,
                "O(N)",
                True,
                "optimal: constant amortized update time cannot be improved",
            ),
            True,
            compatible_tree(query, UpdatePatterns(dict.fromkeys(query.relations, "I"))).render(query),
            ("semijoin view V_s and projection view V_p per join-tree node (Hu & Wang §2, [25])",),
            "free-connex and every relation delete-only: after the linear-time build of the initial database "
            "the views' counters only decrease, so each (parent tuple, child) pair flips at most once: "
            "O(1) amortized per delete with O(1) delay (Hu & Wang App. C, the mirror image of Cor 1.6)",
            None,
        )
    mix: Verdict | None = None
    if query.self_join_free and a.free_connex:
        mix = mixdetect(query, sigma)
        if mix:
            tree = compatible_tree(query, sigma)
            kind = _pattern_kind(query, sigma)
            return (
                "propagation",
                None,
                Guarantee(
                    "O(N)",
                    "O(1) amortized",
                    delay_word,
                    "O(N)",
                    True,
                    "optimal: constant amortized update time cannot be improved",
                ),
                True,
                tree.render(query),
                (
                    "semijoin view V_s and projection view V_p per join-tree node (Hu & Wang §2, [25])",
                    "FILTER/EXTENDER edges for insert-only or jointly FIFO children",
                ),
                f"free-connex and MixDetect accepts the update patterns ({kind}): {mix.reason} (Hu & Wang Lemma 4.16)",
                mix,
            )
    if isinstance(a.triangle, TriangleShape):
        e = DEFAULT_EPS if eps is None else eps
        hi, lo = _fmt(max(e, 1 - e)), _fmt(1 + min(e, 1 - e))
        self_join = len({edge.relation for edge in a.triangle.edges}) == 1
        views = (
            ("V(a,c) = Σ_b E_h(a,b)·E_l(b,c) (IVM^ε App. B, one view for the self-join)",)
            if self_join
            else (
                "V_RS(a,c) = Σ_b R_h(a,b)·S_l(b,c)",
                "V_ST(b,a) = Σ_c S_h(b,c)·T_l(c,a)",
                "V_TR(c,b) = Σ_a T_h(c,a)·R_l(a,b)",
            )
        )
        u0, u1, u2 = a.triangle.variables
        parts = "; ".join(f"{edge.relation} on {var}" for edge, var in zip(a.triangle.edges, (u0, u1, u2), strict=True))
        return (
            "ivm_eps",
            e,
            Guarantee(
                "O(N^1.5)",
                f"O(N^{hi}) amortized",
                "O(1) answer time",
                f"O(N^{lo})",
                True,
                "OMv (IVM^ε Prop. 4): no O(N^(0.5-γ)) amortized update with O(N^(1-γ)) answer time; "
                + ("worst-case optimal at eps = 0.5" if e == 0.5 else "eps = 0.5 would be worst-case optimal"),
            ),
            False,
            f"heavy/light partitions with threshold N^{_fmt(e)}: {parts}",
            views,
            "triangle count: cyclic, IVM^ε (Kara et al. Thm 3)",
            mix,
        )
    counts = query.aggregate.kind == "count" and not query.having and not query.free
    three_r = a.three_relations
    if counts and not three_r and len(query.atoms) == 3 and not query.self_join_free:
        three_r = three_relation_class(as_distinct_relations(query))  # self-joins read as copies (App. B)
    if counts and three_r and three_r.witness.i >= 2:
        e = DEFAULT_EPS if eps is None else eps
        i = three_r.witness.i
        hi, lo = _fmt(max(e, 1 - e)), _fmt(1 + min(e, 1 - e))
        return (
            IVM_EPS_3R,
            e,
            Guarantee(
                "O(N^1.5)" if i == 3 else "O(N)",
                f"O(N^{hi}) amortized",
                "O(1) answer time",
                f"O(N^{lo})" if i == 3 else "O(N)",
                True,
                f"OMv (IVM^ε Prop. 38): no 3R^{i} query has O(N^(0.5-γ)) amortized update with O(N^(1-γ)) answer time"
                if query.self_join_free
                else _lower_bound(a, sigma, mix),  # Prop. 38 reduces from three distinct relations
            ),
            False,
            "heavy/light partitions of each relation on its pair-join variables (IVM^ε App. H)",
            (
                ("V_{M_l U}(b) = Σ_a U(a)·M_l(a,b)", "V_{M_h P_l}(a) = Σ_b M_h(a,b)·P_l(b) (IVM^ε Fig. 22)")
                if i == 2
                else ("the triangle views of Fig. 2 over the keys (X_i, A_RST) (IVM^ε Fig. 21)",)
            ),
            f"{three_r.reason} (IVM^ε Thm 37)",
            mix,
        )
    lw = a.loomis_whitney
    if counts and lw and lw.witness.degree >= 4:
        e = DEFAULT_EPS if eps is None else eps
        n = lw.witness.degree
        hi, lo = _fmt(max(e, 1 - e)), _fmt(1 + min(e, 1 - e))
        pre = _fmt(1 + max(min(e, 1 - e), 1 / (n - 1)))
        return (
            IVM_EPS_LW,
            e,
            Guarantee(
                f"O(N^{pre})",
                f"O(N^{hi}) amortized",
                "O(1) answer time",
                f"O(N^{lo})",
                True,
                "OMv (IVM^ε Prop. 26): no Loomis-Whitney count has O(N^(0.5-γ)) amortized update with "
                "O(N^(1-γ)) answer time; "
                + ("worst-case optimal at eps = 0.5" if e == 0.5 else "eps = 0.5 would be worst-case optimal"),
            ),
            False,
            f"every relation partitioned into heavy/light parts on one variable, threshold N^{_fmt(e)} (IVM^ε F.1)",
            (f"V_i = the heavy part of R_(i+1) joined with the light part of R_(i+2), i = 1..{n} (IVM^ε F.1)",),
            f"{lw.reason}: IVM^ε Thm 25, the triangle's algorithm in degree {n}",
            mix,
        )
    path = a.four_path
    if counts and path:
        e = DEFAULT_EPS if eps is None else eps
        hi, lo = _fmt(max(e, 1 - e)), _fmt(1 + min(e, 1 - e))
        return (
            IVM_EPS_PATH4,
            e,
            Guarantee(
                f"O(N^{lo})",
                f"O(N^{hi}) amortized",
                "O(1) answer time",
                f"O(N^{lo})",
                True,
                "OMv (IVM^ε Prop. 28): no O(N^(0.5-γ)) amortized update with O(N^(1-γ)) answer time; "
                + ("worst-case optimal at eps = 0.5" if e == 0.5 else "eps = 0.5 would be worst-case optimal"),
            ),
            False,
            f"S and T partitioned on both of their variables (refined partitions, threshold N^{_fmt(e)}; IVM^ε G.1)",
            ("the auxiliary views of Fig. 14 with the indicator projections of the heavy parts (IVM^ε G.1)",),
            f"{path.reason}: IVM^ε Thm 27 (F-IVM and first-order IVM need O(N) per update)",
            mix,
        )
    order = variable_order(query)
    k = update_exponent(query, order)
    update = _power(k)
    space = _power(max(1, size_exponent(query, order)))
    lower = _lower_bound(a, sigma, mix)
    constant = False
    if a.free_connex:
        why = "free-connex acyclic but not q-hierarchical: F-IVM over a free-top variable order (F-IVM Thm 13)"
        delay = delay_word
    else:
        why = "not free-connex: F-IVM materializes the views of a free-top variable order (F-IVM §3)"
        delay = delay_word if counting else "O(1) from the root view (the result is materialized)"
    views = tuple(f"V@{v}[{', '.join(sorted(view_keys(query, order, v)))}]" for v in order.parent)
    return (
        "fivm",
        None,
        Guarantee(space, f"{update} per single-tuple update", delay, space, False, lower),
        constant,
        order.render(query),
        views,
        why,
        mix,
    )


def _fivm_constant(query: Query) -> bool:
    """Does F-IVM's view tree over the free-top order keep the q-hierarchical bounds for ``query``?

    Update exponent 0 (a single-tuple delta binds every key it joins on) and
    views of linear size: O(1) update, O(1) delay, O(N) space (F-IVM Thm 13).
    True for every q-hierarchical scalar aggregate and for group-by queries whose
    free variables occur in every atom; false when a free variable lies below a
    bound branch, where the root would list the answers (qhier factorizes them).

    >>> _fivm_constant(parse("Q(a) :- R(a,b), S(a,c)")), _fivm_constant(parse("Q(x,y) :- R(x,y), S(x,z)"))
    (True, False)
    """
    order = variable_order(query)
    return update_exponent(query, order) == 0 and size_exponent(query, order) <= 1


def _qhier_guarantee(delay_word: str) -> Guarantee:
    """The bounds of a q-hierarchical plan (Berkholz et al. Thm 3.2), whichever engine serves it."""
    return Guarantee(
        "O(N)", QHIER_UPDATE, delay_word, "O(N)", False, "optimal: constant update and answer time cannot be improved"
    )


def _set_semantics_note(a: Analysis) -> str:
    """Why a query that is q-hierarchical only through its core is not planned on ``qhier``.

    The core has the same *set* of answers (Chandra–Merlin), not the same
    multiplicities: on 002 §8 example F the query counts 5 valuations and its
    core 3.  Berkholz et al. Thm 3.4/3.5 give O(1) for the Boolean answer and
    the number of distinct answers, which is what ``QHierEngine(query,
    semantics="set")`` maintains on the core.
    """
    return (
        f"only the core {a.core} is q-hierarchical; COUNT over Z-relations (bag semantics, the default) "
        "counts the valuations of the query itself, which the core does not preserve (002 §8 F: bag count 5 "
        "on the query, 3 on its core), so the plan computes the exact count without qhier. Under set semantics "
        "(relations and answers as sets) QHierEngine(query, semantics='set') evaluates the core with expected "
        "O(1) updates (hash tables) and O(1) answer/delay (Berkholz et al. Thm 3.4/3.5)"
    )


def _lower_bound(a: Analysis, sigma: UpdatePatterns, mix: Verdict | None) -> str:
    query = a.query
    parts = []
    if mix is not None and not mix and any(sigma.deletes_only(r) for r in query.relations):
        parts.append(
            f"{mix.reason} with delete-only relations read as arbitrary; Hu & Wang state no lower bound for "
            "delete-only mixed with other patterns (Thm 1.12 covers insert-only, FIFO and arbitrary)"
        )
    elif mix is not None and not mix and _pattern_kind(query, sigma) != "all arbitrary":
        parts.append(f"under these patterns {mix.reason}: no O(N^(0.5-γ)) update (Hu & Wang Thm 1.12)")
    if not a.free_connex:
        parts.append(
            "not free-connex: not O(1) even for insert-only updates (BMM/Triangle/HyperClique, Hu & Wang Thm 1.7)"
        )
        if sigma.all_deletion_only(query.relations):
            parts.append("nor for delete-only updates (Hu & Wang Thm C.3; C.1 via BMM, C.2 via HyperClique)")
    if not query.free and a.core_q_hierarchical:
        parts.append(
            "the bag count is the number of answers of the body with every variable free, which is not "
            "hierarchical: no O(N^(0.5-γ)) update with O(N^(0.5-γ)) count time unless OMv or OV fails "
            "(Berkholz et al. Thm 3.5); only the Boolean answer is easy, via the core (Thm 3.4)"
        )
    elif query.self_join_free or not query.free:
        which = "count" if not query.free else "enumeration"
        parts.append(
            f"not q-hierarchical: no O(N^(0.5-γ)) update with O(N^(0.5-γ)) {which} time unless OMv fails "
            "(Berkholz et al. Thm 3.3-3.5)"
        )
    else:
        parts.append("with self-joins, the enumeration lower bound is open (Berkholz et al. §7)")
    return "; ".join(parts)


def _pattern_kind(query: Query, sigma: UpdatePatterns) -> str:
    levels = {"D" if sigma.deletes_only(r) else sigma.level(r) for r in query.relations}
    if levels == {"A"}:
        return "all arbitrary"
    if levels == {"I"}:
        return "all insert-only"
    if levels == {"D"}:
        return "all delete-only"
    return "mixed: " + ", ".join(f"{r}={'D' if sigma.deletes_only(r) else sigma.level(r)}" for r in query.relations)


def _deletion_only_notes(a: Analysis, sigma: UpdatePatterns) -> list[str]:
    """What declaring relations delete-only gives (Hu & Wang App. C) and what the runtime enforces."""
    query = a.query
    declared = [r for r in query.relations if sigma.deletes_only(r)]
    if not declared:
        return []
    names = ", ".join(declared)
    notes = [
        f"{names} declared delete-only: tuples come from the initial database only (View.load, the bootstrap); "
        "every later insert is refused (dead letter delete_only_insert), the state unchanged"
    ]
    if len(declared) < len(query.relations):
        others = ", ".join(r for r in query.relations if not sigma.deletes_only(r))
        notes.append(
            f"Hu & Wang App. C gives O(1) amortized only when every relation is delete-only; with {others} not, "
            f"{names} {'is' if len(declared) == 1 else 'are'} planned as arbitrary (deletes in any order)"
        )
    elif not a.free_connex:
        notes.append(
            "every relation delete-only, but the query is not free-connex: no O(1) amortized update with O(1) "
            "delay even for delete-only updates (Hu & Wang Thm C.3)"
        )
    elif not query.self_join_free:
        notes.append("every relation delete-only, but App. C's engine needs a self-join-free query (Hu & Wang §1.1)")
    return notes


def _registered_engine(
    query: Query, want: str, registered: Mapping[str, Any], notes: list[str], forced: bool
) -> str | None:
    if want in registered and registered[want].refuses(query) is None:
        return want
    if forced:
        reason = "it is not registered" if want not in registered else registered[want].refuses(query)
        notes.append(f"requested engine {want!r} cannot run: {reason}")
        return None
    reason = "not registered yet" if want not in registered else registered[want].refuses(query)
    for name in (*FALLBACK_ORDER, *registered):
        if name in registered and name != want and registered[name].refuses(query) is None:
            notes.append(f"the best engine {want!r} cannot run here ({reason}); running {name!r} instead")
            return name
    notes.append(f"the best engine {want!r} cannot run here ({reason}) and no registered engine accepts the query")
    return None


def _engine_guarantee(name: str, a: Analysis, eps: float | None, best: Guarantee) -> Guarantee:
    """What a (non-best) engine guarantees on this query, as far as its paper states."""
    if name == "first_order" and isinstance(a.triangle, TriangleShape):
        return Guarantee(
            "O(N^1.5)",
            "O(N) worst-case",
            "O(1) answer time",
            "O(N)",
            False,
            f"not optimal: {best.update} is possible ({best.lower_bound})",
        )
    if name == "ivm_eps" and isinstance(a.triangle, TriangleShape):
        e = DEFAULT_EPS if eps is None else eps
        return Guarantee(
            "O(N^1.5)",
            f"O(N^{_fmt(max(e, 1 - e))}) amortized",
            "O(1) answer time",
            f"O(N^{_fmt(1 + min(e, 1 - e))})",
            True,
            best.lower_bound,
        )
    if name == ADAPTIVE and isinstance(a.triangle, TriangleShape):
        e = DEFAULT_EPS if eps is None else eps
        return Guarantee(
            "O(1) from empty; O(N^1.5) bulk load",
            f"O(N^{_fmt(max(e, 1 - e))}) amortized (first-order while the work stays within the partitioned "
            "estimate: no worst-case bound per update; promote='degree': O(√N) worst-case while degrees < 8·√N)",
            "O(1) answer time",
            f"O(N^{_fmt(1 + min(e, 1 - e))})",
            True,
            best.lower_bound,
        )
    if a.q_hierarchical and (name == "qhier" or (name == "fivm" and _fivm_constant(a.query))):
        # Berkholz et al. Thm 3.2; F-IVM Thm 13
        return Guarantee(
            "O(N)",
            QHIER_UPDATE,
            "O(1) delay" if a.query.free else "O(1) answer time",
            "O(N)",
            False,
            best.lower_bound,
        )
    if name == "propagation" and a.free_connex and a.query.self_join_free:
        return Guarantee(
            "O(N)",
            "O(λ) amortized ≤ O(N) (enclosureness of the join tree, Hu & Wang Lemma 1.4)",
            "O(1) answer time" if not a.query.free else "O(1) delay",
            "O(N)",
            True,
            best.lower_bound,
        )
    if name == "fivm" and a.free_connex:  # F-IVM Thm 13: free-connex acyclic, O(N) per single-tuple update
        return Guarantee(
            "O(N)",
            "O(N) per single-tuple update",
            "O(1) delay" if a.query.free else "O(1) answer time",
            "O(N)",
            False,
            best.lower_bound,
        )
    return Guarantee(
        "not stated",
        f"not stated for engine {name!r} (the best plan gives {best.update})",
        "not stated",
        "not stated",
        False,
        best.lower_bound,
    )


def _power(k: int) -> str:
    return "O(1)" if k == 0 else ("O(N)" if k == 1 else f"O(N^{k})")


def _fmt(x: float) -> str:
    return f"{x:.2f}".rstrip("0").rstrip(".")
