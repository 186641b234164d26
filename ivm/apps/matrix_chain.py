"""Matrix chain multiplication maintained over a view tree of matrices (F-IVM §6.5, Example 42; LINVIEW).

``A = A_1 · A_2 ⋯ A_k`` with one view per internal node of a balanced binary
tree (the variable order's parenthesization); each view is a p×p element of
the matrix ring (:class:`~ivm.rings.matrix.MatrixRing`), products keep operand
order.  ``exact=True`` (the default) keeps float entries as exact dyadic rationals, so an update and
its negation restore the product bit for bit; ``exact=False`` is float64.  Updates:

- an arbitrary ``δA_i``: ``δV = δL · R`` or ``L · δR`` up the path: O(p³ log k);
- a rank-1 ``δA_i = u vᵀ`` stays factorized up the path (§6.5: ``δV^{@X2} =
  (A_1 u) vᵀ``): at a node whose left child changed ``δV = u (vᵀ R)``, right
  child ``(L u) vᵀ``; O(p²) per view, O(p² log k) in all (recomputation is
  O(p³ k)); a rank-r update is r rank-1 updates, O(r p² log k).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ivm.rings.matrix import Matrix, MatrixRing, lift, readout


class MatrixChain:
    """The maintained product of a chain of p×p matrices.

    >>> import numpy as np
    >>> chain = MatrixChain([np.eye(2, dtype=int), [[1, 2], [3, 4]], [[0, 1], [1, 0]]])
    >>> chain.update_rank1(1, [1, 0], [0, 1]); chain.result().tolist()
    [[3, 1], [4, 3]]
    """

    def __init__(self, matrices: Sequence[Any], exact: bool = True) -> None:
        arrays = [np.asarray(m) for m in matrices]
        self.p = arrays[0].shape[0]
        self.ring = MatrixRing(self.p, exact=exact)
        self.k = len(arrays)
        size = 1
        while size < self.k:
            size *= 2
        self.size = size
        # heap layout: node n has children 2n, 2n+1; leaves at size..size+k-1; identity padding
        self.views: list[Matrix] = [self.ring.one for _ in range(2 * size)]
        for i, a in enumerate(arrays):
            self.views[size + i] = self.ring.element(a)
        for n in range(size - 1, 0, -1):
            self.views[n] = self.views[2 * n] * self.views[2 * n + 1]

    def result(self) -> np.ndarray:
        """The product; exact float entries read out correctly rounded (:func:`ivm.rings.matrix.readout`)."""
        return readout(self.views[1].array)

    def matrix(self, i: int) -> np.ndarray:
        return readout(self.views[self.size + i].array)

    def update(self, i: int, delta: Any) -> None:
        """``A_i += delta`` for an arbitrary delta: one product per view on the path, O(p³ log k)."""
        n = self.size + i
        d = self.ring.element(np.asarray(delta))
        self.views[n] = self.views[n] + d
        while n > 1:
            sibling = self.views[n ^ 1]
            d = d * sibling if n % 2 == 0 else sibling * d
            n //= 2
            self.views[n] = self.views[n] + d

    def update_rank1(self, i: int, u: Any, v: Any) -> None:
        """``A_i += u vᵀ`` propagated in factorized form, O(p²) per view on the path."""
        exact = self.ring.dtype is object
        u = lift(u, exact)
        v = lift(v, exact)
        n = self.size + i
        self.views[n] = Matrix(self.views[n].array + np.outer(u, v))
        while n > 1:
            sibling = self.views[n ^ 1].array
            if n % 2 == 0:  # updated left child: (u vᵀ) R = u (Rᵀ v)ᵀ
                v = sibling.T @ v
            else:  # updated right child: L (u vᵀ) = (L u) vᵀ
                u = sibling @ u
            n //= 2
            self.views[n] = Matrix(self.views[n].array + np.outer(u, v))

    def views_materialized(self) -> int:
        return self.k + (self.k - 1)

    def model(self) -> dict[str, Any]:
        """The product as nested lists (JSON-serializable)."""
        return {"type": "matrix_chain", "p": self.p, "k": self.k, "product": self.result().tolist()}
