"""MixDetect: O(1) maintenance under a mixed update pattern (Hu & Wang §4, Alg. 2; 003 §3.4).

For a free-connex query and a pattern σ (:class:`UpdatePatterns`):

1. *Simplify*: while some e is reducible with anchor e' (``V•`` of the current
   query) and both are insertion-only, remove e (it becomes a FILTER of e').
2. *Base case 1*: if the simplified query is not weak-q-hierarchical, false
   (it contains a hook or path core: Lemma 3.11, with the hook core corrected
   in :mod:`ivm.query.weak_q_hierarchical`).
3. Build the query-update graph H: an edge ``e' -> e`` iff e is not in the
   skeleton, e' anchors e, and σ({e}) = I or σ({e, e'}) ∈ {I, F}.  ``E∘`` is the
   set of nodes of in-degree 0 plus one representative of every source SCC of H
   that they cannot reach (the digest's fix, SAT-checked; without it
   π_x1(R1(x1,x2) ⋈ R2(x2) ⋈ R3(x2)) with only (R2,R3) jointly FIFO is
   wrongly accepted).
4. *Base cases 2/3*: true iff ``Q[E∘]`` is q-hierarchical.

True means O(1) amortized update time with O(1)-delay enumeration (Lemma
4.16); false means no O(√|D|^(1−ε)) update time (Thm 1.12).  Non-free-connex
queries are never O(1) under any pattern (Thm 1.7).
"""

from __future__ import annotations

from dataclasses import dataclass

from ivm.query.free_connex import free_connex
from ivm.query.model import Query
from ivm.query.parse import parse  # noqa: F401  (doctests)
from ivm.query.patterns import UpdatePatterns, parse_patterns  # noqa: F401  (doctests)
from ivm.query.q_hierarchical import q_hierarchical
from ivm.query.verdict import Verdict
from ivm.query.weak_q_hierarchical import anchor_rule, trim, unique_attributes, weak_q_hierarchical


@dataclass(frozen=True)
class MixDetectTrace:
    """What MixDetect did: removed insertion-only atoms with their anchors, the
    simplified atoms, the skeleton, the graph H (edges ``(e', e)``) and ``E∘``."""

    filters: dict[int, int]
    simplified: tuple[int, ...]
    skeleton: tuple[int, ...]
    edges: tuple[tuple[int, int], ...]
    e_circ: tuple[int, ...]


def mixdetect(query: Query, patterns: UpdatePatterns | None = None) -> Verdict:
    """Can ``query`` be maintained in O(1) amortized time under ``patterns``?  Witness: the trace.

    Q_hook with R2, R3 insertion-only and R1 arbitrary is O(1); with only R3
    insertion-only it is not (Ex. 4.5):

    >>> q = parse("Q(x1) :- R1(x1,x2), R2(x2,x3), R3(x3)")
    >>> bool(mixdetect(q, parse_patterns(["R2=insert-only", "R3=insert-only"])))
    True
    >>> mixdetect(q, parse_patterns(["R3=insert-only"])).reason.split(":")[0]
    'MixDetect false'
    """
    sigma = patterns or UpdatePatterns()
    fc = free_connex(query)
    if not fc:
        return Verdict(False, f"MixDetect false: {fc.reason} (never O(1), Thm 1.7)", fc.witness)
    rel = [a.relation for a in query.atoms]
    current = list(range(len(query.atoms)))
    filters: dict[int, int] = {}
    changed = True
    while changed:
        changed = False
        sub = query.induced(current)
        unique = unique_attributes(query, current)
        for k, e in enumerate(current):
            if sigma.level(rel[e]) != "I":
                continue
            anchor = next(
                (
                    current[j]
                    for j in range(len(current))
                    if sigma.level(rel[current[j]]) == "I" and anchor_rule(sub, k, j, unique)
                ),
                None,
            )
            if anchor is not None:
                filters[e] = anchor
                current.remove(e)
                changed = True
                break
    simplified = query.induced(current)
    wq = weak_q_hierarchical(simplified)
    if not wq:
        trace = MixDetectTrace(filters, tuple(current), (), (), ())
        return Verdict(False, f"MixDetect false: after removing insertion-only filters, {wq.reason}", trace)
    result = trim(simplified)
    skeleton = {current[i] for i in result.skeleton}
    unique = unique_attributes(simplified)
    edges = []
    for jb, b in enumerate(current):
        if b in skeleton:
            continue
        for ja, a in enumerate(current):
            if anchor_rule(simplified, jb, ja, unique) is None:
                continue
            if sigma.level(rel[b]) == "I" or sigma.pair(rel[a], rel[b]) in ("I", "F"):
                edges.append((a, b))
    e_circ = _sources(current, edges)
    core = query.induced(e_circ)
    qh = q_hierarchical(core)
    trace = MixDetectTrace(filters, tuple(current), tuple(sorted(skeleton)), tuple(edges), tuple(e_circ))
    names = "{" + ", ".join(str(a) for a in core.atoms) + "}"
    if qh:
        return Verdict(True, f"MixDetect true: Q[E∘] = {names} is q-hierarchical", trace)
    reason = qh.reason.removeprefix("not q-hierarchical, ")
    return Verdict(False, f"MixDetect false: Q[E∘] = {names} is not q-hierarchical, {reason}", trace)


def _sources(nodes: list[int], edges: list[tuple[int, int]]) -> list[int]:
    """In-degree-0 nodes plus one representative of every source SCC they cannot reach."""
    succ: dict[int, set[int]] = {n: set() for n in nodes}
    indeg = dict.fromkeys(nodes, 0)
    for a, b in edges:
        if b not in succ[a]:
            succ[a].add(b)
            indeg[b] += 1
    chosen = [n for n in nodes if indeg[n] == 0]

    def reach(starts: list[int]) -> set[int]:
        seen = set(starts)
        stack = list(starts)
        while stack:
            for m in succ[stack.pop()]:
                if m not in seen:
                    seen.add(m)
                    stack.append(m)
        return seen

    covered = reach(chosen)
    for n in nodes:  # in index order: the smallest unreached node of a source SCC represents it
        if n in covered:
            continue
        mine = reach([n])
        if not any(m not in mine and n in reach([m]) for m in nodes):  # n's SCC has no incoming edge
            chosen.append(n)
            covered |= mine
    return sorted(chosen)
