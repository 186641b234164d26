"""IVM^eps (Kara, Ngo, Nikolic, Olteanu, Zhang, ICDT'19): triangles under updates.

- :class:`IVMEps`: the registered ``ivm_eps`` engine; it becomes one of
- :class:`IVMEpsTriangle` (the count, Theorem 3), :class:`IVMEpsSelfJoin`
  (one edge relation, Appendix B) or :class:`IVMEpsListing` (Theorem 21);
- :class:`HeavyLightPartition` (Definition 6);
- :func:`check_invariants` (the digest's §7.3) and :func:`static_triangle_count`
  (Appendix A.3).
"""

from ivm.engines.ivm_eps.engine import IVMEps
from ivm.engines.ivm_eps.invariants import InvariantViolation, check_invariants
from ivm.engines.ivm_eps.listing import IVMEpsListing
from ivm.engines.ivm_eps.partition import HeavyLightPartition
from ivm.engines.ivm_eps.self_join import IVMEpsSelfJoin
from ivm.engines.ivm_eps.static import static_triangle_count
from ivm.engines.ivm_eps.triangle import IVMEpsTriangle

__all__ = [
    "HeavyLightPartition",
    "IVMEps",
    "IVMEpsListing",
    "IVMEpsSelfJoin",
    "IVMEpsTriangle",
    "InvariantViolation",
    "check_invariants",
    "static_triangle_count",
]
