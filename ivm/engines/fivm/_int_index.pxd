# The C-level interface of Int64Index (``_int_index.pyx``), for kernels that probe a view's primary index
# without a Python call per key (``_covar_kernel.pyx``).
from libc.stdint cimport int64_t, uint64_t


cdef class Int64Index:
    # direct mode (dense != NULL): dense[key] = row + 1 for 0 <= key < dense_cap (0: absent), slots NULL;
    # hash mode (dense == NULL): slot i holds the key at 2i and row + 1 at 2i + 1 (0: empty)
    cdef int64_t* dense
    cdef Py_ssize_t dense_cap
    cdef int64_t* slots
    cdef uint64_t mask
    cdef Py_ssize_t used
    cdef int64_t hi  # hash mode: the largest key put since the table was built (-1: none)
    cdef bint negative  # hash mode: some key put was negative

    cdef void _allocate(self, Py_ssize_t size) except *
    cdef void _to_hash(self) except *
    cdef void _grow(self) except *
    cdef void _reserve(self, Py_ssize_t n) except *
    cdef int _put(self, int64_t key, int64_t row) except -1
    cdef void _hash_put(self, int64_t key, int64_t row) noexcept nogil
    cdef int64_t _get(self, int64_t key) noexcept nogil
    cdef void _delete(self, int64_t key) noexcept nogil
