"""The invariants of an IVM^eps state for a Loomis-Whitney count (Appendix F.1), checked from scratch.

:func:`check_lw_invariants` recomputes everything from the engine's relation parts
with plain hash joins (no helper of the engine's update code) and raises
:class:`~ivm.engines.ivm_eps.invariants.InvariantViolation` naming the first broken
invariant.  It is meant for tests, which run it after every batch.

1. Size invariant ``⌊N/4⌋ ≤ |D| < N`` and ``N ≥ 1``; right after preprocessing or a
   major rebalancing the partition is strict (heavy ``≥ N^eps``, light ``< N^eps``).
2. Domain partition: no key in both parts of a slot; every index of a part (by key,
   on every column but 0, on every column but ``p``) holds exactly the part's rows.
3. Loose partition: heavy keys have degree ``≥ N^eps/2``, light keys ``< 3N^eps/2``;
   at most ``2N^{1-eps}`` heavy keys per slot.
4. ``eps = 0``: light parts empty; ``eps = 1``: heavy parts empty.
5. Every view ``V_k = Σ_{x_{k-1}} R_{k+1}^h ⋯ R_{k-2}^h · R_{k-1}^l`` equals its
   definition recomputed from the parts and stores no zero; its size is at most
   ``|R_{k+1}^h|·(largest light degree of R_{k-1})`` and
   ``|R_{k-1}^l|·(number of heavy keys of R_{k-2})`` (the space bound
   O(N^{1+min(eps,1-eps)}) of Theorem 25).
6. Q equals a brute-force count over the parts ``R_i^h + R_i^l``.
7. ``|D|`` is the sum of the part sizes, which are the numbers of stored rows; no
   zero multiplicity is stored.
8. Self-joins: the copies of one relation (one slot per atom) hold the same rows.
"""

from __future__ import annotations

from typing import Any

from ivm.engines.ivm_eps.invariants import InvariantViolation

__all__ = ["InvariantViolation", "check_lw_invariants", "join_count", "slot_rows"]

Rows = dict[tuple, int]


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise InvariantViolation(message)


def slot_rows(fwd: dict) -> Rows:
    """The rows ``(key, *rest) -> m`` of a part stored as ``key -> {rest: m}``."""
    return {(x, *rest): m for x, row in fwd.items() for rest, m in row.items()}


def join_count(factors: list[tuple[tuple[str, ...], Rows]], out: tuple[str, ...]) -> dict[tuple, int]:
    """``Σ Π factor multiplicities`` over all consistent bindings, grouped by ``out``.

    A left-deep hash join: each factor is indexed on the variables it shares with
    the bindings built so far.  Zero groups are dropped.

    >>> join_count([(("a", "b"), {(1, 2): 2}), (("b", "c"), {(2, 3): 3, (2, 4): 1})], ("a",))
    {(1,): 8}
    """
    bindings: list[tuple[dict[str, Any], int]] = [({}, 1)]
    for variables, rows in factors:
        if not bindings:
            break
        shared = [v for v in variables if v in bindings[0][0]]
        index: dict[tuple, list[tuple[tuple, int]]] = {}
        for row, m in rows.items():
            key = tuple(row[variables.index(v)] for v in shared)
            index.setdefault(key, []).append((row, m))
        extended = []
        for binding, mult in bindings:
            for row, m in index.get(tuple(binding[v] for v in shared), []):
                extended.append(({**binding, **dict(zip(variables, row, strict=True))}, mult * m))
        bindings = extended
    groups: dict[tuple, int] = {}
    for binding, mult in bindings:
        key = tuple(binding[v] for v in out)
        groups[key] = groups.get(key, 0) + mult
    return {k: v for k, v in groups.items() if v}


def _check_part(name: str, part: Any, heavy: bool) -> Rows:
    """Invariants 2 (indexes) and 7 of one part; returns its rows."""
    label = "heavy" if heavy else "light"
    fwd = part.hf if heavy else part.lf
    _require(all(fwd.values()), f"{name} {label}: an empty key row is stored (inv. 7)")
    rows = slot_rows(fwd)
    _require(all(rows.values()), f"{name} {label}: a zero multiplicity is stored (inv. 7)")
    size = part.hsize if heavy else part.lsize
    _require(size == len(rows), f"{name} {label}: size {size} but {len(rows)} rows (inv. 7)")
    for p in range(part.arity):
        index = part.index(heavy, p)
        _require(all(index.values()), f"{name} {label}: an empty row in the index on all columns but {p} (inv. 2)")
        seen = {(*rest[:p], value, *rest[p:]): m for rest, col in index.items() for value, m in col.items()}
        _require(seen == rows, f"{name} {label}: the index on all columns but {p} disagrees (inv. 2)")
    return rows


def check_lw_invariants(engine: Any) -> None:
    """Assert every invariant above of an :class:`~ivm.engines.ivm_eps.loomis_whitney.IVMEpsLW`."""
    n, big_n, eps = engine.n, engine.N, engine.eps
    xs = engine.variables
    sized = big_n >= 1 and big_n // 4 <= engine.size < big_n
    _require(sized, f"size invariant ⌊N/4⌋ ≤ |D| < N broken: N = {big_n}, |D| = {engine.size} (inv. 1)")
    theta = float(big_n) ** eps
    schema = [tuple(xs[(i + q) % n] for q in range(n - 1)) for i in range(n)]
    heavy_rows: list[Rows] = []
    light_rows: list[Rows] = []
    total = 0
    for i, part in enumerate(engine.slots):
        name = f"R{i + 1} ({engine.query.atoms[engine.slot_atoms[i]]})"
        _require(part.eps == eps, f"{name}: its eps {part.eps} is not the engine's {eps}")
        h, lo = _check_part(name, part, True), _check_part(name, part, False)
        heavy_rows.append(h)
        light_rows.append(lo)
        total += len(h) + len(lo)
        _require(not (set(part.hf) & set(part.lf)), f"{name}: a key in both parts (inv. 2)")
        for key, row in part.hf.items():
            _require(len(row) >= theta / 2 - 1e-9, f"{name}: heavy key {key!r} of degree {len(row)} < θ/2 (inv. 3)")
            strict_ok = not engine.strict or len(row) >= theta - 1e-9
            _require(strict_ok, f"{name}: heavy key {key!r} below θ after a major rebalancing (inv. 1)")
        for key, row in part.lf.items():
            _require(len(row) < 1.5 * theta + 1e-9, f"{name}: light key {key!r} of degree {len(row)} ≥ 3θ/2 (inv. 3)")
            strict_ok = not engine.strict or len(row) < theta + 1e-9
            _require(strict_ok, f"{name}: light key {key!r} ≥ θ after a major rebalancing (inv. 1)")
        bound = 2 * float(big_n) ** (1 - eps) + 1e-9
        _require(len(part.hf) <= bound, f"{name}: {len(part.hf)} heavy keys, more than 2N^(1-eps) (inv. 3)")
        _require(eps != 0.0 or not part.lf, f"{name}: eps = 0 but the light part is not empty (inv. 4)")
        _require(eps != 1.0 or not part.hf, f"{name}: eps = 1 but the heavy part is not empty (inv. 4)")
    _require(engine.size == total, f"|D| = {engine.size} but the parts hold {total} rows (inv. 7)")

    # 8. the copies of a self-joined relation agree (read back in the atom's column order)
    copies: dict[str, Rows] = {}
    for i in range(n):
        atom = engine.query.atoms[engine.slot_atoms[i]]
        columns = [schema[i].index(v) for v in atom.terms]
        base = {tuple(t[c] for c in columns): m for t, m in {**heavy_rows[i], **light_rows[i]}.items()}
        if atom.relation in copies:
            _require(copies[atom.relation] == base, f"the copies of {atom.relation} differ (inv. 8)")
        copies[atom.relation] = base

    # 5. the views against their definition
    for k in range(n):
        factors = [(schema[(k + 1) % n], heavy_rows[(k + 1) % n]), (schema[(k - 1) % n], light_rows[(k - 1) % n])]
        factors += [(schema[(k + d) % n], heavy_rows[(k + d) % n]) for d in range(2, n - 1)]
        expected = join_count(factors, schema[k])
        view = engine.views[k]
        _require(all(view.values()), f"V{k + 1}: a zero entry is stored (inv. 5)")
        _require(view == expected, f"V{k + 1} differs from its definition over the parts (inv. 5)")
        light_part = engine.slots[(k - 1) % n]
        max_light = max((len(r) for r in light_part.lf.values()), default=0)
        by_heavy = len(heavy_rows[(k + 1) % n]) * max_light
        by_light = len(light_rows[(k - 1) % n]) * len(engine.slots[(k - 2) % n].hf)
        _require(len(view) <= min(by_heavy, by_light), f"V{k + 1}: {len(view)} entries exceed its size bound (inv. 5)")

    # 6. Q by brute force over the parts
    full = [(schema[i], {**heavy_rows[i], **light_rows[i]}) for i in range(n)]
    expected_q = join_count(full, ()).get((), 0)
    _require(engine.result() == expected_q, f"Q = {engine.result()}, brute force over the parts {expected_q} (inv. 6)")
