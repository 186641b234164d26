"""The answer changes of one batch from the batch's input changes: the delta rule, factorized.

The propagation engine keeps semijoin and projection views, which answer
"which answers exist" with O(1) delay (003 §3.1) but not "which answers
changed".  Diffing two enumerations (the old ``drain_delta``) costs
O(N + |Q(D)|) per batch however small the batch.  :class:`AnswerDelta`
computes the changes from the batch instead, by the delta rule of IVM over
Z-relations (DBSP; F-IVM 001 §3): with the atoms ordered R_1..R_n and the
batch's net changes ΔR_i,

    δQ = Σ_i  Q(R_1', ..., R_{i-1}', ΔR_i, R_{i+1}, ..., R_n)

where R' is the relation after the batch and R before it (R = R' - ΔR, read
point-wise, so no copy of the old state is kept).  The sum telescopes, so it
is exact for any batch, self-joins included once the atoms of one relation are
given their own relations (``ivm.shards.per_atom_relations``) and the batch's
update is fed to each.

Each term is evaluated over a join tree of the (acyclic: free-connex) query
rooted at atom i, from each tuple of ΔR_i outwards: a child subtree given the
join key is a small Z-relation over its *own* free variables (those it holds
and its parent does not; the running-intersection property makes siblings'
own variables disjoint), memoized per key within the term.  Subtrees without
free variables collapse to one number (a weight), so projections are summed,
never enumerated.

Guarantee
---------
A drain costs O(|ΔD| + the factorized delta join of ΔD): the index entries the
join of the batch's tuples touches, plus the answers it produces.  It never
reads the rest of the result or of the database, so it does not grow with
|Q(D)| or N when the changed tuples' join partners do not (the unit test
counts it in :attr:`AnswerDelta.work`).  For Boolean and projection queries
the delta join is factorized, so it is bounded by the partners of the changed
tuples, not by the products of their degrees.  Keeping the indexes costs O(1)
per effective update (one dictionary operation per join-tree neighbour) and
O(N) space, paid only once tracking started (the first drain).

>>> from ivm.query.parse import parse
>>> q = parse("Q(a) :- R(a,b), S(b)")
>>> d = AnswerDelta(q)
>>> base = {"R": {(1, 2): 1, (3, 2): 2}, "S": {}}
>>> d.start(base)
>>> base["S"][(2,)] = 1
>>> d.record("S", (2,), 1, 0)
>>> sorted(d.drain(base))
[((1,), 1), ((3,), 2)]
>>> d.drain(base)
[]
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ivm.engines.propagation.views import Projector, projector
from ivm.query.acyclic import gyo, join_tree_valid
from ivm.query.model import Query
from ivm.updates import Row

Bag = dict[tuple[Any, ...], int]  # own free values -> Z-weight


class _Edge:
    """The directed join-tree edge parent -> child: the join key and the child's own free variables."""

    __slots__ = ("child", "child_key", "kids", "own", "own_pos", "parent_key", "slot")

    def __init__(self, child: int, slot: int, parent_key: Projector, child_key: Projector) -> None:
        self.child = child
        self.slot = slot  # which of the child's indexes serves this key
        self.parent_key = parent_key  # parent row -> key
        self.child_key = child_key  # child row -> key
        self.kids: list[_Edge] = []
        self.own: tuple[str, ...] = ()  # own free variables, in the order the bags lay them out
        self.own_pos: Projector = projector(())  # child row -> its own values among ``own``


class AnswerDelta:
    """Indexes over the base relations and the batch's net changes; :meth:`drain` gives δQ.

    Parameters
    ----------
    query:
        An acyclic, self-join-free CQ with the COUNT aggregate (Z-multiplicities).

    Attributes
    ----------
    work:
        Index entries and bag entries touched by drains so far (the cost model of the guarantee).
    """

    def __init__(self, query: Query) -> None:
        if not query.self_join_free:
            raise ValueError(f"{query} has a self-join: give each atom its own relation first")
        self.query = query
        atoms = query.atoms
        n = len(atoms)
        self.relation_atom = {a.relation: i for i, a in enumerate(atoms)}
        self._matches = [a.matches for a in atoms]
        variables = [a.variables for a in atoms]
        reduced = gyo(list(variables))
        if not reduced.acyclic:
            raise ValueError(f"{query} is cyclic: the delta rule here walks a join tree")
        parent = dict(reduced.parent)
        roots = [i for i in range(n) if i not in parent]
        for r in roots[1:]:  # a forest: join the components by empty keys (a Cartesian product)
            parent[r] = roots[0]
        assert join_tree_valid(list(variables), parent)
        self.neighbours: list[list[int]] = [[] for _ in range(n)]
        for c, p in parent.items():
            self.neighbours[c].append(p)
            self.neighbours[p].append(c)
        layout = [{v: a.terms.index(v) for v in a.variables} for a in atoms]
        free = set(query.free)
        # one index per (atom, neighbour): key = the shared variables
        self._slot: dict[tuple[int, int], int] = {}
        self._index_keys: list[list[Projector]] = [[] for _ in range(n)]
        for i in range(n):
            for j in self.neighbours[i]:
                shared = sorted(variables[i] & variables[j])
                self._slot[(i, j)] = len(self._index_keys[i])
                self._index_keys[i].append(projector(tuple(layout[i][v] for v in shared)))
        self._edges: dict[tuple[int, int], _Edge] = {}

        def edge(p: int, c: int) -> _Edge:
            got = self._edges.get((p, c))
            if got is not None:
                return got
            shared = sorted(variables[p] & variables[c])
            e = _Edge(
                c,
                self._slot[(c, p)],
                projector(tuple(layout[p][v] for v in shared)),
                projector(tuple(layout[c][v] for v in shared)),
            )
            mine = sorted((variables[c] & free) - set(shared))
            e.own_pos = projector(tuple(layout[c][v] for v in mine))
            e.kids = [edge(c, g) for g in self.neighbours[c] if g != p]
            e.own = tuple(mine) + tuple(v for k in e.kids for v in k.own)
            self._edges[(p, c)] = e
            return e

        # per root atom: its own free values, its edges, and where each head variable sits
        self._roots: list[tuple[Projector, list[_Edge], Projector]] = []
        for i in range(n):
            mine = sorted(variables[i] & free)
            kids = [edge(i, j) for j in self.neighbours[i]]
            order = tuple(mine) + tuple(v for k in kids for v in k.own)
            head = projector(tuple(order.index(v) for v in query.free))
            self._roots.append((projector(tuple(layout[i][v] for v in mine)), kids, head))
        self.index: list[list[dict[Any, dict[Row, None]]]] = [[{} for _ in keys] for keys in self._index_keys]
        self.pending: list[dict[Row, int]] = [{} for _ in range(n)]
        self.tracking = False
        self.work = 0
        self.drains = 0

    # -- maintenance: O(1) per update -----------------------------------------------------------

    def start(self, base: Mapping[str, Mapping[Row, int]]) -> None:
        """Index the current database (O(N), once) and start recording changes."""
        for relation, i in self.relation_atom.items():
            matches = self._matches[i]
            for row in base.get(relation, {}):
                if matches(row):
                    self._present(i, row)
        self.tracking = True

    def record(self, relation: str, row: Row, m: int, before: int) -> None:
        """The engine applied ``relation: row ↦ +m`` to a tuple of multiplicity ``before``.  O(1)."""
        i = self.relation_atom[relation]
        if not self._matches[i](row):
            return
        pending = self.pending[i]
        total = pending.get(row, 0) + m
        if total:
            pending[row] = total
        else:
            del pending[row]
        if not before:
            self._present(i, row)
        elif before + m == 0:
            self._gone(i, row)

    def _present(self, i: int, row: Row) -> None:
        for slot, key in enumerate(self._index_keys[i]):
            self.index[i][slot].setdefault(key(row), {})[row] = None

    def _gone(self, i: int, row: Row) -> None:
        for slot, key in enumerate(self._index_keys[i]):
            groups = self.index[i][slot]
            k = key(row)
            group = groups[k]
            del group[row]
            if not group:
                del groups[k]

    # -- the delta rule -------------------------------------------------------------------------

    def drain(self, base: Mapping[str, Mapping[Row, int]]) -> list[tuple[Row, int]]:
        """δQ of the changes recorded since the last drain (``base``: the relations now), then forget them."""
        self.drains += 1
        out: dict[Row, int] = {}
        atoms = self.query.atoms
        n = len(atoms)
        delta_index = [self._delta_index(i) for i in range(n)]
        now = [base.get(a.relation, {}) for a in atoms]
        for i in range(n):
            changes = self.pending[i]
            if not changes:
                continue
            # atoms before i read the new state, atoms after it the old one
            state = [(now[j], None if j < i else self.pending[j], delta_index[j]) for j in range(n)]
            own, kids, head = self._roots[i]
            memo: dict[tuple[int, int, Any], Bag] = {}
            for row, d in changes.items():
                self.work += 1
                bag: Bag = {own(row): d}
                for e in kids:
                    bag = self._product(bag, self._subtree(e, e.parent_key(row), state, memo))
                    if not bag:
                        break
                for values, w in bag.items():
                    answer = head(values)
                    total = out.get(answer, 0) + w
                    if total:
                        out[answer] = total
                    else:
                        del out[answer]
                    self.work += 1
        for changes in self.pending:
            changes.clear()
        return list(out.items())

    def _delta_index(self, i: int) -> list[dict[Any, list[Row]]]:
        """ΔR_i grouped like R_i's indexes, to find the tuples the batch deleted (old state)."""
        out: list[dict[Any, list[Row]]] = [{} for _ in self._index_keys[i]]
        for slot, key in enumerate(self._index_keys[i]):
            for row in self.pending[i]:
                out[slot].setdefault(key(row), []).append(row)
        return out

    def _subtree(
        self,
        e: _Edge,
        k: Any,
        state: list[tuple[Mapping[Row, int], dict[Row, int] | None, list[dict[Any, list[Row]]]]],
        memo: dict[tuple[int, int, Any], Bag],
    ) -> Bag:
        """The child subtree of ``e`` joined on key ``k``, summed over all but its own free variables."""
        c = e.child
        got = memo.get((c, e.slot, k))
        if got is not None:
            return got
        rel, old, dindex = state[c]
        rows: Any = self.index[c][e.slot].get(k, {})
        if old is not None:  # the old state: the present rows, less the batch's inserts, plus its deletes
            rows = dict.fromkeys([*rows, *dindex[e.slot].get(k, ())])
        out: Bag = {}
        for row in rows:
            self.work += 1
            w = rel.get(row, 0)
            if old is not None:
                w -= old.get(row, 0)
            if not w:
                continue
            bag: Bag = {e.own_pos(row): w}
            for kid in e.kids:
                bag = self._product(bag, self._subtree(kid, kid.parent_key(row), state, memo))
                if not bag:
                    break
            for values, x in bag.items():
                total = out.get(values, 0) + x
                if total:
                    out[values] = total
                else:
                    del out[values]
        memo[(c, e.slot, k)] = out
        return out

    def _product(self, left: Bag, right: Bag) -> Bag:
        """The Cartesian product of two bags over disjoint variables (concatenated values)."""
        if len(right) == 1 and () in right:  # a weight: scale
            w = right[()]
            return {v: x * w for v, x in left.items()}
        out: Bag = {}
        for a, x in left.items():
            for b, y in right.items():
                self.work += 1
                out[a + b] = x * y
        return out
