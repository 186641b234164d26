"""Classical first-order IVM (IVM^eps §1.1, Appendix A.1): one folder, its kernels beside it.

- :mod:`~ivm.engines.first_order.engine`: the triangle count's delta loop (the Python reference),
  its slots and :class:`~ivm.engines.first_order.engine.FirstOrderIVM`;
- ``_first_order_kernel.pyx``: the same loop compiled; ``_triangle_kernel.pyx``: the compact C state
  of the three slots, which IVM^eps's partitions and views also live in
  (:mod:`ivm.engines.ivm_eps.compact`); ``_work_rule.pxd``: the adaptive engine's work rule, shared by both;
- :mod:`~ivm.engines.first_order.general`: :class:`~ivm.engines.first_order.general.FirstOrderDelta`,
  the first-order delta for any conjunctive query with ring payloads.

This package imports nothing itself, so that the IVM^eps modules can import the compiled state from
here while this package's engine imports their partitions.
"""
