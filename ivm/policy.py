"""Input policies for bag and set inputs (DESIGN §4).

Relations are Z-relations, but most sources are bags or sets: a delete of an
absent tuple is then an error in the source, not a negative multiplicity to
keep.  The policy is explicit and never silent: under the default a rejected
update leaves the state unchanged and is reported with its reason (the
runtime sends it to the dead-letter topic).

Declared update patterns that the runtime *enforces* also live here: a
relation declared deletion-only (``--pattern R=delete-only``; Hu & Wang §1.3,
App. C) receives its tuples in the initial database only, so an insert into
it afterwards is refused by name, like an absent delete.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any, Literal


@dataclass(frozen=True)
class Policy:
    """What to do with updates that do not fit bag/set semantics.

    ``negative``: ``"reject"`` (default) refuses an update that would leave a
    tuple with a negative multiplicity (a delete of an absent tuple);
    ``"allow"`` keeps full Z-relation semantics.
    ``duplicate``: ``"accumulate"`` (default, bag semantics) adds the
    multiplicities of repeated inserts; ``"reject"`` (set semantics) refuses an
    insert of a tuple that is present.
    ``delete_only``: relations declared deletion-only; any insert into them
    (positive multiplicity) is refused, whatever the other two fields say.  The
    initial database is loaded with :meth:`initial`, which admits it.  What the
    declaration buys (003 App. C): O(1) amortized updates and O(1) delay for a
    free-connex CQ once *all* its relations are deletion-only.
    """

    negative: Literal["reject", "allow"] = "reject"
    duplicate: Literal["accumulate", "reject"] = "accumulate"
    delete_only: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if self.negative not in ("reject", "allow"):
            raise ValueError(f"policy negative must be 'reject' or 'allow', got {self.negative!r}")
        if self.duplicate not in ("accumulate", "reject"):
            raise ValueError(f"policy duplicate must be 'accumulate' or 'reject', got {self.duplicate!r}")
        if not isinstance(self.delete_only, frozenset):
            object.__setattr__(self, "delete_only", frozenset(self.delete_only))

    def refuses_insert(self, relation: str) -> bool:
        """Is ``relation`` declared deletion-only, so that an insert into it is refused?"""
        return relation in self.delete_only

    def with_delete_only(self, relations: Iterable[str]) -> Policy:
        """This policy with ``relations`` declared deletion-only too."""
        more = frozenset(relations)
        return self if more <= self.delete_only else replace(self, delete_only=self.delete_only | more)

    def initial(self) -> Policy:
        """The policy for loading the initial database (the prefix of 003 §1.2), which admits the
        inserts of deletion-only relations."""
        return replace(self, delete_only=frozenset()) if self.delete_only else self

    def check(self, current: int, mult: int, relation: str | None = None) -> tuple[str, str] | None:
        """Why to reject an update of ``mult`` to a tuple of ``relation`` now at ``current``:
        ``(kind, message)``, or ``None`` to accept it.

        >>> Policy().check(0, -1)
        ('absent_delete', 'delete of an absent tuple (multiplicity 0, update -1)')
        >>> Policy().check(1, -1) is None
        True
        >>> Policy(delete_only=frozenset({"R"})).check(0, 1, "R")[0]
        'delete_only_insert'
        """
        if mult == 0:
            return "zero_multiplicity", "multiplicity 0 is not an update"
        if mult > 0 and relation is not None and relation in self.delete_only:
            return "delete_only_insert", delete_only_reason(relation, current, mult)
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


def delete_only_reason(relation: str, current: int, mult: int) -> str:
    """The dead letter's reason for an insert into a deletion-only relation."""
    return (
        f"insert into {relation}, declared delete-only (pattern {relation}=delete-only): its tuples come "
        f"from the initial database only (Hu & Wang App. C); update +{mult} to a tuple at multiplicity "
        f"{current} refused, state unchanged"
    )


def policy_for(policy: Policy | None, patterns: Any) -> Policy:
    """``policy`` (default :class:`Policy`) with the relations ``patterns`` declare deletion-only."""
    from ivm.query.patterns import parse_patterns

    base = policy or Policy()
    if patterns is None:
        return base
    return base.with_delete_only(parse_patterns(patterns).deletion_only)
