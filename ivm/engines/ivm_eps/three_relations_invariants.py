"""The invariants of an IVM^eps state for a 3R query (App. H.1.5, Definition 40), checked from scratch.

:func:`check_3r_invariants` recomputes everything from the engine's base relations
with plain loops (no helper of the engine's update code) and raises
:class:`~ivm.engines.ivm_eps.invariants.InvariantViolation` naming the first broken
invariant.  It is meant for tests, which run it after every batch.

0. The stored projections are the projections of the base relations: slot ``i``
   holds ``Σ_{private variables} K_i`` over the rows that pass the atom's constants
   and repeated variables, keyed by ``x'_i = (X_i, A_RST)`` and ``x'_{i+1}``.
1. Size invariant ``⌊N/4⌋ ≤ |D| < N`` for the plans with partitions; strict partition
   (heavy ``≥ N^eps``, light ``< N^eps``) right after a major rebalancing.
2. Domain partition: no key in both parts; forward and backward indexes agree.
3. Loose partition (Definition 40): heavy keys have degree ``≥ N^eps/2``, light keys
   ``< 3N^eps/2``; at most ``2N^{1-eps}`` heavy keys.
4. ``eps = 0``: light parts empty; ``eps = 1``: heavy parts empty.
5. Every materialized view equals its definition (Figures 21-23) and stores no zero;
   the 3R^2 and hierarchical views are linear: at most one entry per stored tuple.
6. Q equals a brute-force count over the base relations of the original query.
7. ``|D|`` is the number of distinct stored (projected) tuples; no zero is stored.
8. 3R^0 ∪ 3R^1 after the optimization phase (H.1.4): no partition, no rebalancing.

The 3R^3 plan's triangle state over the keys is checked by
:func:`~ivm.engines.ivm_eps.invariants.check_invariants` (digest §7.3).
"""

from __future__ import annotations

from typing import Any

from ivm.engines.ivm_eps.invariants import InvariantViolation, check_invariants
from ivm.engines.ivm_eps.partition import HeavyLightPartition
from ivm.query.model import Query

__all__ = ["InvariantViolation", "brute_force_count", "check_3r_invariants", "projections"]


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise InvariantViolation(message)


def brute_force_count(query: Query, relations: dict[str, dict[tuple, int]]) -> int:
    """``Σ Π atom multiplicities`` over all consistent bindings, by index nested loops over the atoms.

    Constants and repeated variables are checked per row; independent of any engine.
    """
    atoms = query.atoms

    def candidates(k: int) -> list[tuple[dict[str, Any], int]]:
        atom = atoms[k]
        fixed = dict(atom.constants)
        out = []
        for row, m in relations.get(atom.relation, {}).items():
            if len(row) != len(atom.terms) or any(row[p] != v for p, v in fixed.items()):
                continue
            binding: dict[str, Any] = {}
            if all(binding.setdefault(v, x) == x for v, x in zip(atom.terms, row, strict=True)):
                out.append((binding, m))
        return out

    rows = [candidates(k) for k in range(len(atoms))]
    total = 0

    def extend(k: int, binding: dict[str, Any], mult: int, indexes: list[dict]) -> None:
        nonlocal total
        if k == len(atoms):
            total += mult
            return
        shared = tuple(sorted(v for v in atoms[k].variables if v in binding))
        index = indexes[k].get(shared)
        if index is None:
            index = {}
            for b, m in rows[k]:
                index.setdefault(tuple(b[v] for v in shared), []).append((b, m))
            indexes[k][shared] = index
        for b, m in index.get(tuple(binding[v] for v in shared), []):
            extend(k + 1, {**binding, **b}, mult * m, indexes)

    extend(0, {}, 1, [{} for _ in atoms])
    return total


def projections(query: Query, relations: dict[str, dict[tuple, int]]) -> list[dict[tuple[tuple, tuple], int]]:
    """Slot ``i``'s projection ``(x'_i, x'_{i+1}) -> Σ_{private} K_i`` recomputed from the definitions.

    ``X_0 = A_RT``, ``X_1 = A_RS``, ``X_2 = A_ST`` (variables in exactly those two
    atoms, sorted), ``z = A_RST`` (in all three, sorted); ``x'_i = (x_i, z)``.
    """
    sets = [a.variables for a in query.atoms]
    common = sets[0] & sets[1] & sets[2]
    x = [sorted((sets[i] & sets[j]) - common) for i, j in ((0, 2), (0, 1), (1, 2))]
    z = sorted(common)
    out: list[dict[tuple[tuple, tuple], int]] = []
    for i, atom in enumerate(query.atoms):
        fixed = dict(atom.constants)
        proj: dict[tuple[tuple, tuple], int] = {}
        for row, m in relations.get(atom.relation, {}).items():
            if len(row) != len(atom.terms) or any(row[p] != v for p, v in fixed.items()):
                continue
            binding: dict[str, Any] = {}
            if not all(binding.setdefault(v, val) == val for v, val in zip(atom.terms, row, strict=True)):
                continue
            key = (
                tuple(binding[v] for v in (*x[i], *z)),
                tuple(binding[v] for v in (*x[(i + 1) % 3], *z)),
            )
            proj[key] = proj.get(key, 0) + m
        out.append({k: v for k, v in proj.items() if v})
    return out


def _entries(fwd: dict) -> dict[tuple, int]:
    return {(a, b): m for a, row in fwd.items() for b, m in row.items()}


def _check_partition(name: str, part: HeavyLightPartition, n: int, strict: bool) -> None:
    """Invariants 1 (strict), 2, 3, 4 and 7 of one partitioned relation."""
    for label, fwd, bwd, size in (("heavy", part.hf, part.hb, part.hsize), ("light", part.lf, part.lb, part.lsize)):
        entries = _entries(fwd)
        _require(all(fwd.values()) and all(bwd.values()), f"{name} {label}: an empty row is stored (inv. 7)")
        _require(all(entries.values()), f"{name} {label}: a zero multiplicity is stored (inv. 7)")
        back = {(a, b): m for b, col in bwd.items() for a, m in col.items()}
        _require(back == entries, f"{name} {label}: the backward index disagrees (inv. 2)")
        _require(size == len(entries), f"{name} {label}: size {size} but {len(entries)} entries (inv. 7)")
    _require(not (set(part.hf) & set(part.lf)), f"{name}: a key in both parts (inv. 2)")
    theta = float(n) ** part.eps
    for key, row in part.hf.items():
        _require(len(row) >= theta / 2 - 1e-9, f"{name}: heavy key {key!r} of degree {len(row)} < θ/2 (inv. 3)")
        _require(not strict or len(row) >= theta - 1e-9, f"{name}: heavy key {key!r} below θ after a major (inv. 1)")
    for key, row in part.lf.items():
        _require(len(row) < 1.5 * theta + 1e-9, f"{name}: light key {key!r} of degree {len(row)} ≥ 3θ/2 (inv. 3)")
        _require(not strict or len(row) < theta + 1e-9, f"{name}: light key {key!r} ≥ θ after a major (inv. 1)")
    _require(len(part.hf) <= 2 * float(n) ** (1 - part.eps) + 1e-9, f"{name}: more than 2N^(1-eps) heavy keys (inv. 3)")
    _require(part.eps != 0.0 or not part.lf, f"{name}: eps = 0 but the light part is not empty (inv. 4)")
    _require(part.eps != 1.0 or not part.hf, f"{name}: eps = 1 but the heavy part is not empty (inv. 4)")


def _check_view(name: str, stored: dict, expected: dict, bound: int) -> None:
    _require(all(stored.values()), f"{name}: a zero entry is stored (inv. 5)")
    expected = {k: v for k, v in expected.items() if v}
    _require(stored == expected, f"{name}: differs from its definition (inv. 5)")
    _require(len(stored) <= bound, f"{name}: {len(stored)} entries, more than the linear bound {bound} (inv. 5)")


def check_3r_invariants(engine: Any) -> None:
    """Assert every invariant above of an :class:`~ivm.engines.ivm_eps.three_relations.IVMEps3R`."""
    query = engine.query
    proj = projections(query, engine.base)
    expected_q = brute_force_count(query, engine.base)
    _require(engine.result() == expected_q, f"Q = {engine.result()}, brute force {expected_q} (inv. 6)")
    plan = engine.plan
    if plan == "triangle":
        inner = engine.triangle
        _require(inner.slot_relations() == proj, "a stored slot differs from the projection of its relation (inv. 0)")
        check_invariants(inner)
        return
    if plan == "hierarchical":
        a, b, c = engine.a_slot, engine.b_slot, engine.c_slot
        _require({x: m for (x, _), m in proj[a].items()} == engine.A, "A differs from its projection (inv. 0)")
        _require({y: m for (_, y), m in proj[b].items()} == engine.B, "B differs from its projection (inv. 0)")
        _require({x: m for (x, _), m in proj[c].items()} == engine.C, "C differs from its projection (inv. 0)")
        _require(engine.size == len(engine.A) + len(engine.B) + len(engine.C), "|D| is not the stored size (inv. 7)")
        zl = len(engine.z_vars)
        v_ab: dict[tuple, int] = {}
        for key, m in engine.A.items():
            z = key[len(key) - zl :]
            v_ab[z] = v_ab.get(z, 0) + m * engine.B.get(key, 0)
        _check_view("V_AB", engine.V_AB, v_ab, len(engine.A))
        stats = engine.stats()
        no_partition = stats["partitioned_relations"] == 0 and stats["major_rebalances"] == 0
        _require(no_partition, "a partition after the optimization phase H.1.4 (inv. 8)")
        return
    # the 3R^2 plan (Figure 22)
    n = engine.N
    _require(n >= 1 and n // 4 <= engine.size < n, f"size invariant broken: N = {n}, |D| = {engine.size} (inv. 1)")
    u, mm, p = engine.u_slot, engine.m_slot, engine.p_slot
    _require({y: m for (_, y), m in proj[u].items()} == engine.U, "U differs from its projection (inv. 0)")
    _require(_entries(engine.M.hf) | _entries(engine.M.lf) == proj[mm], "M differs from its projection (inv. 0)")
    _require(_entries(engine.P.hf) | _entries(engine.P.lf) == proj[p], "P differs from its projection (inv. 0)")
    _check_partition("M", engine.M, n, engine.strict)
    _check_partition("P", engine.P, n, engine.strict)
    _require(engine.size == len(engine.U) + engine.M.size + engine.P.size, "|D| is not the stored size (inv. 7)")
    _require(all(engine.U.values()), "U stores a zero (inv. 7)")
    v_mlu: dict[tuple, int] = {}
    for (a, b), m in _entries(engine.M.lf).items():
        v_mlu[b] = v_mlu.get(b, 0) + engine.U.get(a, 0) * m
    p_light = {b: m for (b, _), m in _entries(engine.P.lf).items()}
    v_mhpl: dict[tuple, int] = {}
    for (a, b), m in _entries(engine.M.hf).items():
        v_mhpl[a] = v_mhpl.get(a, 0) + m * p_light.get(b, 0)
    _check_view("V_{M_l U}", engine.V_MlU, v_mlu, engine.M.lsize)
    _check_view("V_{M_h P_l}", engine.V_MhPl, v_mhpl, engine.M.hsize)
