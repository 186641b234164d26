# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""A growable block of zeroed memory exported as a buffer: the arrays of a column store (F-IVM §2.2).

A view's payload array grows with its keys.  Copying it on each growth (numpy's ``resize`` when
``realloc`` cannot remap, and the ``memset`` of the new rows) was a large part of the cost of a
stream of inserts.  :class:`Arena` keeps the bytes in an anonymous mapping that grows by
``mremap`` (page tables move, bytes are not copied; the new pages are zero without a ``memset``;
see ``_mem.pxd``), and :class:`~ivm.engines.fivm.columnar.ColumnStore` views it as a numpy array.
Growing is allowed only while no buffer of it is exported (no array over it is alive), so an array
never points at memory that moved: with an export alive :meth:`Arena.resize` answers ``False`` and
the caller copies into a new arena.  O(1) per page moved.
"""

from libc.stdint cimport uint8_t

from ivm.engines.fivm._mem cimport ivm_alloc, ivm_free, ivm_grow


cdef class Arena:
    """``nbytes`` zeroed bytes; :meth:`resize` grows them in place or by remapping (contents kept).

    >>> import numpy as np
    >>> a = Arena(16)
    >>> x = np.frombuffer(a, dtype=np.float64, count=2); x[1] = 2.5
    >>> a.resize(64)  # an array is alive over it: no growth
    False
    >>> del x
    >>> a.resize(1 << 20), a.nbytes, np.frombuffer(a, dtype=np.float64, count=3).tolist()
    (True, 1048576, [0.0, 2.5, 0.0])
    """

    cdef uint8_t* data
    cdef readonly Py_ssize_t nbytes
    cdef readonly Py_ssize_t exports
    cdef Py_ssize_t shape[1]
    cdef Py_ssize_t strides[1]

    def __cinit__(self, Py_ssize_t nbytes=0):
        if nbytes < 0:
            raise ValueError("nbytes must be non-negative")
        self.data = <uint8_t*> ivm_alloc(nbytes)
        if self.data == NULL:
            raise MemoryError()
        self.nbytes = nbytes
        self.exports = 0

    def __dealloc__(self):
        ivm_free(self.data, self.nbytes)

    def resize(self, Py_ssize_t nbytes) -> bool:
        """Grow to ``nbytes`` (the new bytes zero); ``False`` (nothing changed) while a buffer is exported.
        A smaller size changes nothing."""
        cdef void* grown
        if nbytes <= self.nbytes:
            return True
        if self.exports:
            return False
        grown = ivm_grow(self.data, self.nbytes, nbytes)
        if grown == NULL:
            raise MemoryError()
        self.data = <uint8_t*> grown
        self.nbytes = nbytes
        return True

    def __getbuffer__(self, Py_buffer* view, int flags):
        self.shape[0] = self.nbytes
        self.strides[0] = 1
        view.buf = self.data
        view.obj = self
        view.len = self.nbytes
        view.readonly = 0
        view.itemsize = 1
        view.format = "B"
        view.ndim = 1
        view.shape = self.shape
        view.strides = self.strides
        view.suboffsets = NULL
        view.internal = NULL
        self.exports += 1

    def __releasebuffer__(self, Py_buffer* view):
        self.exports -= 1
