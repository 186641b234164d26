"""The input policy of a View: rejected updates change nothing and say why."""

from __future__ import annotations

import pytest

import ivm
from ivm.policy import Policy
from tests.seeds import stable_seed

TRIANGLE = "Q() :- R(a,b), S(b,c), T(c,a)"


def test_delete_of_absent_tuple_is_rejected_and_state_unchanged() -> None:
    view = ivm.maintain(TRIANGLE)
    view.apply([("R", (1, 2), 1), ("S", (2, 3), 1), ("T", (3, 1), 1)])
    outcome = view.apply([("R", (9, 9), -1), ("S", (2, 3), -2), ("T", (3, 1), -1)])
    assert [r.kind for r in outcome.rejected] == ["absent_delete", "negative_multiplicity"]
    assert [r.index for r in outcome.rejected] == [0, 1]
    assert outcome.applied == 1
    assert view.result() == 0
    assert view.engine.multiplicity("S", (2, 3)) == 1


def test_pending_updates_in_the_same_batch_count() -> None:
    view = ivm.maintain(TRIANGLE)
    outcome = view.apply([("R", (1, 2), 1), ("R", (1, 2), -1), ("R", (1, 2), -1)])
    assert [r.index for r in outcome.rejected] == [2]


def test_unknown_relation_and_arity() -> None:
    view = ivm.maintain(TRIANGLE)
    outcome = view.apply([("X", (1, 2), 1), ("R", (1, 2, 3), 1)])
    assert [r.kind for r in outcome.rejected] == ["unknown_relation", "arity"]


def test_z_relation_semantics_when_allowed() -> None:
    view = ivm.maintain(TRIANGLE, policy=Policy(negative="allow"))
    view.apply([("R", (1, 2), -1), ("S", (2, 3), 1), ("T", (3, 1), 1)])
    assert view.result() == -1


def test_set_semantics_rejects_duplicates() -> None:
    view = ivm.maintain(TRIANGLE, policy=Policy(duplicate="reject"))
    outcome = view.apply([("R", (1, 2), 1), ("R", (1, 2), 1)])
    assert [r.kind for r in outcome.rejected] == ["duplicate_insert"]


def test_bad_policy_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="negative"):
        Policy(negative="ignore")  # type: ignore[arg-type]


@pytest.mark.parametrize("negative", ["reject", "allow"])
@pytest.mark.parametrize("duplicate", ["accumulate", "reject"])
def test_view_decides_as_policy_check_on_random_batches(negative: str, duplicate: str) -> None:
    """View.apply inlines the policy's conditions; its decisions equal Policy.check's, update by update."""
    import random

    policy = Policy(negative=negative, duplicate=duplicate)
    view = ivm.maintain("Q() :- R(a,b), S(b,c)", policy=policy)
    rng = random.Random(stable_seed(negative, duplicate))
    state: dict[tuple[str, tuple[int, int]], int] = {}
    for b in range(60):
        mults = [0, 1, 2] if b % 2 else [-2, -1, 0, 1, 2]  # every other batch without deletes
        batch = [(rng.choice("RS"), (rng.randrange(3), rng.randrange(3)), rng.choice(mults)) for _ in range(25)]
        expected = []
        for i, (rel, row, mult) in enumerate(batch):
            current = state.get((rel, row), 0)
            verdict = policy.check(current, mult)
            if verdict is None:
                state[(rel, row)] = current + mult
            else:
                expected.append((i, verdict[0], verdict[1]))
        outcome = view.apply(batch)
        assert [(r.index, r.kind, r.reason) for r in outcome.rejected] == expected
        assert outcome.applied == len(batch) - len(expected)
    for (rel, row), m in state.items():
        assert view.engine.multiplicity(rel, row) == m
