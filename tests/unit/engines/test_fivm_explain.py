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


def test_line3_runs_ivm_eps_3r_behind_fivm_under_auto() -> None:
    """Line-3 is a 3R^2 path (IVM^ε App. H): auto runs the hybrid, F-IVM until a join value is heavy."""
    view = ivm.maintain(LINE3, engine="auto")
    d = view.explain()
    assert (d["engine"], d["best_engine"], d["papers_best_engine"]) == ("ivm_eps_hybrid", "ivm_eps_3r", "ivm_eps_3r")
    assert d["guarantee"]["update"].startswith("O(N^0.5) amortized once a join value is heavy (ivm_eps_3r)")
    assert d["choice"]["engine"] == "fivm"
    assert not any("was requested" in note for note in d["plan"]["notes"])


class _Refusing(ENGINES["ivm_eps_3r"]):  # type: ignore[misc,valid-type]
    @classmethod
    def refuses(cls, query: object) -> str:
        return "refused for the test"


def test_a_best_engine_that_refuses_is_replaced_by_one_that_accepts() -> None:
    p = plan(parse(LINE3), registered={"ivm_eps_3r": _Refusing, "fivm": ENGINES["fivm"]})
    assert (p.engine, p.best_engine, p.papers_best) == ("fivm", "fivm", "ivm_eps_3r")
    assert any("does not accept this query (refused for the test)" in note for note in p.notes)
    assert p.guarantee.update == "O(N) per single-tuple update"  # F-IVM Thm 13, free-connex acyclic


def test_an_unregistered_best_engine_is_replaced_by_one_that_accepts() -> None:
    p = plan(parse(LINE3), registered={"fivm": ENGINES["fivm"]})
    assert (p.engine, p.best_engine, p.papers_best) == ("fivm", "fivm", "ivm_eps_3r")
    assert any("it is not registered" in note for note in p.notes)


def test_a_requested_engine_other_than_autos_choice_is_said_to_be_requested() -> None:
    d = ivm.maintain(LINE3, engine="first_order_delta").explain()
    assert d["engine"] == "first_order_delta" and d["best_engine"] == "ivm_eps_3r"
    assert any("'first_order_delta' was requested" in note for note in d["plan"]["notes"])


def test_analysis_without_registered_engines_keeps_the_papers_best() -> None:
    assert plan(parse(LINE3), registered={}).best_engine == "ivm_eps_3r"
    assert explain(LINE3, registered={})["papers_best_engine"] == "ivm_eps_3r"
