"""The order of a parallel run (tests/scheduling.py): longest first, shared expensive fixtures in one unit, and
the durations a run records."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests import scheduling


class FakeItem:
    """What :func:`scheduling.arrange` reads of a pytest item."""

    def __init__(self, nodeid: str, fixtures: dict[str, str] | None = None, integration: bool = False) -> None:
        self.nodeid = nodeid
        self.fixturenames = list(fixtures or {})
        defs = {name: [SimpleNamespace(scope=scope)] for name, scope in (fixtures or {}).items()}
        self._fixtureinfo = SimpleNamespace(name2fixturedefs=defs)
        self.module = SimpleNamespace(__name__=nodeid.split("::")[0].removesuffix(".py").replace("/", "."))
        self.markers: list[pytest.Mark] = [pytest.mark.integration.mark] if integration else []

    def get_closest_marker(self, name: str) -> pytest.Mark | None:
        return next((m for m in self.markers if m.name == name), None)


def test_longest_first_and_groups_stay_together() -> None:
    items = [
        FakeItem("tests/unit/a.py::quick"),
        FakeItem("tests/unit/a.py::slow"),
        FakeItem("tests/unit/w.py::one", {"dist": "module"}),
        FakeItem("tests/integration/r.py::first", {"schema_registry": "session", "kafka": "session"}),
        FakeItem("tests/unit/a.py::unrecorded_unit"),
        FakeItem("tests/unit/w.py::two", {"dist": "module", "tmp_path": "function"}),
        FakeItem("tests/integration/new.py::unrecorded", {"kafka": "session"}, integration=True),
        FakeItem("tests/integration/r.py::second", {"schema_registry": "session"}),
        FakeItem("tests/unit/a.py::middling"),
    ]
    recorded = {
        "tests/unit/a.py::quick": 1.0,
        "tests/unit/a.py::slow": 100.0,
        "tests/unit/w.py::one": 20.0,
        "tests/unit/w.py::two": 25.0,  # the module's two tests: 45 s in one unit
        "tests/integration/r.py::first": 10.0,
        "tests/integration/r.py::second": 12.0,  # 22 s
        "tests/unit/a.py::middling": 40.0,
    }
    groups = scheduling.arrange(items, recorded)  # type: ignore[arg-type]
    assert [i.nodeid for i in items] == [
        "tests/unit/a.py::slow",  # 100
        "tests/unit/w.py::one",  # 45, the module-scoped fixture's unit, in its own order
        "tests/unit/w.py::two",
        "tests/unit/a.py::middling",  # 40
        "tests/integration/new.py::unrecorded",  # an integration test not recorded: 30
        "tests/integration/r.py::first",  # 22, the registry's unit
        "tests/integration/r.py::second",
        "tests/unit/a.py::quick",  # 1
        "tests/unit/a.py::unrecorded_unit",  # 0
    ]
    assert groups == {
        "tests/unit/w.py::one": "tests.unit.w",
        "tests/unit/w.py::two": "tests.unit.w",
        "tests/integration/r.py::first": "registry",
        "tests/integration/r.py::second": "registry",
    }


def test_the_group_suffix_is_taken_off_node_ids() -> None:
    assert scheduling.base_id("tests/u.py::t@registry") == "tests/u.py::t"
    assert scheduling.base_id("tests/u.py::t[x@y]") == "tests/u.py::t[x@y]"
    assert scheduling.base_id("tests/u.py::t[x@y]@g") == "tests/u.py::t[x@y]"
    assert scheduling.base_id("tests/u.py::t") == "tests/u.py::t"


SAMPLE = """
import time

import pytest


@pytest.fixture(scope="module")
def shared():
    return object()


def test_short():
    pass


def test_long():
    time.sleep(1.0)


def test_grouped_a(shared):
    pass


def test_grouped_b(shared):
    pass
"""


def test_a_parallel_run_records_and_reads_durations(tmp_path: Path) -> None:
    """A real pytest-xdist run of a sample module with this repository's conftest: it records each test's
    seconds (without the group suffix), and the workers then run the longest test first."""
    root = Path(__file__).resolve().parents[2]
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "__init__.py").write_text("")
    (tmp_path / "tests" / "conftest.py").write_text((root / "tests" / "conftest.py").read_text())
    (tmp_path / "tests" / "scheduling.py").write_text((root / "tests" / "scheduling.py").read_text())
    (tmp_path / "tests" / "test_sample.py").write_text(SAMPLE)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    integration: services\n")
    durations = tmp_path / "tests" / "durations.json"
    durations.write_text(json.dumps({"tests/other.py::test_elsewhere": 9.0, "tests/test_sample.py::test_short": 99.0}))
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "--dist", "loadgroup",
               "--no-loadscope-reorder", "-rA", "tests"]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}  # not a worker of this run
    env |= {"PYTHONPATH": f"{tmp_path}:{root}", "IVM_RECORD_DURATIONS": str(durations)}
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    recorded = json.loads(durations.read_text())
    # the others are under half a second; a test of another run keeps its seconds, a stale entry goes
    assert list(recorded) == ["tests/other.py::test_elsewhere", "tests/test_sample.py::test_long"], recorded
    assert recorded["tests/other.py::test_elsewhere"] == 9.0
    assert recorded["tests/test_sample.py::test_long"] >= 1.0
    assert "this run's tests' seconds add up to" in done.stdout
    # the recorded file is read back: the long test is the first a worker runs, the grouped tests share one
    order = tmp_path / "order.txt"
    (tmp_path / "tests" / "conftest.py").write_text(
        (root / "tests" / "conftest.py").read_text()
        + "\n\ndef pytest_runtest_call(item):\n    import os\n\n"
        + f"    open({str(order)!r}, 'a').write(item.nodeid + ' ' + os.environ['PYTEST_XDIST_WORKER'] + '\\n')\n"
    )
    env.pop("IVM_RECORD_DURATIONS")
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    ran = [line.split() for line in order.read_text().splitlines()]
    first = {}
    for nodeid, worker in ran:
        first.setdefault(worker, nodeid)
    assert "tests/test_sample.py::test_long" in first.values(), ran  # the first test of a worker
    workers = {nodeid: worker for nodeid, worker in ran}
    assert workers["tests/test_sample.py::test_grouped_a"] == workers["tests/test_sample.py::test_grouped_b"], ran
