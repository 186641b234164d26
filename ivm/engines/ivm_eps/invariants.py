"""The invariants of an IVM^eps state (Definition 7; the digest's §7.3), checked from scratch.

:func:`check_invariants` recomputes everything independently of the engine's
update code (plain loops, no shared helpers) and raises
:class:`InvariantViolation` naming the first broken invariant.  It costs
O(|D|^2) at worst, so it is meant for tests, which run it after every update.

1. ``⌊N/4⌋ ≤ |D| < N`` and ``N ≥ 1``; right after preprocessing or a major
   rebalancing the partition is strict (heavy ``≥ N^eps``, light ``< N^eps``).
2. Domain partition: no key in both parts; both indexes of a part agree.
3. Loose partition: heavy keys have degree ``≥ N^eps/2``, light ``< 3N^eps/2``.
4. ``eps = 0``: light parts empty; ``eps = 1``: heavy parts empty.
5. Every view equals its definition and stores no zero entry.
6. Q equals a brute-force count (and, for listing, the answers a brute-force listing).
7. ``|D|`` is the sum of the part sizes, which are the numbers of stored entries; no zeros.
   ``nonunit`` counts the stored multiplicities other than 1.  A key-set slot
   (:class:`AllLightPartition`, the adaptive engine's first-order mode, all
   slots or none) stores its multiplicities other than 1, and only those, in
   ``other``.
8. Cost bounds: at most ``2N^{1-eps}`` heavy keys per part, and
   ``|V[i]| ≤ min(1.5·N^{1+eps_{i+1}}, 2·N^{2-eps_i})``.
"""

from __future__ import annotations

from typing import Any

from ivm.engines.ivm_eps.partition import AllLightPartition, HeavyLightPartition, Index


class InvariantViolation(AssertionError):
    """An IVM^eps invariant does not hold; the message names it."""


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise InvariantViolation(message)


def _entries(fwd: Index) -> dict[tuple[object, object], int]:
    return {(x, y): m for x, row in fwd.items() for y, m in row.items()}


def _check_part(name: str, part: HeavyLightPartition, n: int, strict: bool) -> None:
    heavy, light = _entries(part.hf), _entries(part.lf)
    for label, fwd, bwd, entries, size in (
        ("heavy", part.hf, part.hb, heavy, part.hsize),
        ("light", part.lf, part.lb, light, part.lsize),
    ):
        _require(all(fwd.values()), f"{name} {label}: an empty row is stored")
        _require(all(m != 0 for m in entries.values()), f"{name} {label}: a zero multiplicity is stored")
        back = {(x, y): m for y, col in bwd.items() for x, m in col.items()}
        _require(back == entries, f"{name} {label}: backward index disagrees with forward index")
        _require(size == len(entries), f"{name} {label}: size {size} but {len(entries)} entries (inv. 7)")
    nonunit = sum(1 for m in (heavy | light).values() if m != 1)
    _require(part.nonunit == nonunit, f"{name}: nonunit = {part.nonunit} but {nonunit} multiplicities ≠ 1 (inv. 7)")
    shared = set(part.hf) & set(part.lf)
    _require(not shared, f"{name}: keys {sorted(map(repr, shared))[:3]} in both parts (inv. 2)")
    theta = float(n) ** part.eps
    for x, row in part.hf.items():
        _require(len(row) >= theta / 2 - 1e-9, f"{name}: heavy key {x!r} has degree {len(row)} < θ/2 (inv. 3)")
        if strict:
            _require(len(row) >= theta - 1e-9, f"{name}: heavy key {x!r} below θ after a major (inv. 1)")
    for x, row in part.lf.items():
        _require(len(row) < 1.5 * theta + 1e-9, f"{name}: light key {x!r} has degree {len(row)} ≥ 3θ/2 (inv. 3)")
        if strict:
            _require(len(row) < theta + 1e-9, f"{name}: light key {x!r} at or above θ after a major (inv. 1)")
    if part.eps == 0.0:
        _require(not part.lf, f"{name}: eps = 0 but the light part is not empty (inv. 4)")
    if part.eps == 1.0:
        _require(not part.hf, f"{name}: eps = 1 but the heavy part is not empty (inv. 4)")
    bound = 2 * float(n) ** (1 - part.eps)
    _require(len(part.hf) <= bound + 1e-9, f"{name}: {len(part.hf)} heavy keys > 2N^(1-eps) (inv. 8)")


def _check_all_light(name: str, part: AllLightPartition) -> None:
    """Invariants 2, 4 and 7 of a key-set slot (eps = 1, no heavy part)."""
    _require(part.eps == 1.0 and not part.hf and not part.hb and part.hsize == 0, f"{name}: key sets with a heavy part")
    _require(all(part.lf.values()) and all(part.lb.values()), f"{name}: an empty key set is stored")
    keys = {(x, y) for x, row in part.lf.items() for y in row}
    back = {(x, y) for y, col in part.lb.items() for x in col}
    _require(back == keys, f"{name}: backward key sets disagree with the forward ones (inv. 2)")
    _require(part.lsize == len(keys), f"{name}: size {part.lsize} but {len(keys)} entries (inv. 7)")
    _require(set(part.other) <= keys, f"{name}: a multiplicity is kept for an absent tuple")
    _require(all(m not in (0, 1) for m in part.other.values()), f"{name}: a multiplicity 0 or 1 is kept aside")


def _slot_entries(part: HeavyLightPartition | AllLightPartition) -> dict[tuple[object, object], int]:
    if isinstance(part, AllLightPartition):
        return {(x, y): part.other.get((x, y), 1) for x, row in part.lf.items() for y in row}
    return _entries(part.hf) | _entries(part.lf)


def _join(heavy: Index, light: Index) -> dict[tuple[object, object], int]:
    """``Σ_b heavy(a,b)·light(b,c)`` by nested loops."""
    out: dict[tuple[object, object], int] = {}
    for a, row in heavy.items():
        for b, r in row.items():
            for c, s in light.get(b, {}).items():
                out[(a, c)] = out.get((a, c), 0) + r * s
    return {key: v for key, v in out.items() if v}


def _check_view(name: str, view: dict[object, dict[object, int]], expected: dict, bound: float) -> None:
    stored = _entries(view)
    _require(all(view.values()), f"{name}: an empty row is stored (inv. 5)")
    _require(all(v != 0 for v in stored.values()), f"{name}: a zero entry is stored (inv. 5)")
    _require(stored == expected, f"{name}: differs from its definition (inv. 5)")
    _require(len(stored) <= bound + 1e-9, f"{name}: {len(stored)} entries exceed the space bound (inv. 8)")


def brute_force_triangles(
    slots: list[dict[tuple[object, object], int]],
) -> dict[tuple[object, object, object], int]:
    """``(u0,u1,u2) -> K_0(u0,u1)·K_1(u1,u2)·K_2(u2,u0)`` over all triangles, by nested loops."""
    by_first: list[dict[object, list[tuple[object, int]]]] = [{}, {}, {}]
    for i in (1, 2):
        for (x, y), m in slots[i].items():
            by_first[i].setdefault(x, []).append((y, m))
    out: dict[tuple[object, object, object], int] = {}
    for (a, b), r in slots[0].items():
        for c, s in by_first[1].get(b, []):
            t = slots[2].get((c, a), 0)
            if t:
                out[(a, b, c)] = out.get((a, b, c), 0) + r * s * t
    return {key: v for key, v in out.items() if v}


def check_invariants(engine: Any) -> None:
    """Assert every §7.3 invariant of an IVM^eps engine's state; raise :class:`InvariantViolation`."""
    from ivm.engines.ivm_eps.listing import IVMEpsListing
    from ivm.engines.ivm_eps.self_join import IVMEpsSelfJoin

    n = engine.N
    _require(n >= 1, f"N = {n} < 1 (inv. 1)")
    size = engine.size
    _require(n // 4 <= size < n, f"size invariant ⌊N/4⌋ ≤ |D| < N broken: N = {n}, |D| = {size} (inv. 1)")
    if isinstance(engine, IVMEpsSelfJoin):
        part = engine.part
        _check_part("R", part, n, engine.strict)
        _require(size == part.hsize + part.lsize, "|D| is not the sum of the part sizes (inv. 7)")
        theta = float(n) ** part.eps
        bound = min(1.5 * n * theta, 2 * n * n / theta if theta else float("inf"))
        _check_view("V", engine.view, _join(part.hf, part.lf), bound)
        rel = _entries(part.hf) | _entries(part.lf)
        expected = sum(brute_force_triangles([rel, rel, rel]).values())
        _require(engine.count == expected, f"Q = {engine.count}, brute force {expected} (inv. 6)")
        return
    parts = engine.parts
    key_sets = [isinstance(p, AllLightPartition) for p in parts]
    _require(all(key_sets) or not any(key_sets), "key-set slots mixed with heavy/light partitions")
    for i, part in enumerate(parts):
        if isinstance(part, AllLightPartition):
            _check_all_light(f"slot {i} ({engine.shape.edges[i].relation})", part)
        else:
            _check_part(f"slot {i} ({engine.shape.edges[i].relation})", part, n, engine.strict)
    _require(size == sum(p.hsize + p.lsize for p in parts), "|D| is not the sum of the part sizes (inv. 7)")
    for i in range(3):
        nxt = parts[(i + 1) % 3]
        bound = min(1.5 * n * float(n) ** nxt.eps, 2 * n * float(n) ** (1 - parts[i].eps))
        _check_view(f"V[{i}]", engine.views[i], _join(parts[i].hf, nxt.lf), bound)
    slots = [_slot_entries(p) for p in parts]
    answers = brute_force_triangles(slots)
    expected = sum(answers.values())
    _require(engine.count == expected, f"Q = {engine.count}, brute force {expected} (inv. 6)")
    if isinstance(engine, IVMEpsListing):
        listed = list(engine.enumerate())
        pos = engine.head_positions
        want = {tuple(t[p] for p in pos): m for t, m in answers.items()}
        _require(len(listed) == len({row for row, _ in listed}), "enumeration repeats an answer")
        _require(all(m != 0 for _, m in listed), "enumeration yields a zero multiplicity")
        _require(dict(listed) == want, "enumeration differs from the brute-force listing (inv. 6)")
        heavy = [_entries(p.hf) for p in parts]
        light = [_entries(p.lf) for p in parts]
        lll = brute_force_triangles(light)
        hhh = brute_force_triangles(heavy)
        _require(engine.listing == {**hhh, **lll}, "Q^L differs from Q_hhh + Q_lll")
        for i in range(3):
            groups: dict[tuple[object, object], dict[object, int]] = {}
            for (a, b), r in heavy[i].items():
                for (b2, c), s in light[(i + 1) % 3].items():
                    if b2 == b:
                        groups.setdefault((a, c), {})[b] = r * s
            _require(engine.groups[i] == groups, f"W[{i}] differs from K_i^h·K_(i+1)^l")
            tops = {key for key in groups if slots[(i + 2) % 3].get((key[1], key[0]), 0)}
            _require(engine.tops[i] == tops, f"F[{i}] differs from its definition")
