"""The deletion-only pattern (Hu & Wang §1.3, App. C): ``R=delete-only`` is read wherever the other
pattern words are, the planner and ``ivm explain`` state what App. C gives, and an insert into a
delete-only relation after the initial database is refused with its reason, the state unchanged,
by the library's views and by the runtime (dead letter)."""

from __future__ import annotations

import json
import random

import pytest

import ivm
from ivm.policy import Policy
from ivm.processor.config import PipelineConfig, QueryConfig, parse_config
from ivm.processor.pipeline import Pipeline
from ivm.processor.state.relations import RelationStore, load_view
from ivm.query.patterns import parse_patterns
from ivm.query.plan import plan
from ivm.updates import Update
from tests.oracles import apply_stream, count_answers
from tests.unit.test_pipeline import MemorySink, _record

HOOK = "Q(x1) :- R1(x1,x2), R2(x2,x3), R3(x3)"  # free-connex, not q-hierarchical
ALL_DELETE = ["R1+R2+R3=delete-only"]


@pytest.mark.parametrize("word", ["delete-only", "deletion-only", "delete_only", "D"])
def test_the_words(word: str) -> None:
    sigma = parse_patterns([f"R={word}", "S=fifo"])
    assert sigma.deletes_only("R") and not sigma.deletes_only("S")
    assert sigma.level("R") == "A"  # MixDetect reads it as arbitrary: deletes in any order
    assert sigma.describe(["R", "S"]) == {"R": "delete-only", "S": "fifo"}
    assert parse_patterns({"R": word}).deletion_only == {"R"}
    assert not parse_patterns([f"R={word}", "R=insert-only"]).deletes_only("R")  # the later declaration wins


def test_unknown_word_names_delete_only() -> None:
    with pytest.raises(ValueError, match="insert-only, fifo, delete-only or arbitrary"):
        parse_patterns(["R=never"])


def test_policy_refuses_inserts_by_name() -> None:
    policy = Policy(delete_only=frozenset({"R"}))
    kind, reason = policy.check(2, 1, "R")
    assert kind == "delete_only_insert" and "R" in reason and "delete-only" in reason
    assert policy.check(2, -1, "R") is None  # deletes pass
    assert policy.check(0, -1, "R")[0] == "absent_delete"  # and still meet the other rules
    assert policy.check(0, 1, "S") is None
    assert policy.initial().check(0, 1, "R") is None  # the initial database is admitted
    assert Policy(delete_only={"R"}).delete_only == frozenset({"R"})  # type: ignore[arg-type]


def test_explain_states_app_c_for_all_delete_only() -> None:
    q = ivm.parse(HOOK)
    p = plan(q, ALL_DELETE)
    assert p.best_engine == "propagation" and p.constant_time
    assert p.guarantee.update == "O(1) amortized" and p.guarantee.delay == "O(1) delay"
    assert "App. C" in p.why and "delete-only" in p.why
    assert any("refused" in note for note in p.notes)
    # the same patterns without delete-only: not constant time
    assert not plan(q, []).constant_time


def test_explain_mixed_and_not_free_connex() -> None:
    mixed = plan(ivm.parse(HOOK), ["R1=delete-only"])
    assert not mixed.constant_time
    assert any("only when every relation is delete-only" in note for note in mixed.notes)
    assert "state no lower bound for delete-only mixed" in mixed.guarantee.lower_bound
    cyclic = plan(ivm.parse("Q() :- R(a,b), S(b,c), T(c,a)"), ["R+S+T=delete-only"])
    assert not cyclic.constant_time
    assert any("Thm C.3" in note for note in cyclic.notes)


def test_ivm_explain_cli_reads_the_word(capsys: pytest.CaptureFixture[str]) -> None:
    from ivm.processor.cli import main

    args = ["explain", HOOK, "--json"]
    for r in ("R1", "R2", "R3"):
        args += ["--pattern", f"{r}=delete-only"]
    main(args)
    out = json.loads(capsys.readouterr().out)
    assert out["patterns"] == {"R1": "delete-only", "R2": "delete-only", "R3": "delete-only"}
    assert out["constant_time"] is True and out["guarantee"]["update"] == "O(1) amortized"
    assert "App. C" in out["plan"]["why"]


def _initial(rng: random.Random) -> list[Update]:
    out = [Update("R1", (rng.randrange(6), rng.randrange(4)), rng.randint(1, 3)) for _ in range(30)]
    out += [Update("R2", (rng.randrange(4), rng.randrange(4)), rng.randint(1, 2)) for _ in range(12)]
    out += [Update("R3", (c,), 1) for c in range(3)]
    return out


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_view_refuses_inserts_and_keeps_the_state(seed: int) -> None:
    rng = random.Random(seed)
    q = ivm.parse(HOOK)
    view = ivm.maintain(q, patterns=ALL_DELETE)
    assert view.engine.name == "propagation"
    initial = _initial(rng)
    assert view.load(initial).rejected == []
    applied = list(initial)
    for _ in range(10):
        db, _ = apply_stream(applied)
        live = [(r, row, m) for r in db for row, m in db[r].items()]
        batch = []
        for _ in range(5):
            if live and rng.random() < 0.6:
                r, row, m = live.pop(rng.randrange(len(live)))
                batch.append(Update(r, row, -rng.randint(1, m)))
            else:
                batch.append(Update(rng.choice(["R1", "R2", "R3"]), (rng.randrange(6), rng.randrange(4))[:1], 1))
        batch = [u for u in batch if len(u.row) == dict(q.relations)[u.relation]] + [Update("R3", (0,), 2)]
        before = {(u.relation, u.row): view.engine.multiplicity(u.relation, u.row) for u in batch if u.mult > 0}
        outcome = view.apply(batch)
        refused = [r.update for r in outcome.rejected]
        assert refused == [u for u in batch if u.mult > 0]
        assert {r.kind for r in outcome.rejected} == {"delete_only_insert"}
        for (relation, row), m in before.items():  # refused: only the batch's deletes changed the tuple
            deleted = sum(u.mult for u in batch if u.mult < 0 and (u.relation, u.row) == (relation, row))
            assert view.engine.multiplicity(relation, row) == m + deleted
        applied += [u for u in batch if u.mult < 0]
        assert view.result() == count_answers(q, apply_stream(applied)[0])
    assert view.engine.plan.kind == "deletion-only" and view.engine.plan.constant_time
    assert view.explain()["guarantee"]["update"] == "O(1) amortized"
    with pytest.raises(ValueError, match="initial database"):
        view.load([Update("R3", (9,), 1)])


def test_runtime_dead_letters_inserts_into_a_delete_only_relation() -> None:
    config = parse_config(
        {
            "relations": [{"name": "R"}, {"name": "S"}],
            "queries": [
                {"name": "q", "query": "Q(a) :- R(a,b), S(b,c)", "patterns": ["R=delete-only", "S=delete-only"]}
            ],
        }
    )
    assert config.policy.delete_only == {"R", "S"}
    sink = MemorySink()
    pipeline = Pipeline(config, sink)
    view = pipeline.views["q"]
    assert view.engine.name == "propagation"
    # the bootstrap's steps: the initial database is admitted, then loaded into the views
    store = pipeline.store
    assert store.admit("R", [(1, 2), (3, 2)], [1, 2], initial=True) == ([0, 1], [])
    assert store.admit("S", [(2, 5)], [1], initial=True) == ([0], [])
    load_view(view, list(store.updates(["R", "S"])))
    assert view.result() == {(1,): 1, (3,): 2}
    report = pipeline.process([_record("R", 0, (7, 2), 1), _record("R", 1, (3, 2), -1), _record("S", 0, (2, 6), 1)], 0)
    assert report.dead_letters == 2
    assert view.result() == {(1,): 1, (3,): 1}
    assert pipeline.store.contents["R"] == {(1, 2): 1, (3, 2): 1} and pipeline.store.contents["S"] == {(2, 5): 1}
    dead = sink.on("ivm.dead-letter")
    assert {(d["topic"], d["offset"]) for d in dead} == {("R", 0), ("S", 0)}
    assert all("declared delete-only" in d["reason"] for d in dead)


def test_relation_store_and_query_config() -> None:
    config = PipelineConfig(queries=(QueryConfig("q", "Q(a) :- R(a,b)", patterns=("R=delete-only",)),))
    store = RelationStore.empty(["R"], config.policy)
    kept, refused = store.admit("R", [(1, 2)], [1])
    assert kept == [] and refused[0][1] == "delete_only_insert" and store.contents["R"] == {}
    assert store.admit("R", [(1, 2)], [1], initial=True) == ([0], [])
    assert store.admit("R", [(1, 2)], [-1]) == ([0], []) and store.contents["R"] == {}
