"""Classical first-order IVM for the triangle count.

IVM^eps §1.1 (baselines): store R, S, T and Q; a single-tuple update
``δR = {(a,b) ↦ m}`` changes the count by ``m · Σ_c S(b,c)·T(c,a)``, computed
by intersecting the two C-lists of ``b`` and ``a``.  Iterating the smaller of
the two lists, an update costs O(min(deg_S(b), deg_T(a))) ⊆ O(|D|) time;
space is O(|D|).  It is IVM^eps at eps ∈ {0, 1} (Theorem 3 special case).

The three atoms of the query are kept as three *slots* in cycle order
``(u0,u1), (u1,u2), (u2,u0)``, each an
:class:`~ivm.engines.ivm_eps.partition.AllLightPartition` (the partition at
eps = 1: key sets in both directions, multiplicities other than 1 aside).  A
relation that occurs in several atoms (the self-join ``E(a,b),E(b,c),E(c,a)``)
feeds each of its slots in turn; by the telescoping delta rule
``Q(E1',E2',E3') - Q(E1,E2,E3) = δ1 + δ2 + δ3`` with δi evaluated on the
slots already updated, this is exact.

The delta rule is written once, in :func:`apply_first_order_python` (the
reference); the adaptive IVM^eps engine (:mod:`ivm.engines.ivm_eps.adaptive`)
runs the same loop while no relation is partitioned.  The same loop compiled
with Cython (``ivm/engines/_first_order_kernel.pyx``, built by ``pip install``)
runs over the same dicts and sets without per-update interpretation;
:func:`first_order_kernel` picks one by name (``"auto"``: the compiled loop when
it is built, else the Python one) and :func:`apply_first_order` is the ``"auto"``
choice.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from ivm.engines.base import Engine
from ivm.engines.ivm_eps.partition import AllLightPartition
from ivm.query.model import Query
from ivm.query.triangle import TriangleShape, triangle_shape
from ivm.updates import Row, Update

NEXT = (1, 2, 0)
PREV = (2, 0, 1)

#: per relation, one entry per slot it feeds, in cycle order: ``(i, flipped, lf_i, lb_i,
#: other_i, lf_{i+1}, lb_{i+2}, other_{i+1}, other_{i+2})`` (the indexes an update reads and writes)
Plan = dict[str, list[tuple[Any, ...]]]
#: a key that reached the degree cutoff: (slot, key, degree)
Hit = tuple[int, object, int]


def first_order_plan(slots: Sequence[AllLightPartition], occurrences: Mapping[str, Sequence[tuple[int, bool]]]) -> Plan:
    """The indexes each relation's updates touch, resolved once per set of slots (see :data:`Plan`)."""
    plan: Plan = {}
    for relation, occs in occurrences.items():
        plan[relation] = [
            (
                i,
                flipped,
                slots[i].lf,
                slots[i].lb,
                slots[i].other,
                slots[NEXT[i]].lf,
                slots[PREV[i]].lb,
                slots[NEXT[i]].other,
                slots[PREV[i]].other,
            )
            for i, flipped in occs
        ]
    return plan


def apply_first_order_python(
    slots: Sequence[AllLightPartition],
    plan: Plan,
    updates: Sequence[Any],
    start: int,
    count: int,
    lo: int = -1,
    hi: int = sys.maxsize,
    hot: int = sys.maxsize,
    intern: dict[int, int] | None = None,
) -> tuple[int, int, int, Hit | None]:
    """First-order IVM (IVM^eps §1.1) of ``updates[start:]``, in order, on the key-set slots.

    For ``δK_i = {(x, y) ↦ m}`` with ``j = i+1``, ``k = i+2`` the count changes by
    ``m · Σ_z K_j(y,z)·K_k(z,x)``: ``m·|lf_j[y] ∩ lb_k[x]|`` when neither slot
    stores a multiplicity other than 1 (set semantics), else the sum of products
    over the same intersection; both iterate the smaller set, **O(min(deg_j(y),
    deg_k(x)))** per update, then K_i changes in O(1).

    Stops after the update that makes ``|D|`` (the total over the slots) reach
    ``hi`` or fall below ``lo``, or a key reach degree ``hot`` in its slot, so
    that the caller can act between two updates (the adaptive engine's size
    invariant and skew test).  Returns ``(index of the next update, count,
    non-zero updates applied, (slot, key, degree) of a key that reached hot or
    None)``; the slots' sizes are written back.

    ``intern`` (optional) maps each int value to the one object of that value
    the slots store: a new tuple's ints are replaced by it (equal values, so the
    state is the same), and set probes then find their hits by identity instead
    of comparing two int objects.  The caller bounds it (it may be cleared at any time).
    """
    sizes = [s.lsize for s in slots]
    size = sum(sizes)
    applied = 0
    hit: Hit | None = None
    halt = False
    stop = len(updates)
    nxt = stop
    for k in range(start, stop):
        relation, row, m = updates[k]
        if not m:
            continue  # m = 0 is a no-op (digest §8 item 3)
        for i, flipped, f, b, o, out_f, into_b, out_o, into_o in plan[relation]:
            if flipped:
                y, x = row
            else:
                x, y = row
            # δQ = m · Σ_z K_j(y, z) · K_k(z, x)
            out = out_f.get(y)
            if out is not None:
                into = into_b.get(x)
                if into is not None:
                    if out_o or into_o:
                        delta = 0
                        for z in out & into:
                            delta += out_o.get((y, z), 1) * into_o.get((z, x), 1)
                        count += m * delta
                    else:
                        count += m * len(out & into)
            # K_i(x, y) += m
            r = f.get(x)
            if r is not None and y in r:
                old = o.get((x, y), 1) if o else 1
                new = old + m
                if not new:
                    r.remove(y)
                    if not r:
                        del f[x]
                    c = b[y]
                    c.remove(x)
                    if not c:
                        del b[y]
                    if old != 1:
                        del o[(x, y)]
                    sizes[i] -= 1
                    size -= 1
                    if size < lo:
                        halt = True
                elif new == 1:
                    del o[(x, y)]
                else:
                    o[(x, y)] = new
            else:  # a new tuple
                if intern is not None:
                    if type(x) is int:
                        x = intern.setdefault(x, x)
                    if type(y) is int:
                        y = intern.setdefault(y, y)
                if r is None:
                    r = f[x] = {y}
                else:
                    r.add(y)
                c = b.get(y)
                if c is None:
                    b[y] = {x}
                else:
                    c.add(x)
                if m != 1:
                    o[(x, y)] = m
                sizes[i] += 1
                size += 1
                if size >= hi:
                    halt = True
                if len(r) >= hot:
                    hit, halt = (i, x, len(r)), True
        applied += 1
        if halt:
            nxt = k + 1
            break
    for slot, n in zip(slots, sizes, strict=True):
        slot.lsize = n
    return (nxt if stop > start else start), count, applied, hit


#: the signature of :func:`apply_first_order_python` and of its compiled twin
Kernel = Callable[..., tuple[int, int, int, Hit | None]]

try:  # the Cython build of the same loop (IVM^eps App. A.1), present when pip install compiled it
    from ivm.engines._first_order_kernel import apply_first_order as apply_first_order_compiled
except ImportError:  # no compiler at install time: the Python loop is used
    apply_first_order_compiled: Kernel | None = None  # type: ignore[no-redef]

#: the values of ``implementation`` that :func:`first_order_kernel` accepts
IMPLEMENTATIONS = ("auto", "compiled", "python")


def first_order_kernel(implementation: str = "auto") -> Kernel:
    """The first-order loop by name; every choice costs O(min(deg)) per update (IVM^eps App. A.1).

    ``"python"`` is :func:`apply_first_order_python` (the reference),
    ``"compiled"`` its Cython build (an error when it was not built) and
    ``"auto"`` the compiled loop when it was built, else the Python one.

    >>> first_order_kernel("python") is apply_first_order_python
    True
    """
    if implementation == "python":
        return apply_first_order_python
    if implementation == "compiled":
        if apply_first_order_compiled is None:
            raise ImportError("ivm.engines._first_order_kernel is not built (pip install -e . compiles it)")
        return apply_first_order_compiled
    if implementation == "auto":
        return apply_first_order_compiled or apply_first_order_python
    raise ValueError(f"implementation must be one of {IMPLEMENTATIONS}, got {implementation!r}")


#: the first-order loop ``implementation="auto"`` runs
apply_first_order: Kernel = first_order_kernel("auto")


class FirstOrderIVM(Engine):
    """First-order delta queries for the triangle count (IVM^eps §1.1): O(min degree) per update.

    >>> from ivm.query.parse import parse
    >>> e = FirstOrderIVM(parse("Q() :- R(a,b), S(b,c), T(c,a)"))
    >>> e.apply([("R", (1, 2), 2), ("S", (2, 3), 1), ("T", (3, 1), 1), ("T", (3, 1), 1)])
    >>> e.result(), e.multiplicity("R", (1, 2))
    (4, 2)
    """

    name = "first_order"

    def __init__(self, query: Query, implementation: str = "python") -> None:
        """``implementation`` picks the loop (:func:`first_order_kernel`); the default stays the
        Python reference, the plain-Python baseline that the benchmarks measure ``auto`` against."""
        super().__init__(query)
        first_order_kernel(implementation)  # validates the name; "compiled" needs the extension
        self.implementation = implementation
        shape = triangle_shape(query)
        assert isinstance(shape, TriangleShape)
        self.shape = shape
        self._slots = (AllLightPartition(), AllLightPartition(), AllLightPartition())
        # relation -> [(slot index, flipped)] in cycle order
        self._occurrences: dict[str, list[tuple[int, bool]]] = {}
        for i, edge in enumerate(shape.edges):
            self._occurrences.setdefault(edge.relation, []).append((i, edge.flipped))
        self._plan = first_order_plan(self._slots, self._occurrences)
        self._count = 0
        self._updates = 0

    @classmethod
    def refuses(cls, query: Query) -> str | None:
        shape = triangle_shape(query)
        return shape if isinstance(shape, str) else None

    def apply(self, updates: Sequence[Update]) -> None:
        """Apply the updates in order (one call of :func:`apply_first_order`, no stops)."""
        if not isinstance(updates, list | tuple):
            updates = list(updates)
        kernel = first_order_kernel(getattr(self, "implementation", "python"))  # older snapshots: none set
        _, self._count, applied, _ = kernel(self._slots, self._plan, updates, 0, self._count)
        self._updates += applied

    def result(self) -> int:
        return self._count

    def enumerate(self) -> Iterator[tuple[Row, int]]:
        if self._count:
            yield (), self._count

    def multiplicity(self, relation: str, row: Row) -> int:
        """``relation(row)`` in O(1)."""
        i, flipped = self._occurrences[relation][0]
        x, y = (row[1], row[0]) if flipped else row
        return self._slots[i].get(x, y)

    def stats(self) -> dict[str, int | float]:
        return {
            "result": self._count,
            "updates_applied": self._updates,
            "state_tuples": sum(s.lsize for s in self._slots),
        }
