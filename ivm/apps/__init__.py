"""Applications on top of F-IVM view trees (F-IVM §6): regression, mutual information, Chow-Liu, matrix chains.

The model objects expose ``model() -> dict`` (JSON-serializable parameters)
for the runtime to publish on ``<query>.model``.
"""

from ivm.apps.chow_liu import ChowLiuTree, chow_liu_tree, mutual_information
from ivm.apps.matrix_chain import MatrixChain
from ivm.apps.regression import LinearRegression

__all__ = ["ChowLiuTree", "LinearRegression", "MatrixChain", "chow_liu_tree", "mutual_information"]
