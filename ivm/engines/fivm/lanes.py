"""The SUM ring Z × Z/R on plain numbers: its payloads as ``(count, sum)`` lanes (F-IVM §2.1, §2.4, Remark 18).

F-IVM maintains ``SUM(X^k · ...)`` in the direct product of the count ring Z
and the sum ring Z/R: the count is kept beside the sum to decide deletions and
to enumerate answers with their multiplicities (Remark 18, §9 item 1).  Both
factors are numeric rings (:attr:`ivm.rings.base.Ring.numeric`), so an element
is two plain Python numbers.  The engine keeps it as the tuple ``(c, s)``
instead of a :class:`~ivm.rings.base.Pair` and evaluates the ring lane by lane,
with the numbers' own ``+`` and ``*``, no method dispatch:

- ``(c, s) + (c', s') = (c + c', s + s')`` and ``(c, s) * (c', s') = (c·c', s·s')``
  (the direct product, §2.1);
- the payload of a base tuple with multiplicity m is ``m · 1 = (m, m)``;
- the lifting of a summed variable X occurring k times is
  ``g_X(x) = (1, x^k)`` (§2.4, §6.1): it multiplies the sum lane only;
- zero elimination deletes a key when both lanes are 0: ``(c, s) == (0, 0)``
  (§9 item 1).

The functions below are the delta rule of Fig. 7 (``δV = ⊕_X (δV_j ⊗ ⊗_{i≠j} V_i)``)
for such payloads, the same sums as the generic kernels of
:class:`~ivm.engines.fivm.engine.FIVM` with the same cost bounds (Theorem 13).
They are the reference (``implementation="python"``); ``_lanes_kernel.pyx``
runs the direct and one-index rules, the store update and the batch's grouping
in C loops over the same dicts and Python numbers (:func:`compiled_direct_delta`,
:func:`compiled_join_delta`), the default when it is built.  It keeps the
payloads Python objects rather than int64 columns: the profile of the TPC-H
SUM stream put the time in the interpreter's per-key work, and Python numbers
keep every sum exact with no overflow fallback to maintain: ints of any size, and
a lifted float becomes its exact dyadic rational (:func:`ivm.rings.exact.exact`),
so float sums never round and a delete undoes its insert bit for bit; the engine's
``result()`` rounds each sum once, correctly.

>>> from ivm.rings.numeric import SumRing
>>> lifts = lift_powers(SumRing({"b": 2}), ("a", "b"))
>>> lifts, lift((3, 4), (5, 7), lifts)
(((1, 2),), (3, 196))
"""

from __future__ import annotations

from typing import Any

from ivm.engines.fivm.view_tree import DeltaPlan, projection
from ivm.rings.base import Pair, PairRing, Ring
from ivm.rings.exact import exact

try:  # the same rules in C loops (``_lanes_kernel.pyx``), present when pip install compiled it
    from ivm.engines.fivm import _lanes_kernel as kernel
except ImportError:  # no compiler at install time: the Python rules below
    kernel = None

Lanes = tuple[Any, Any]
Delta = dict[tuple[Any, ...], Lanes]
Lifts = tuple[tuple[int, int], ...]

#: The zero of Z × Z/R in lanes.  ``(0, 0.0) == ZERO``: tuples compare lane by lane with ``==``.
ZERO: Lanes = (0, 0)


def numeric_pair(ring: Ring) -> bool:
    """Is ``ring`` a direct product of two numeric rings (the SUM ring Z × Z/R), so that lanes apply?"""
    return isinstance(ring, PairRing) and ring.first.numeric and ring.second.numeric


def lift_powers(sum_ring: Ring, variables: tuple[str, ...], where: tuple[int, ...] | None = None) -> Lifts:
    """``(position, k)`` for each variable with ``g_X(x) = x^k``, k ≥ 1 (positions default to 0, 1, ...)."""
    positions = tuple(range(len(variables))) if where is None else where
    return tuple((p, sum_ring.power(v)) for p, v in zip(positions, variables, strict=True) if sum_ring.power(v))


def lift(payload: Lanes, values: Any, lifts: Lifts) -> Lanes:
    """``payload * Π g_X(values[p])``: the sum lane times ``x^k`` per lifted variable (§2.4).

    The kernels below inline this loop (a call per key would cost as much as the arithmetic).
    """
    c, s = payload
    for p, k in lifts:
        x = values[p]
        if type(x) is not int:
            x = exact(x)
        s *= x if k == 1 else x**k
    return (c, s)


def to_pair(payload: Lanes) -> Pair:
    """The :class:`Pair` a lane payload stands for (for introspection: ``views()``)."""
    return Pair(payload[0], payload[1])


def direct_delta(plan: DeltaPlan, delta: Delta, lifts: Lifts) -> Delta:
    """The delta rule through a :class:`~ivm.engines.fivm.view_tree.DirectPlan`: one lookup per sibling.

    O(|δV_j| · #siblings), the O(1) single-tuple step of Theorem 13.
    ``lifts`` holds positions in the child key.
    """
    direct = plan.direct
    assert direct is not None
    lookups = []
    for step, project in zip(plan.steps, direct.siblings, strict=True):
        store = step.sibling.store
        assert store is not None, f"view {step.sibling.name} is not materialized"
        lookups.append((store.data, project))
    key_of = None if direct.identity else direct.key
    out: Delta = {}
    for key, (c, s) in delta.items():
        for data, project in lookups:
            found = data.get(project(key))
            if found is None:
                break
            c *= found[0]
            s *= found[1]
        else:
            for p, k in lifts:
                x = key[p]
                if type(x) is not int:
                    x = exact(x)
                s *= x if k == 1 else x**k
            if key_of is not None:
                key = key_of(key)
            old = out.get(key)
            out[key] = (c, s) if old is None else (old[0] + c, old[1] + s)
    return out


def join_delta(plan: DeltaPlan, delta: Delta, lifts: Lifts) -> Delta:
    """The delta rule with index lookups: O(|δV_j| · fan-out).  ``lifts`` holds slots of the join.

    Siblings whose keys the delta binds are probed by primary key, the others
    through a secondary index on the bound positions (§2.2, Remark 20).
    """
    steps = plan.steps
    if len(steps) == 1 and not steps[0].full:
        return _one_index_join(plan, delta, lifts)
    out: Delta = {}
    slots: list[Any] = [None] * plan.width
    nsteps = len(steps)
    key_of = projection(plan.key_slots)
    probes = [projection(step.key_slots if step.full else step.bound_slots) for step in steps]

    def join(i: int, c: Any, s: Any) -> None:
        if i == nsteps:
            for p, k in lifts:
                x = slots[p]
                if type(x) is not int:
                    x = exact(x)
                s *= x if k == 1 else x**k
            key = key_of(slots)  # type: ignore[arg-type]
            old = out.get(key)
            out[key] = (c, s) if old is None else (old[0] + c, old[1] + s)
            return
        step = steps[i]
        store = step.sibling.store
        assert store is not None, f"view {step.sibling.name} is not materialized"
        probe = probes[i](slots)  # type: ignore[arg-type]
        if step.full:
            found = store.data.get(probe)
            if found is not None:
                join(i + 1, c * found[0], s * found[1])
            return
        bucket = store.index(step.bound_pos).get(probe)
        if not bucket:
            return
        fill = step.fill
        for key, (fc, fs) in bucket.items():
            for p, slot in fill:
                slots[slot] = key[p]
            join(i + 1, c * fc, s * fs)

    child_slots = plan.child_slots
    for key, (c, s) in delta.items():
        for slot, value in zip(child_slots, key, strict=True):
            slots[slot] = value
        join(0, c, s)
    return out


def _one_index_join(plan: DeltaPlan, delta: Delta, lifts: Lifts) -> Delta:
    """:func:`join_delta` of a view with two children: one sibling, probed through its index, as a flat loop."""
    step = plan.steps[0]
    store = step.sibling.store
    assert store is not None, f"view {step.sibling.name} is not materialized"
    index = store.index(step.bound_pos)
    probe, key_of, fill = projection(step.bound_slots), projection(plan.key_slots), step.fill
    slots: list[Any] = [None] * plan.width
    child_slots = plan.child_slots
    out: Delta = {}
    for key, (c, s) in delta.items():
        for slot, value in zip(child_slots, key, strict=True):
            slots[slot] = value
        bucket = index.get(probe(slots))  # type: ignore[arg-type]
        if not bucket:
            continue
        for sibling_key, (fc, fs) in bucket.items():
            for p, slot in fill:
                slots[slot] = sibling_key[p]
            jc, js = c * fc, s * fs
            for p, k in lifts:
                x = slots[p]
                if type(x) is not int:
                    x = exact(x)
                js *= x if k == 1 else x**k
            out_key = key_of(slots)  # type: ignore[arg-type]
            old = out.get(out_key)
            out[out_key] = (jc, js) if old is None else (old[0] + jc, old[1] + js)
    return out


def compiled_direct_delta(plan: DeltaPlan, delta: Any, lifts: Lifts, mults: bool = False) -> Delta:
    """:func:`direct_delta` by the compiled kernel (``_lanes_kernel.direct_delta``): same sums, same order.

    ``mults``: ``delta`` maps an atom's keys to multiplicities m (the payloads ``(m, m)``).
    O(|δV_j| · #siblings) expected, as :func:`direct_delta`.
    """
    direct = plan.direct
    assert direct is not None and kernel is not None
    datas = []
    for step in plan.steps:
        store = step.sibling.store
        assert store is not None, f"view {step.sibling.name} is not materialized"
        datas.append(store.data)
    key_positions = None if direct.identity else direct.key_positions
    positions = list(direct.sibling_positions)
    return kernel.direct_delta(delta, datas, positions, key_positions, lifts, mults)  # type: ignore[no-any-return]


def compiled_join_delta(plan: DeltaPlan, delta: Delta, lifts: Lifts) -> Delta:
    """:func:`join_delta` with the one-index join in C (``_lanes_kernel.index_join``), O(|δV_j| · fan-out).

    A view joining its delta with one sibling through that sibling's secondary index (§2.2,
    Remark 20) runs in the kernel; a plan of several siblings takes :func:`join_delta`.
    """
    steps = plan.steps
    if kernel is None or len(steps) != 1 or steps[0].full:
        return join_delta(plan, delta, lifts)
    step = steps[0]
    store = step.sibling.store
    assert store is not None, f"view {step.sibling.name} is not materialized"
    index = store.index(step.bound_pos)
    return kernel.index_join(  # type: ignore[no-any-return]
        delta, index, plan.width, plan.child_slots, step.bound_slots, step.fill, plan.key_slots, lifts
    )
