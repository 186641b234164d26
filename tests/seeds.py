"""Seeds for the randomized tests that are the same in every run.

``hash()`` of a ``str`` is salted per process (``PYTHONHASHSEED``), so a seed
drawn from it changes from run to run and a failing stream cannot be replayed.
"""

from __future__ import annotations

import zlib


def stable_seed(*parts: object) -> int:
    """A 32-bit seed from the ``repr`` of ``parts``: equal parts give the same seed in every process."""
    return zlib.crc32(repr(parts).encode())
