"""Input policies for bag and set inputs (DESIGN §4).

Relations are Z-relations, but most sources are bags or sets: a delete of an
absent tuple is then an error in the source, not a negative multiplicity to
keep.  The policy is explicit and never silent: under the default a rejected
update leaves the state unchanged and is reported with its reason (the
runtime sends it to the dead-letter topic).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class Policy:
    """What to do with updates that do not fit bag/set semantics.

    ``negative``: ``"reject"`` (default) refuses an update that would leave a
    tuple with a negative multiplicity (a delete of an absent tuple);
    ``"allow"`` keeps full Z-relation semantics.
    ``duplicate``: ``"accumulate"`` (default, bag semantics) adds the
    multiplicities of repeated inserts; ``"reject"`` (set semantics) refuses an
    insert of a tuple that is present.
    """

    negative: Literal["reject", "allow"] = "reject"
    duplicate: Literal["accumulate", "reject"] = "accumulate"

    def __post_init__(self) -> None:
        if self.negative not in ("reject", "allow"):
            raise ValueError(f"policy negative must be 'reject' or 'allow', got {self.negative!r}")
        if self.duplicate not in ("accumulate", "reject"):
            raise ValueError(f"policy duplicate must be 'accumulate' or 'reject', got {self.duplicate!r}")

    def check(self, current: int, mult: int) -> tuple[str, str] | None:
        """Why to reject an update of ``mult`` to a tuple now at ``current``:
        ``(kind, message)``, or ``None`` to accept it.

        >>> Policy().check(0, -1)
        ('absent_delete', 'delete of an absent tuple (multiplicity 0, update -1)')
        >>> Policy().check(1, -1) is None
        True
        """
        if mult == 0:
            return "zero_multiplicity", "multiplicity 0 is not an update"
        if self.negative == "reject" and current + mult < 0:
            if current == 0:
                return "absent_delete", f"delete of an absent tuple (multiplicity 0, update {mult})"
            return "negative_multiplicity", f"delete below zero (multiplicity {current}, update {mult})"
        if self.duplicate == "reject" and mult > 0 and current + mult > 1:
            return (
                "duplicate_insert",
                f"insert of a present tuple under set semantics (multiplicity {current})",
            )
        return None
