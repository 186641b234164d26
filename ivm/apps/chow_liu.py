"""Mutual information and the Chow-Liu tree from the generalized covariance payload (F-IVM §6.3, Sec. 8.2).

With every variable categorical, the root payload of the generalized
covariance ring holds ``C∅ = c``, ``C_X = s_X`` (``SUM(1) GROUP BY X``) and
``C_XY = Q_XY`` (``SUM(1) GROUP BY X, Y``), so

    I(X, Y) = Σ_{x,y} C_XY(x,y)/C∅ · log( C∅·C_XY(x,y) / (C_X(x)·C_Y(y)) )

(natural log), in time linear in the number of category pairs.  The Chow-Liu
tree is the maximum spanning tree of the MI weights, grown Prim-style (start
at one node, add the node with maximal MI to the tree): O(m²) for m variables
on the dense graph (the paper's O(m log m) is for sparse graphs; digest §10).
Both are recomputed after each batch, not maintained (as in the paper).
"""

from __future__ import annotations

import math
from typing import Any

from ivm.rings.generalized_covariance import GeneralizedCovariance


def mutual_information(payload: GeneralizedCovariance, variables: tuple[str, ...]) -> dict[tuple[str, str], float]:
    """``{(X, Y): I(X, Y)}`` for all pairs ``X ≤ Y`` (by position), self-pairs included (``I(X,X) = H(X)``).

    Requires every variable to be categorical in ``payload``.
    """
    c = payload.c
    out: dict[tuple[str, str], float] = {}
    if c <= 0:
        return {(x, y): 0.0 for i, x in enumerate(variables) for y in variables[i:]}
    for i, x in enumerate(variables):
        cx = payload.s.get(i, {})
        for j in range(i, len(variables)):
            cy = payload.s.get(j, {})
            total = 0.0
            for key, cxy in payload.entry(i, j).items():
                if cxy <= 0:
                    continue
                if i == j:
                    total += cxy / c * math.log(c * cxy / (cx[key] * cx[key]))
                else:
                    total += cxy / c * math.log(c * cxy / (cx[(key[0],)] * cy[(key[1],)]))
            out[(x, variables[j])] = total
    return out


def chow_liu_tree(variables: tuple[str, ...], mi: dict[tuple[str, str], float]) -> list[tuple[str, str, float]]:
    """Prim's maximum spanning tree on the MI weights: ``[(parent, child, weight)]``, O(m²)."""
    if not variables:
        return []

    def weight(a: str, b: str) -> float:
        return mi.get((a, b), mi.get((b, a), 0.0))

    root = variables[0]
    best = {v: (weight(root, v), root) for v in variables[1:]}
    edges: list[tuple[str, str, float]] = []
    while best:
        v = max(best, key=lambda u: (best[u][0], -variables.index(u)))
        w, parent = best.pop(v)
        edges.append((parent, v, w))
        for u in best:
            wu = weight(v, u)
            if wu > best[u][0]:
                best[u] = (wu, v)
    return edges


class ChowLiuTree:
    """The Chow-Liu tree of the join, recomputed from the engine's payload after each batch.

    ``source.result()`` must be a :class:`GeneralizedCovariance` over
    ``variables`` with all of them categorical (``ring="generalized_covariance"``,
    ``categorical=variables``).
    """

    def __init__(self, source: Any, variables: tuple[str, ...]) -> None:
        self.source = source
        self.variables = tuple(variables)
        self.mi: dict[tuple[str, str], float] = {}
        self.edges: list[tuple[str, str, float]] = []
        self.rows = 0

    def update(self) -> dict[str, Any]:
        payload = self.source.result()
        self.rows = int(payload.c)
        self.mi = mutual_information(payload, self.variables)
        self.edges = chow_liu_tree(self.variables, self.mi)
        return self.model()

    def model(self) -> dict[str, Any]:
        """JSON-serializable parameters, published on ``<query>.model``."""
        return {
            "type": "chow_liu_tree",
            "root": self.variables[0] if self.variables else None,
            "edges": [{"parent": p, "child": c, "mutual_information": w} for p, c, w in self.edges],
            "rows": self.rows,
        }
