"""Triangle listing ``Q(a,b,c) = R(a,b)·S(b,c)·T(c,a)`` with constant-delay enumeration.

IVM^eps Appendix E, **Theorem 21**: O(|D|^{3/2}) preprocessing,
O(|D|^max(eps,1-eps)) amortized update time, constant-delay enumeration of
the distinct result tuples with their multiplicities, O(|D|^{3/2}) space.

The eight skew-aware parts ``Q_rst`` (r, s, t ∈ {h, l}) are covered without
overlap by four structures (Figure 12), in the slot notation of
:mod:`.triangle` (slot ``i`` holds ``(x_i, x_{i+1})``):

- ``QL``: the listing ``Q^L = Σ_u K_0^u·K_1^u·K_2^u`` of ``Q_hhh + Q_lll``, materialized;
- for each slot ``i``, the factorized tree ``Q^F_i``: the listing view
  ``W[i](x_i, x_{i+1}, x_{i+2}) = K_i^h(x_i,x_{i+1})·K_{i+1}^l(x_{i+1},x_{i+2})``
  grouped by ``(x_i, x_{i+2})`` (so ``W[0] = V_RS(a,b,c)`` grouped by
  ``(a,c)``), and its top view ``F[i]``: the pairs ``(x_i, x_{i+2})`` with a
  non-empty group whose closing tuple ``K_{i+2}(x_{i+2}, x_i)`` is non-zero.
  ``F[0] = Q_hlt`` covers hlh and hll, ``F[1] = Q_rhl`` covers hhl and lhl,
  ``F[2] = Q_lsh`` covers lhh and llh.

Enumeration walks ``QL``, then each ``F[i]`` and, under each pair, its group of
``W[i]``: every step yields an answer, so the delay is constant.  ``F[i]``
holds *supports* (non-empty group and non-zero closing tuple) rather than the
sums ``V^(B)·T`` of Figure 12, so Z-relations whose sums cancel cannot hide
answers (the digest's §5.3 note on negative multiplicities).

The ``.delta`` output: once tracking is on, each update records the change
of every answer it touches, ``m·K_j(β,c)·K_k(c,α)`` for each ``c``; the ``c``
are found through ``W[j]`` and the bounded parts, so recording costs
O(N^max + |changed answers|).  :meth:`IVMEpsListing.drain_delta` returns and
clears the net changes since the previous drain.  As in the q-hierarchical
engine, tracking starts at the first ``drain_delta`` call, which returns the
whole current result (the change since the empty start); until then updates
pay nothing for it (``track_delta=True`` tracks from the start instead).

``implementation="compiled"`` (and ``"auto"``, the default, when it was built)
keeps the partitions, the count's views and the listing's views in the
compiled state (:mod:`.compact`), where Figure 13 runs in C, one call per
batch, with the same bounds.  There Q^L, W and F hold *membership* only: they
change when a tuple appears or vanishes, and an answer's multiplicity is the
product of the stored multiplicities, read when it is enumerated (an entry of
Q^L or of a group is one product, never a sum, so this is the same value).
``"python"`` is the reference below.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ivm.engines.ivm_eps.compact import CompactGroups, CompactListing, CompactPart, CompactTops
from ivm.engines.ivm_eps.engine import EpsSpec, IVMEps
from ivm.engines.ivm_eps.partition import HeavyLightPartition, Index
from ivm.engines.ivm_eps.triangle import IVMEpsTriangle
from ivm.engines.ivm_eps.variants import register
from ivm.query.model import Query
from ivm.updates import Row

Triple = tuple[object, object, object]
Groups = dict[tuple[object, object], dict[object, int]]


def canonical(i: int, alpha: object, beta: object, gamma: object) -> Triple:
    """The values of ``(u0, u1, u2)`` for ``x_i = alpha, x_{i+1} = beta, x_{i+2} = gamma``.

    >>> canonical(0, "a", "b", "c"), canonical(1, "b", "c", "a"), canonical(2, "c", "a", "b")
    (('a', 'b', 'c'), ('a', 'b', 'c'), ('a', 'b', 'c'))
    """
    if i == 0:
        return (alpha, beta, gamma)
    if i == 1:
        return (gamma, alpha, beta)
    return (beta, gamma, alpha)


def _add(table: dict, key: object, m: int) -> None:
    """``table[key] += m``, removing zero entries."""
    new = table.get(key, 0) + m
    if new:
        table[key] = new
    else:
        del table[key]


def _matches(left: dict[object, int] | None, right: dict[object, int] | None) -> Iterator[tuple]:
    """``(z, left[z], right[z])`` for the common keys, iterating the smaller map."""
    if not left or not right:
        return
    if len(left) <= len(right):
        for z, u in left.items():
            v = right.get(z)
            if v:
                yield z, u, v
    else:
        for z, v in right.items():
            u = left.get(z)
            if u:
                yield z, u, v


@register("listing")
class IVMEpsListing(IVMEpsTriangle):
    """Triangle listing under updates (Theorem 21); also keeps the count ``Q``.

    ``result()`` is the answer map ``{(a, b, c): multiplicity}`` (free
    variables in head order, no zero entries); ``enumerate()`` yields the same
    pairs with constant delay; ``drain_delta()`` the changes for the ``.delta``
    topic.

    >>> from ivm.engines.ivm_eps.engine import IVMEps
    >>> from ivm.query.parse import parse
    >>> e = IVMEps(parse("Q(a,b,c) :- R(a,b), S(b,c), T(c,a)"), eps=0.5)
    >>> e.apply([("R", (1, 2), 2), ("S", (2, 3), 1), ("T", (3, 1), 1)])
    >>> list(e.enumerate()), e.drain_delta(), e.drain_delta()
    ([((1, 2, 3), 2)], [((1, 2, 3), 2)], [])
    """

    def __init__(
        self, query: Query, eps: EpsSpec = 0.5, track_delta: bool = False, implementation: str = "auto"
    ) -> None:
        """``implementation``: ``"python"`` (the reference), ``"compiled"`` or ``"auto"`` (the compiled state
        when it was built: partitions, views and the listing's views in C)."""
        super().__init__(query, eps, implementation=implementation)
        order = self.shape.variables
        self.head_positions = tuple(order.index(v) for v in query.free)
        self.listing: dict[Triple, int] = {}  # Q^L
        self.groups: tuple[Groups, Groups, Groups] = ({}, {}, {})  # W[i]
        self.tops: tuple[set, set, set] = (set(), set(), set())  # F[i]
        self.track_delta = track_delta
        self.pending_delta: dict[Triple, int] = {}
        if isinstance(self.parts[0], CompactPart):
            state = self.parts[0].state
            state.enable_listing()
            state.set_tracking(track_delta)
            self._compact_listing_views(state)

    def _compact_listing_views(self, state: Any) -> None:
        """Read-only views of the compiled Q^L, W and F under the reference's names (for the checker)."""
        self.listing = CompactListing(state)  # type: ignore[assignment]
        self.groups = (CompactGroups(state, 0), CompactGroups(state, 1), CompactGroups(state, 2))  # type: ignore[assignment]
        self.tops = (CompactTops(state, 0), CompactTops(state, 1), CompactTops(state, 2))  # type: ignore[assignment]

    def _to_python_partitions(self) -> None:
        """The compiled state to the reference's Python values (a multiplicity it does not store): the
        partitions and count views, then Q^L, W, F and the pending changes, all O(size)."""
        state = self.parts[0].state  # type: ignore[attr-defined]
        listing, groups = state.listing_dict(), [state.groups_dict(i) for i in range(3)]
        tops = [state.tops_set(i) for i in range(3)]
        pending = dict(state.drain((0, 1, 2)))
        super()._to_python_partitions()
        self.listing = listing
        self.groups = (groups[0], groups[1], groups[2])
        self.tops = (tops[0], tops[1], tops[2])
        self.pending_delta = pending if self.track_delta else {}

    @classmethod
    def refuses(cls, query: Query) -> str | None:
        reason = IVMEps.refuses(query)
        if reason is None and not query.free:
            return "no free variables: this is the triangle count (IVMEpsTriangle)"
        return reason

    # -- the engine protocol ---------------------------------------------------------

    def result(self) -> dict[Row, int]:  # type: ignore[override]
        """All answers ``{(a, b, c): multiplicity}``; the count is ``stats()["result"]``."""
        return dict(self.enumerate())

    def enumerate(self) -> Iterator[tuple[Row, int]]:
        """Each answer once with its multiplicity, with constant delay (Theorem 21)."""
        pos = self.head_positions
        if isinstance(self.parts[0], CompactPart):
            yield from self.parts[0].state.answers(pos)
            return
        for triple, m in self.listing.items():
            yield tuple(triple[p] for p in pos), m
        parts = self.parts
        for i in range(3):
            closing = parts[(i + 2) % 3]
            groups = self.groups[i]
            for key in self.tops[i]:
                left, right = key
                t = closing.get(right, left)
                for mid, w in groups[key].items():
                    triple = canonical(i, left, mid, right)
                    yield tuple(triple[p] for p in pos), w * t

    def drain_delta(self) -> list[tuple[Row, int]]:
        """The net answer changes ``(answer, +/- multiplicity)`` since the previous drain.

        This is what the ``<query>.delta`` topic publishes after a batch.  The
        first call switches tracking on and returns the whole current result.
        """
        if not self.track_delta:
            self.track_delta = True
            self.pending_delta = {}
            if isinstance(self.parts[0], CompactPart):
                self.parts[0].state.set_tracking(True)
            return list(self.enumerate())
        pos = self.head_positions
        if isinstance(self.parts[0], CompactPart):
            return self.parts[0].state.drain(pos)  # type: ignore[no-any-return]
        out = [(tuple(t[p] for p in pos), m) for t, m in self.pending_delta.items() if m]
        self.pending_delta = {}
        return out

    def stats(self) -> dict[str, int | float]:
        stats = super().stats()
        if isinstance(self.parts[0], CompactPart):
            entries, members, pending = self.parts[0].state.listing_sizes()
            stats.update(listing_entries=entries, factorized_groups=members, pending_delta=pending)
            return stats
        stats["listing_entries"] = len(self.listing)
        stats["factorized_groups"] = sum(len(g) for g in self.groups)
        stats["pending_delta"] = len(self.pending_delta)
        return stats

    # -- ApplyUpdate (Figure 13) -------------------------------------------------------

    def apply_update(self, i: int, heavy: bool, x: object, y: object, m: int, count: bool = True) -> None:
        """Figure 13 for ``δK_i^r = {(x, y) ↦ m}``: Q^L, the listing views and the tops.

        Cost O(N^max(eps,1-eps)) (plus the size of the recorded delta).
        """
        parts = self.parts
        j, k = (i + 1) % 3, (i + 2) % 3
        pj, pk = parts[j], parts[k]
        if count and self.track_delta:
            self._record_delta(i, x, y, m, pj, pk)
        listing = self.listing
        # Q^L: r = h extends K_j^h·K_k^h, r = l extends K_j^l·K_k^l.
        row_j = (pj.hf if heavy else pj.lf).get(y)
        col_k = (pk.hb if heavy else pk.lb).get(x)
        for c, s, t in _matches(row_j, col_k):
            _add(listing, canonical(i, x, y, c), m * s * t)
        if heavy:  # δW[i](x, y, c) = m·K_j^l(y, c); top F[i] needs K_k(c, x) ≠ 0
            light_row = pj.lf.get(y)
            if light_row is not None:
                groups, top = self.groups[i], self.tops[i]
                for c, s in light_row.items():
                    key = (x, c)
                    group = groups.get(key)
                    if group is None:
                        groups[key] = {y: m * s}
                        if pk.get(c, x):
                            top.add(key)
                    else:
                        _add(group, y, m * s)
                        if not group:
                            del groups[key]
                            top.discard(key)
        else:  # δW[k](g, x, y) = K_k^h(g, x)·m; top F[k] needs K_j(y, g) ≠ 0
            heavy_col = pk.hb.get(x)
            if heavy_col is not None:
                groups, top = self.groups[k], self.tops[k]
                for g, t in heavy_col.items():
                    key = (g, y)
                    group = groups.get(key)
                    if group is None:
                        groups[key] = {x: t * m}
                        if pj.get(y, g):
                            top.add(key)
                    else:
                        _add(group, x, t * m)
                        if not group:
                            del groups[key]
                            top.discard(key)
        super().apply_update(i, heavy, x, y, m, count)
        # F[j] pairs (y, x) are closed by K_i(x, y), which just changed.
        key = (y, x)
        if key in self.groups[j]:
            if parts[i].get(x, y):
                self.tops[j].add(key)
            else:
                self.tops[j].discard(key)

    def _record_delta(
        self, i: int, x: object, y: object, m: int, pj: HeavyLightPartition, pk: HeavyLightPartition
    ) -> None:
        """Record ``δQ(x, y, c) = m·K_j(y, c)·K_k(c, x)`` for every ``c``, output-sensitively."""
        delta = self.pending_delta
        light_row = pj.lf.get(y)
        if light_row is not None:  # fewer than 1.5N^eps candidates
            for c, s in light_row.items():
                t = pk.get(c, x)
                if t:
                    _add(delta, canonical(i, x, y, c), m * s * t)
            return
        heavy_row = pj.hf.get(y)
        if heavy_row is None:
            return
        for c, s, t in _matches(heavy_row, pk.hb.get(x)):  # heavy C-keys: ≤ 2N^{1-eps}
            _add(delta, canonical(i, x, y, c), m * s * t)
        group = self.groups[(i + 1) % 3].get((y, x))  # K_j^h(y,c)·K_k^l(c,x), already joined
        if group is not None:
            for c, w in group.items():
                _add(delta, canonical(i, x, y, c), m * w)

    # -- rebalancing -------------------------------------------------------------------

    def recompute_views(self) -> None:
        """Rebuild the count views, ``W``, ``F`` and ``Q^L`` (major rebalancing, O(N^{3/2}))."""
        super().recompute_views()
        parts = self.parts
        groups_all: list[Groups] = []
        tops_all: list[set] = []
        for i in range(3):
            heavy_bwd: Index = parts[i].hb
            light_fwd: Index = parts[(i + 1) % 3].lf
            closing = parts[(i + 2) % 3]
            groups: Groups = {}
            for b, column in heavy_bwd.items():
                right = light_fwd.get(b)
                if right is None:
                    continue
                for a, r in column.items():
                    for c, s in right.items():
                        key = (a, c)
                        group = groups.get(key)
                        if group is None:
                            groups[key] = {b: r * s}
                        else:
                            group[b] = r * s
            groups_all.append(groups)
            tops_all.append({key for key in groups if closing.get(key[1], key[0])})
        self.groups = (groups_all[0], groups_all[1], groups_all[2])
        self.tops = (tops_all[0], tops_all[1], tops_all[2])
        listing: dict[Triple, int] = {}
        p0, p1, p2 = parts
        for fwd0, fwd1, bwd2 in ((p0.hf, p1.hf, p2.hb), (p0.lf, p1.lf, p2.lb)):
            for a, row in fwd0.items():
                col = bwd2.get(a)
                if col is None:
                    continue
                for b, r in row.items():
                    for c, s, t in _matches(fwd1.get(b), col):
                        listing[(a, b, c)] = r * s * t
        self.listing = listing
