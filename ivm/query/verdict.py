"""The answer of a structural test: yes or no, why, and a witness.

Every test in ``ivm/query/`` returns a :class:`Verdict`.  It is truthy when the
property holds; ``reason`` says why in words, and ``witness`` carries the
evidence a program can check (a join tree, a violating pair, a cyclic residue).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Verdict:
    """``holds`` with the ``reason`` and a machine-checkable ``witness``."""

    holds: bool
    reason: str
    witness: Any = None

    def __bool__(self) -> bool:
        return self.holds
