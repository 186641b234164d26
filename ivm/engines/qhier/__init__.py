"""The q-hierarchical engine (Berkholz, Keppeler, Schweikardt, PODS'17): one folder, its kernel beside it.

- :mod:`~ivm.engines.qhier.engine`: :class:`~ivm.engines.qhier.engine.QHierEngine`, the reference
  (items as Python objects) and the constructor that picks the implementation;
- :mod:`~ivm.engines.qhier.compact`: the same structure in the typed arrays of ``_qhier_kernel.pyx``;
- :mod:`~ivm.engines.qhier.registry`: the implementations by name and the snapshot conversion, below
  both (importing this package registers the compact one).
"""

from ivm.engines.qhier import compact as _compact  # noqa: F401  (registers the compact implementation)
from ivm.engines.qhier.engine import QHierEngine

__all__ = ["QHierEngine"]
