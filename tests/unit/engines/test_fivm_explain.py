"""explain() tells the truth (issue 24): the engine that runs, and a best engine only if it accepts the query."""

from __future__ import annotations

import pytest

import ivm
from ivm.engines import ENGINES
from ivm.query.explain import explain
from ivm.query.parse import parse
from ivm.query.plan import plan

LINE3 = "Q() :- R1(a,b), R2(b,c), R3(c,d)"


@pytest.mark.parametrize(
    "text",
    [
        LINE3,
        "Q() :- R1(a,b), R2(b,c), R3(c,d), R4(d,e)",  # 4-path
        "Q() :- R(a,b), S(a,c), T(a,d)",  # star
        "Q() :- F(a,b,c), D1(a,x), D2(b,y), D3(c,z), E(x,w)",  # snowflake
    ],
)
def test_auto_names_only_engines_that_accept_the_query(text: str) -> None:
    view = ivm.maintain(text, engine="auto")
    d = view.explain()
    assert d["engine"] == view.engine.name
    assert ENGINES[d["best_engine"]].refuses(parse(text)) is None
    assert not any("was requested" in note for note in d["plan"]["notes"])


def test_line3_names_the_papers_plan_and_why_it_does_not_run() -> None:
    d = ivm.maintain(LINE3, engine="auto").explain()
    assert (d["engine"], d["best_engine"], d["papers_best_engine"]) == ("fivm", "fivm", "ivm_eps")
    assert any("does not accept this query" in note and "'ivm_eps'" in note for note in d["plan"]["notes"])
    assert d["guarantee"]["update"] == "O(N) per single-tuple update"  # F-IVM Thm 13, free-connex acyclic


def test_a_requested_engine_other_than_autos_choice_is_said_to_be_requested() -> None:
    d = ivm.maintain(LINE3, engine="first_order_delta").explain()
    assert d["engine"] == "first_order_delta" and d["best_engine"] == "fivm"
    assert any("'first_order_delta' was requested" in note for note in d["plan"]["notes"])


def test_analysis_without_registered_engines_keeps_the_papers_best() -> None:
    assert plan(parse(LINE3), registered={}).best_engine == "ivm_eps"
    assert explain(LINE3, registered={})["papers_best_engine"] == "ivm_eps"
