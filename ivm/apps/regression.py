"""Linear regression maintained from the covariance matrix (F-IVM §6.2, Sec. 8.1).

The F-IVM engine maintains the root payload ``(c, s, Q)`` of the covariance
ring over the join, i.e. ``MᵀM = [[c, sᵀ], [s, Q]]`` for the design matrix M
with a constant-1 column.  Any label and feature subset is a restriction of
that matrix [51].  Two solvers read it after each batch:

- closed form (the default): the normal equations ``Σ_FF θ = Σ_Fy``, O(m³);
  exact up to the conditioning of ``Σ_FF``;
- batch gradient descent ``θ := θ − α (MᵀM/c) θ`` with the label's θ fixed to
  −1, resuming from the previous parameters (the paper's "TRAIN CONT"), O(m²)
  per step.  α = 1/λ_max(MᵀM/c) (the paper leaves α open); it stops when the
  gradient's norm is below ``tol`` (relative to ``‖Σ_Fy‖``) or after
  ``max_iter`` steps.  On an ill-conditioned ``Σ_FF`` (features of very
  different scales) the cap is reached long before the optimum, so it is only
  used when asked for, and every model it gives says whether it converged
  (``converged``, ``gradient_norm``, ``iterations``): parameters of an
  unconverged descent are never passed off as the least-squares fit.

Every model record carries ``converged`` and ``gradient_norm``, the relative
norm ``‖Σ_FF θ − Σ_Fy‖ / ‖Σ_Fy‖`` of the normal equations' residual at the
published θ (for the closed form: how well the solve did).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ivm.rings.covariance import Covariance


class LinearRegression:
    """A least-squares model ``label ≈ θ0 + Σ θ_f · f`` over the maintained covariance payload.

    ``source`` is an engine (or view) whose ``result()`` is a
    :class:`~ivm.rings.covariance.Covariance` over ``variables`` (the
    ``COVAR(...)`` of the query); call :meth:`update` after each batch.

    >>> import ivm
    >>> v = ivm.maintain("Q(COVAR(x, y)) :- R(k, x), S(k, y)", engine="fivm")
    >>> _ = v.apply([("R", (1, 1), 1), ("R", (1, 2), 1), ("R", (1, 3), 1), ("S", (1, 0), 1)])
    >>> _ = v.apply([("R", (2, 4), 1), ("S", (2, 6), 1)])
    >>> model = LinearRegression(v, ("x", "y"), label="y")
    >>> p = model.update(); [round(c, 6) for c in p["coefficients"].values()], round(p["intercept"], 6)
    ([1.8], -3.0)
    """

    def __init__(
        self,
        source: Any,
        variables: Sequence[str],
        label: str,
        features: Sequence[str] | None = None,
        method: str = "closed_form",
        tol: float = 1e-9,
        max_iter: int = 100_000,
        ridge: float = 0.0,
    ) -> None:
        if method not in ("closed_form", "gradient_descent"):
            raise ValueError(f"unknown method {method!r}")
        self.source = source
        self.variables = tuple(variables)
        self.label = label
        self.features = tuple(features if features is not None else [v for v in self.variables if v != label])
        self.method = method
        self.tol = tol
        self.max_iter = max_iter
        self.ridge = ridge
        self.theta: np.ndarray | None = None  # [bias, features...]
        self.iterations = 0
        self.total_iterations = 0
        self.rows = 0
        self.converged = True
        self.gradient_norm = 0.0

    def sigma(self, cov: Covariance) -> tuple[np.ndarray, int]:
        """``MᵀM`` restricted to [1, features..., label] (the matrix of §6.2), and the row count c."""
        idx = {v: i + 1 for i, v in enumerate(self.variables)}
        full = cov.matrix().astype(float)
        pick = [0] + [idx[f] for f in self.features] + [idx[self.label]]
        return full[np.ix_(pick, pick)], int(cov.c)

    def update(self) -> dict[str, Any]:
        """Re-fit from the current covariance payload; returns :meth:`model`."""
        cov = self.source.result()
        sigma, c = self.sigma(cov)
        self.rows = c
        k = len(self.features) + 1
        if c <= 0:
            self.theta = np.zeros(k)
            self.iterations = 0
            self.converged, self.gradient_norm = True, 0.0
            return self.model()
        A = sigma[:k, :k] + self.ridge * np.eye(k)
        b = sigma[:k, k]
        if self.method == "closed_form":
            self.theta = np.linalg.lstsq(A, b, rcond=None)[0]
            self.iterations = 0
            self.gradient_norm = _relative(A / c @ self.theta - b / c, b / c)
            self.converged = True  # a direct solve: nothing to converge (gradient_norm says how exact it is)
        else:
            self.theta = self._gradient_descent(A / c, b / c)
        return self.model()

    def _gradient_descent(self, A: np.ndarray, b: np.ndarray) -> np.ndarray:
        """BGD on ``½θᵀAθ − bᵀθ`` from the previous θ (warm start, §6.2); O(m²) per iteration."""
        theta = np.zeros(len(b)) if self.theta is None or len(self.theta) != len(b) else self.theta.copy()
        lam = float(np.linalg.eigvalsh(A)[-1]) if len(b) else 1.0
        alpha = 1.0 / lam if lam > 0 else 1.0
        it = 0
        grad = A @ theta - b
        norm = _relative(grad, b)
        while norm > self.tol and it < self.max_iter:
            theta -= alpha * grad
            it += 1
            grad = A @ theta - b
            norm = _relative(grad, b)
        self.iterations = it
        self.total_iterations += it
        self.gradient_norm = norm
        self.converged = norm <= self.tol
        return theta

    def model(self) -> dict[str, Any]:
        """JSON-serializable parameters, published on ``<query>.model``."""
        theta = self.theta if self.theta is not None else np.zeros(len(self.features) + 1)
        return {
            "type": "linear_regression",
            "label": self.label,
            "intercept": float(theta[0]),
            "coefficients": {f: float(t) for f, t in zip(self.features, theta[1:], strict=True)},
            "method": self.method,
            "converged": bool(self.converged),
            "gradient_norm": float(self.gradient_norm),
            "iterations": int(self.iterations),
            "max_iterations": int(self.max_iter),
            "rows": int(self.rows),
        }


def _relative(residual: np.ndarray, b: np.ndarray) -> float:
    """``‖residual‖ / ‖b‖`` (``‖residual‖`` when ``b`` is 0): the stopping rule's measure."""
    scale = float(np.linalg.norm(b))
    norm = float(np.linalg.norm(residual))
    return norm / scale if scale > 0 else norm
