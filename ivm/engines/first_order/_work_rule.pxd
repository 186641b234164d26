# The work rule's step (ski rental, ivm/engines/ivm_eps/adaptive.py), shared by the compiled
# first-order loops (_first_order_kernel.pyx, _triangle_kernel.pyx); header-only, no module of its
# own.  The Python reference is the loop of ivm/engines/first_order/engine.py with its work_exceeded().
from libc.stdint cimport int64_t


cdef inline bint work_step(int64_t* excess, int64_t* spent, int64_t w, int64_t rate, int64_t size) noexcept nogil:
    """One update's first-order work ``w``: ``W += w``, ``E := max(0, E + w - r)``; whether the
    excess reached the buy cost, ``E ≥ L = |D|`` with ``E > 0`` (first_order.work_exceeded).  O(1)."""
    spent[0] += w
    excess[0] += w - rate
    if excess[0] < 0:
        excess[0] = 0
    return excess[0] > 0 and excess[0] >= size
