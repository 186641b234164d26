"""Payload rings of F-IVM (§2.1, §2.4): one module per ring.

Every ring is a :class:`~ivm.rings.base.Ring` object naming its zero, its one
and its lifting functions ``g_X``; its elements are values with ``+``, ``-``
and ``*`` (Python numbers for the numeric ring).  View trees are built on
these operations only, so adding an analytic means adding a ring.
"""

from ivm.rings.base import Pair, PairRing, Ring
from ivm.rings.covariance import Covariance, CovarianceRing
from ivm.rings.generalized_covariance import GeneralizedCovariance, GeneralizedCovarianceRing
from ivm.rings.matrix import MatrixRing
from ivm.rings.numeric import NumericRing, SumRing
from ivm.rings.relational import Relation, RelationalRing

__all__ = [
    "Covariance",
    "CovarianceRing",
    "GeneralizedCovariance",
    "GeneralizedCovarianceRing",
    "MatrixRing",
    "NumericRing",
    "Pair",
    "PairRing",
    "Relation",
    "RelationalRing",
    "Ring",
    "SumRing",
]
