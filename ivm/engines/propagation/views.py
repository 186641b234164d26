"""Semijoin and projection views over a free-connex join tree ([25]; Hu & Wang §2, 003 §3.1).

Per tree node n with ``key(n) = n ∩ parent(n)``:

- the *semijoin view* ``V_s(n) = R_n ⋉ V_p(c1) ⋉ … ⋉ V_p(ck)`` over its children;
- the *projection view* ``V_p(n) = π_key(n) V_s(n)``.

A generalized node g holds value v in ``V_s(g)`` iff v ∈ ``V_p(c)`` for every
child c.  Both views are linear in size and no join is materialized.  Data
structures (003 §3.1 [PROPOSAL, standard]):

- atom node n: ``mult[n]`` (the present tuples with their Z-multiplicities),
  ``cnt[n][t]`` = #children c with π_key(c) t ∈ V_p(c), and per child
  ``idx[n][c]``: key(c)-value → the n-tuples with that key (for the fan-out);
- generalized node g: ``cnt[g][v]`` = #children holding v;
- every node: ``members[n]``: key(n)-value → the V_s members with that key, so
  ``V_p(n)`` is its key set, and the E_con nodes' ``Out`` lists (no dead ends)
  are the same groups;
- an EXTENDER node x: ``ext[x]``: key → distinct π_{x∩y} of its V_s tuples with
  support counts.

Cost: an update costs O(1) plus O(1) per counter change and per status flip
(``set_on``/``set_off``); [25] bounds the total by O(λ|S|) with λ the
enclosureness, which is O(1) on the trees the planner builds for the
patterns MixDetect accepts (Lemma 4.16; Cor 1.6 for insert-only, Lemma 3.8
for FIFO).  ``work`` counts those units.

Enumeration (003 §3.1): top-down over E_con, odometer-style, then the
extenders: O(1) delay for the distinct answers (:meth:`SemijoinViews.answers`).
Multiplicities over Z-relations (DESIGN §4) factor into subtree weights below
the E_con frontier and extender sums, computed on demand and memoized per
enumeration (O(N) once per enumeration, then O(1) per answer); the paper's
set semantics needs none of it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from operator import itemgetter
from typing import Any

from ivm.query.join_tree import JoinTree
from ivm.query.model import Query
from ivm.updates import Row

Projector = Callable[[tuple[Any, ...]], tuple[Any, ...]]


def projector(positions: tuple[int, ...]) -> Projector:
    """``v -> tuple(v[p] for p in positions)``, as fast as Python allows."""
    if not positions:
        return _empty
    if len(positions) == 1:
        return _Single(positions[0])
    return itemgetter(*positions)


def _empty(_: tuple[Any, ...]) -> tuple[Any, ...]:
    return ()


class _Single:
    __slots__ = ("p",)

    def __init__(self, p: int) -> None:
        self.p = p

    def __call__(self, v: tuple[Any, ...]) -> tuple[Any, ...]:
        return (v[self.p],)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_Single, (self.p,))


class SemijoinViews:
    """The views of one join tree; see the module docstring.

    Parameters
    ----------
    query:
        A self-join-free CQ (COUNT aggregate); atoms are read by position.
    tree:
        A valid free-connex join tree (``ivm.query.join_tree``): E_con nodes must
        be generalized with attributes ⊆ y, and every free variable is in some
        E_con node or an EXTENDER's own attributes (checked: ``ValueError``).
    """

    def __init__(self, query: Query, tree: JoinTree) -> None:
        self.query = query
        self.tree = tree
        nodes = tree.nodes
        n = len(nodes)
        free = set(query.free)
        self.parent = [node.parent for node in nodes]
        self.atom = [node.atom for node in nodes]
        self.children: list[list[int]] = [[] for _ in range(n)]
        for i, node in enumerate(nodes):
            if node.parent is not None:
                self.children[node.parent].append(i)
        self.nkids = [len(c) for c in self.children]
        # how a node's value is laid out: an atom's row, or a generalized node's sorted attributes
        self.layout: list[dict[str, int]] = []
        for node in nodes:
            if node.atom is None:
                self.layout.append({v: p for p, v in enumerate(sorted(node.attrs))})
            else:
                terms = query.atoms[node.atom].terms
                self.layout.append({v: terms.index(v) for v in set(terms)})
        self.key_vars: list[tuple[str, ...]] = []
        self.key_of: list[Projector] = []  # own value -> key(n)
        self.key_from_parent: list[Projector] = []  # parent's value -> key(n)
        for i, node in enumerate(nodes):
            p = node.parent
            kv = tuple(sorted(node.attrs & nodes[p].attrs)) if p is not None else ()
            self.key_vars.append(kv)
            self.key_of.append(projector(tuple(self.layout[i][v] for v in kv)))
            self.key_from_parent.append(projector(tuple(self.layout[p][v] for v in kv)) if p is not None else _empty)
        self.extender = [node.role == "extender" for node in nodes]
        self.node_of_atom = {node.atom: i for i, node in enumerate(nodes) if node.atom is not None}
        self.econ = tree.connex
        self._check_enumerable(free)
        # state
        self.mult: list[dict[Row, int]] = [{} for _ in range(n)]
        self.cnt: list[dict[Any, int]] = [{} for _ in range(n)]
        self.idx: list[dict[int, dict[Any, dict[Row, None]]]] = [{c: {} for c in self.children[i]} for i in range(n)]
        self.members: list[dict[Any, dict[Any, None]]] = [{} for _ in range(n)]
        self.ext: list[dict[Any, dict[Any, int]]] = [{} for _ in range(n)]
        self.ext_proj: list[Projector] = [
            projector(tuple(self.layout[i][v] for v in sorted(nodes[i].attrs & free))) for i in range(n)
        ]
        self.on_flips = [0] * n
        self.off_flips = [0] * n
        self.work = 0

    def _check_enumerable(self, free: set[str]) -> None:
        nodes = self.tree.nodes
        covered: set[str] = set()
        for i in self.econ:
            if nodes[i].atom is not None or not nodes[i].attrs <= free:
                raise ValueError(f"E_con node {i} must be generalized with output attributes only")
            covered |= nodes[i].attrs
        self.ext_order: list[int] = []
        for i in self._preorder():
            if self.extender[i]:
                if not set(self.key_vars[i]) <= covered:
                    raise ValueError(f"extender {self.query.atoms[nodes[i].atom]} has a key outside the answer")
                self.ext_order.append(i)
                covered |= nodes[i].attrs & free
        if not free <= covered:
            raise ValueError(f"the join tree does not cover the outputs {sorted(free - covered)}")
        # E_con in preorder (root first), each with its parent's position in that order
        order = [i for i in self._preorder() if i in self.econ]
        pos = {i: k for k, i in enumerate(order)}
        self.econ_order = [(i, pos.get(self.parent[i], -1)) for i in order]
        # where each output variable is read: (slot, position); slots: E_con then extenders
        where: dict[str, tuple[int, int]] = {}
        for k, (i, _) in enumerate(self.econ_order):
            for v, p in self.layout[i].items():
                where.setdefault(v, (k, p))
        for k, i in enumerate(self.ext_order):
            attrs = sorted(nodes[i].attrs & free)
            for p, v in enumerate(attrs):
                where.setdefault(v, (len(self.econ_order) + k, p))
        self.head = [where[v] for v in self.query.free]
        # an extender's key read from the partial answer
        self.ext_key: list[list[tuple[int, int]]] = [[where[v] for v in self.key_vars[i]] for i in self.ext_order]
        self.frontier = [
            (c, pos[i]) for i in order for c in self.children[i] if c not in self.econ and not self.extender[c]
        ]

    def _preorder(self) -> list[int]:
        out: list[int] = []
        stack = [0]
        while stack:
            i = stack.pop()
            out.append(i)
            stack.extend(reversed(self.children[i]))
        return out

    # -- updates ------------------------------------------------------------------------------

    def update(self, atom: int, row: Row, m: int) -> None:
        """Apply ``δR_atom = {row ↦ m}`` (``row`` passed the atom's selections)."""
        n = self.node_of_atom[atom]
        mults = self.mult[n]
        old = mults.get(row, 0)
        new = old + m
        self.work += 1
        if new:
            mults[row] = new
        else:
            mults.pop(row, None)
        if old and new:
            return  # the tuple stays present: only its multiplicity changed
        if new:  # insert: init cnt by O(#children) lookups
            have = 0
            for c in self.children[n]:
                k = self.key_from_parent[c](row)
                self.idx[n][c].setdefault(k, {})[row] = None
                if k in self.members[c]:
                    have += 1
            self.cnt[n][row] = have
            if have == self.nkids[n]:
                self.set_on(n, row)
        else:  # delete
            if self.cnt[n].pop(row) == self.nkids[n]:
                self.set_off(n, row)
            for c in self.children[n]:
                k = self.key_from_parent[c](row)
                group = self.idx[n][c][k]
                del group[row]
                if not group:
                    del self.idx[n][c][k]

    def set_on(self, n: int, v: Any) -> None:
        """v enters V_s(n): V_p(n) gains a supporter; propagate if the key appeared."""
        self.on_flips[n] += 1
        self.work += 1
        k = self.key_of[n](v)
        group = self.members[n].get(k)
        appeared = group is None
        if appeared:
            group = self.members[n][k] = {}
        group[v] = None
        if self.extender[n]:
            slot = self.ext[n].setdefault(k, {})
            proj = self.ext_proj[n](v)
            slot[proj] = slot.get(proj, 0) + 1
        if appeared and self.parent[n] is not None:
            self.propagate(n, k, 1)

    def set_off(self, n: int, v: Any) -> None:
        """v leaves V_s(n); propagate if its key left V_p(n)."""
        self.off_flips[n] += 1
        self.work += 1
        k = self.key_of[n](v)
        group = self.members[n][k]
        del group[v]
        if self.extender[n]:
            slot = self.ext[n][k]
            proj = self.ext_proj[n](v)
            if slot[proj] == 1:
                del slot[proj]
                if not slot:
                    del self.ext[n][k]
            else:
                slot[proj] -= 1
        if not group:
            del self.members[n][k]
            if self.parent[n] is not None:
                self.propagate(n, k, -1)

    def propagate(self, c: int, k: Any, d: int) -> None:
        """Key k of child c entered (d = 1) or left (d = -1) V_p(c): update the parent's counters."""
        p = self.parent[c]
        assert p is not None
        full = self.nkids[p]
        cnt = self.cnt[p]
        if self.atom[p] is None:  # generalized: Cnt[p][k] += d
            self.work += 1
            old = cnt.get(k, 0)
            new = old + d
            if new:
                cnt[k] = new
            else:
                del cnt[k]
            if new == full:
                self.set_on(p, k)
            elif old == full:
                self.set_off(p, k)
            return
        rows = self.idx[p][c].get(k)
        if not rows:
            return
        self.work += len(rows)
        for u in rows:  # the fan-out: each p-tuple's counter
            old = cnt[u]
            cnt[u] = old + d
            if old + d == full:
                self.set_on(p, u)
            elif old == full:
                self.set_off(p, u)

    # -- reading -------------------------------------------------------------------------------

    def nonempty(self) -> bool:
        """Is the answer non-empty (V_s(root) ≠ ∅)?  O(1)."""
        return bool(self.members[0])

    def answers(self) -> Iterator[tuple[Any, ...]]:
        """The distinct answers in head order, O(1) delay (003 §3.1)."""
        for values in self._odometer():
            yield tuple(values[s][p] for s, p in self.head)

    def _odometer(self) -> Iterator[list[Any]]:
        if not self.members[0]:
            return
        econ = self.econ_order
        exts = self.ext_order
        e = len(econ)
        values: list[Any] = [None] * (e + len(exts))
        values[0] = ()
        members = self.members
        kfp = self.key_from_parent

        def rec(j: int) -> Iterator[list[Any]]:
            if j == len(values):
                yield values
                return
            if j < e:
                i, par = econ[j]
                group = members[i].get(kfp[i](values[par]))
            else:
                i = exts[j - e]
                key = tuple(values[s][p] for s, p in self.ext_key[j - e])
                group = self.ext[i].get(key)
            for v in group or ():
                values[j] = v
                yield from rec(j + 1)

        yield from rec(1)

    def enumerate(self) -> Iterator[tuple[tuple[Any, ...], int]]:
        """``(answer, multiplicity)`` over Z-relations, zero multiplicities skipped.

        The multiplicity of an answer is the product of the weights of the
        non-E_con subtrees hanging under its E_con values (extender subtrees
        excluded) and of the extenders' sums for its extended values; weights
        are memoized for the duration of the enumeration.
        """
        memo: dict[tuple[int, Any], int] = {}
        ememo: dict[tuple[int, Any], dict[Any, int]] = {}
        e = len(self.econ_order)
        for values in self._odometer():
            m = 1
            for c, slot in self.frontier:
                m *= self._weight(c, self.key_from_parent[c](values[slot]), memo)
                if not m:
                    break
            if m:
                for j, i in enumerate(self.ext_order):
                    key = tuple(values[s][p] for s, p in self.ext_key[j])
                    m *= self._extension(i, key, ememo, memo)[values[e + j]]
            if m:
                yield tuple(values[s][p] for s, p in self.head), m

    def _weight(self, n: int, k: Any, memo: dict[tuple[int, Any], int]) -> int:
        """Σ over V_s(n) members with key k of their Z-weight (extender children excluded)."""
        got = memo.get((n, k))
        if got is not None:
            return got
        total = 0
        generalized = self.atom[n] is None
        kids = [c for c in self.children[n] if not self.extender[c]]
        for v in self.members[n].get(k, ()):
            w = 1 if generalized else self.mult[n][v]
            for c in kids:
                w *= self._weight(c, self.key_from_parent[c](v), memo)
                if not w:
                    break
            total += w
        memo[(n, k)] = total
        return total

    def _extension(
        self, x: int, k: Any, ememo: dict[tuple[int, Any], dict[Any, int]], memo: dict[tuple[int, Any], int]
    ) -> dict[Any, int]:
        got = ememo.get((x, k))
        if got is not None:
            return got
        out: dict[Any, int] = {}
        kids = [c for c in self.children[x] if not self.extender[c]]
        for v in self.members[x].get(k, ()):
            w = self.mult[x][v]
            for c in kids:
                w *= self._weight(c, self.key_from_parent[c](v), memo)
            proj = self.ext_proj[x](v)
            out[proj] = out.get(proj, 0) + w
        ememo[(x, k)] = out
        return out

    def flips(self, atom: int) -> tuple[int, int]:
        """(on, off) status flips of the atom's tuples so far (Ex. 2.8: λ shows up here)."""
        n = self.node_of_atom[atom]
        return self.on_flips[n], self.off_flips[n]

    def sizes(self) -> dict[str, int]:
        return {
            "tuples": sum(len(m) for m in self.mult),
            "semijoin_members": sum(sum(len(g) for g in ms.values()) for ms in self.members),
            "projection_keys": sum(len(ms) for ms in self.members),
        }
