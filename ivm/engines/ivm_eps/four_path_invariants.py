"""The invariants of an IVM^eps state for the 4-path count (App. G.1, Definitions 7, 17, 29), checked from scratch.

:func:`check_four_path_invariants` recomputes everything with plain loops (no helper of
the engine's update code) and raises
:class:`~ivm.engines.ivm_eps.invariants.InvariantViolation` naming the first broken
invariant.  It costs O(|D|^2) at worst: it is meant for tests, after every batch.

0. The stored relations are the projections of the base relations: the atom in role
   R (S, T, U) holds ``Σ_{private variables}`` of the rows that pass its constants and
   repeated variables, keyed by its join variables ``a`` (``(a, b)``, ``(b, c)``, ``c``).
1. Size invariant ``⌊N/4⌋ ≤ |D| < N``, ``N ≥ 1``, ``|D| = |R| + |S| + |T| + |U|``.
2. Refined partitions (Definition 17): the four parts of S (T) are disjoint and their
   union is S (T); all tuples of a value of either variable share its status (domain
   partition per variable); forward and backward indexes agree; no zero is stored.
3. Loose partition: a value heavy on a variable has degree ``≥ N^eps/2`` in the whole
   relation, a light one ``< 3N^eps/2``; right after a major rebalancing the partition is
   strict (``≥ N^eps`` / ``< N^eps``); at most ``2N^{1-eps}`` heavy values per variable.
4. ``eps = 0``: every tuple in ``K_hh``; ``eps = 1``: every tuple in ``K_ll``.
5. Every view of Figure 14 equals its definition recomputed from the parts (the
   indicator projections ``V_{T_h} = ∃_B T_hl``, ``V_{S_h} = ∃_B S_lh`` of
   Definition 29 included) and stores no zero; both indexes of a binary view agree.
6. Q equals the sum of the 16 skew-aware views computed from the parts, and a count
   over the base relations of the original query.
7. Space (Prop. 31): the unary views over heavy values have at most ``2N^{1-eps}``
   entries; the binary views at most ``N·min(3N^eps/2, 2N^{1-eps})``, and those whose
   two variables are both heavy at most ``(2N^{1-eps})^2``.
"""

from __future__ import annotations

from typing import Any

from ivm.engines.ivm_eps.invariants import InvariantViolation
from ivm.query.model import Atom

__all__ = ["InvariantViolation", "check_four_path_invariants"]

_PARTS = ("ll", "lh", "hl", "hh")
_TOL = 1e-9


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise InvariantViolation(message)


def _binding(atom: Atom, row: tuple) -> dict[str, Any] | None:
    """The variable binding of ``row`` under ``atom``, or None if it fails a constant or repeated variable."""
    if len(row) != len(atom.terms):
        return None
    for pos, value in atom.constants:
        if row[pos] != value:
            return None
    binding: dict[str, Any] = {}
    for var, value in zip(atom.terms, row, strict=True):
        if binding.setdefault(var, value) != value:
            return None
    return binding


def _projection(atom: Atom, variables: tuple[str, ...], rows: dict[tuple, int]) -> dict[Any, int]:
    out: dict[Any, int] = {}
    for row, m in rows.items():
        binding = _binding(atom, row)
        if binding is None:
            continue
        key = tuple(binding[v] for v in variables)
        key = key[0] if len(key) == 1 else key
        out[key] = out.get(key, 0) + m
    return {k: v for k, v in out.items() if v}


def _entries(index: dict) -> dict[tuple, int]:
    return {(x, y): m for x, row in index.items() for y, m in row.items()}


def _back(index: dict) -> dict[tuple, int]:
    return {(x, y): m for y, col in index.items() for x, m in col.items()}


def _check_partition(name: str, part: Any, variables: tuple[str, str], n: int, strict: bool) -> list[dict]:
    """Invariants 2, 3, 4 of one refined partition; returns its four parts as ``{(x, y): m}``."""
    x_name, y_name = variables
    whole = _entries(part.f)
    _require(all(whole.values()), f"{name}: a zero multiplicity is stored (inv. 2)")
    _require(all(part.f.values()) and all(part.b.values()), f"{name}: an empty row is stored (inv. 2)")
    _require(_back(part.b) == whole, f"{name}: the backward index disagrees with the forward index (inv. 2)")
    parts = []
    for i, label in enumerate(_PARTS):
        entries = _entries(part.pf[i])
        _require(all(part.pf[i].values()) and all(part.pb[i].values()), f"{name}_{label}: an empty row (inv. 2)")
        _require(all(entries.values()), f"{name}_{label}: a zero multiplicity is stored (inv. 2)")
        _require(_back(part.pb[i]) == entries, f"{name}_{label}: the backward index disagrees (inv. 2)")
        parts.append(entries)
    union: dict[tuple, int] = {}
    for entries in parts:
        for key, m in entries.items():
            _require(key not in union, f"{name}: tuple {key!r} in two parts (inv. 2, union)")
            union[key] = m
    _require(union == whole, f"{name}: the union of the parts is not the relation (inv. 2, union)")
    heavy_x = {x for i in (2, 3) for (x, _) in parts[i]}
    light_x = {x for i in (0, 1) for (x, _) in parts[i]}
    heavy_y = {y for i in (1, 3) for (_, y) in parts[i]}
    light_y = {y for i in (0, 2) for (_, y) in parts[i]}
    _require(not heavy_x & light_x, f"{name}: a value of {x_name} in a heavy and a light part (inv. 2, domain)")
    _require(not heavy_y & light_y, f"{name}: a value of {y_name} in a heavy and a light part (inv. 2, domain)")
    theta = float(n) ** part.eps
    degree_x: dict[Any, int] = {}
    degree_y: dict[Any, int] = {}
    for x, y in whole:
        degree_x[x] = degree_x.get(x, 0) + 1
        degree_y[y] = degree_y.get(y, 0) + 1
    for variable, heavy, light, degree in ((x_name, heavy_x, light_x, degree_x), (y_name, heavy_y, light_y, degree_y)):
        for v in heavy:
            d = degree[v]
            _require(d >= theta / 2 - _TOL, f"{name}: {variable}-value {v!r} heavy with degree {d} < θ/2 (inv. 3)")
            _require(
                not strict or d >= theta - _TOL, f"{name}: {variable}-value {v!r} heavy below θ after a major (inv. 3)"
            )
        for v in light:
            d = degree[v]
            _require(d < 1.5 * theta + _TOL, f"{name}: {variable}-value {v!r} light with degree {d} ≥ 3θ/2 (inv. 3)")
            _require(
                not strict or d < theta + _TOL,
                f"{name}: {variable}-value {v!r} light at or above θ after a major (inv. 3)",
            )
        bound = 2 * float(n) ** (1 - part.eps)
        _require(len(heavy) <= bound + _TOL, f"{name}: {len(heavy)} heavy {variable}-values > 2N^(1-eps) (inv. 3)")
    if part.eps == 0.0:
        _require(
            not (parts[0] or parts[1] or parts[2]), f"{name}: eps = 0 but a part other than hh is not empty (inv. 4)"
        )
    if part.eps == 1.0:
        _require(
            not (parts[1] or parts[2] or parts[3]), f"{name}: eps = 1 but a part other than ll is not empty (inv. 4)"
        )
    return parts


def _st(s_part: dict[tuple, int], t_part: dict[tuple, int]) -> dict[tuple, int]:
    """``Σ_b S_x(a,b)·T_y(b,c)`` by nested loops."""
    out: dict[tuple, int] = {}
    for (a, b), s in s_part.items():
        for (b2, c), t in t_part.items():
            if b == b2:
                out[(a, c)] = out.get((a, c), 0) + s * t
    return out


def _nonzero(table: dict) -> dict:
    return {k: v for k, v in table.items() if v}


def check_four_path_invariants(engine: Any) -> None:
    """Assert every invariant above of an :class:`~ivm.engines.ivm_eps.four_path.IVMEps4Path`."""
    query = engine.query
    r_atom, s_atom, t_atom, u_atom = (query.atoms[k] for k in engine.roles.atoms)
    a, b, c = engine.roles.variables
    base = engine.base
    z = engine.state
    R = _projection(r_atom, (a,), base[r_atom.relation])
    S = _projection(s_atom, (a, b), base[s_atom.relation])
    T = _projection(t_atom, (b, c), base[t_atom.relation])
    U = _projection(u_atom, (c,), base[u_atom.relation])
    # 0
    _require(z.R == R, "R differs from the projection of its relation (inv. 0)")
    _require(z.U == U, "U differs from the projection of its relation (inv. 0)")
    _require(_entries(z.S.f) == S, "S differs from the projection of its relation (inv. 0)")
    _require(_entries(z.T.f) == T, "T differs from the projection of its relation (inv. 0)")
    # 1
    n = engine.N
    size = len(R) + len(S) + len(T) + len(U)
    _require(engine.size == size, f"|D| = {engine.size} but {size} tuples are stored (inv. 1)")
    _require(n >= 1 and n // 4 <= size < n, f"size invariant ⌊N/4⌋ ≤ |D| < N broken: N = {n}, |D| = {size} (inv. 1)")
    # 2-4
    eps = engine.eps
    _require(z.S.eps == eps and z.T.eps == eps, "a partition has another eps than the engine (inv. 3)")
    s_ll, s_lh, s_hl, s_hh = _check_partition("S", z.S, (a, b), n, engine.strict)
    t_ll, t_lh, t_hl, t_hh = _check_partition("T", z.T, (b, c), n, engine.strict)
    # 5: Figure 14 from the parts
    expected: dict[str, dict[Any, int]] = {}
    for label, part in (("ll", s_ll), ("lh", s_lh), ("hh", s_hh)):
        view: dict[Any, int] = {}
        for (x, y), m in part.items():
            view[y] = view.get(y, 0) + R.get(x, 0) * m
        expected[f"V_RS_{label}"] = view
    for label, part in (("ll", t_ll), ("hl", t_hl), ("hh", t_hh)):
        view = {}
        for (x, y), m in part.items():
            view[x] = view.get(x, 0) + m * U.get(y, 0)
        expected[f"V_T_{label}_U"] = view
    st = {
        "V_S_ll_T_lh": _st(s_ll, t_lh),
        "V_S_hl_T_ll": _st(s_hl, t_ll),
        "V_S_hl_T_lh": _st(s_hl, t_lh),
        "V_S_hl_T_hh": _st(s_hl, t_hh),
        "V_S_hh_T_lh": _st(s_hh, t_lh),
    }
    expected.update(st)
    t_h = {x: 1 for (x, _) in t_hl}  # ∃_B T_hl
    s_h = {y: 1 for (_, y) in s_lh}  # ∃_B S_lh
    expected["V_T_h"] = t_h
    expected["V_S_h"] = s_h
    view = {}
    for (x, y), m in s_hl.items():
        view[y] = view.get(y, 0) + R.get(x, 0) * m * t_h.get(y, 0)
    expected["V_RS_hl_T_hl"] = view
    view = {}
    for (x, y), m in st["V_S_ll_T_lh"].items():
        view[y] = view.get(y, 0) + R.get(x, 0) * m
    expected["V_RS_ll_T_lh"] = view
    view = {}
    for (x, y), m in t_lh.items():
        view[x] = view.get(x, 0) + s_h.get(x, 0) * m * U.get(y, 0)
    expected["V_S_lh_T_lh_U"] = view
    view = {}
    for (x, y), m in st["V_S_hl_T_ll"].items():
        view[x] = view.get(x, 0) + m * U.get(y, 0)
    expected["V_S_hl_T_ll_U"] = view
    stored = engine.view_tables()
    _require(set(stored) == set(expected), f"the views are {sorted(stored)}, Figure 14 has {sorted(expected)} (inv. 5)")
    for name, want in expected.items():
        got = stored[name]
        _require(all(got.values()), f"{name}: a zero entry is stored (inv. 5)")
        _require(got == _nonzero(want), f"{name} differs from its definition in Figure 14 (inv. 5)")
    for attr, name in (
        ("ST_ll_lh", "V_S_ll_T_lh"),
        ("ST_hl_ll", "V_S_hl_T_ll"),
        ("ST_hl_lh", "V_S_hl_T_lh"),
        ("ST_hl_hh", "V_S_hl_T_hh"),
        ("ST_hh_lh", "V_S_hh_T_lh"),
    ):
        pair = getattr(z, attr)
        _require(_back(pair.b) == _entries(pair.f), f"{name}: its two indexes disagree (inv. 5)")
        _require(all(pair.f.values()) and all(pair.b.values()), f"{name}: an empty row is stored (inv. 5)")
    # 6
    total = 0
    for (x, y), s in s_ll.items() | s_lh.items() | s_hl.items() | s_hh.items():
        r = R.get(x, 0)
        if not r:
            continue
        for t_part in (t_ll, t_lh, t_hl, t_hh):
            for (y2, w), t in t_part.items():
                if y2 == y:
                    total += r * s * t * U.get(w, 0)
    _require(engine.result() == total, f"Q = {engine.result()}, the 16 skew-aware views sum to {total} (inv. 6)")
    direct = 0
    for (x, y), s in S.items():
        for (y2, w), t in T.items():
            if y == y2:
                direct += R.get(x, 0) * s * t * U.get(w, 0)
    _require(
        engine.result() == direct, f"Q = {engine.result()}, a count over the base relations gives {direct} (inv. 6)"
    )
    # 7: space (Prop. 31)
    heavy_bound = 2 * float(n) ** (1 - eps) + _TOL
    for name in (
        "V_RS_lh",
        "V_RS_hh",
        "V_T_hl_U",
        "V_T_hh_U",
        "V_T_h",
        "V_S_h",
        "V_RS_hl_T_hl",
        "V_RS_ll_T_lh",
        "V_S_lh_T_lh_U",
        "V_S_hl_T_ll_U",
    ):
        _require(len(stored[name]) <= heavy_bound, f"{name}: {len(stored[name])} entries > 2N^(1-eps) (inv. 7)")
    linear = n * min(1.5 * float(n) ** eps, 2 * float(n) ** (1 - eps)) + _TOL
    for name in st:
        bound = linear if name in ("V_S_ll_T_lh", "V_S_hl_T_ll") else min(linear, (heavy_bound - _TOL) ** 2 + _TOL)
        _require(len(stored[name]) <= bound, f"{name}: {len(stored[name])} entries above Prop. 31's bound (inv. 7)")
