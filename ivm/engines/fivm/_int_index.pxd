# The C-level interface of Int64Index (``_int_index.pyx``), for kernels that probe a view's primary index
# without a Python call per key (``_covar_kernel.pyx``).
from libc.stdint cimport int64_t, uint64_t


cdef class Int64Index:
    cdef int64_t* slots  # slot i: key at 2i, row + 1 at 2i + 1 (0: empty)
    cdef uint64_t mask
    cdef Py_ssize_t used

    cdef void _allocate(self, Py_ssize_t size) except *
    cdef void _grow(self) except *
    cdef void _reserve(self, Py_ssize_t n) except *
    cdef void _put(self, int64_t key, int64_t row) noexcept nogil
    cdef int64_t _get(self, int64_t key) noexcept nogil
    cdef void _delete(self, int64_t key) noexcept nogil
