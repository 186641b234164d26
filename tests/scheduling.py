"""The order of a parallel run (pytest-xdist, ``make test``): the longest tests start first.

A run with workers (``-n N --dist loadgroup --no-loadscope-reorder``, the Makefile's) hands each worker the
next unit of work when it has at most two left, in collection order (xdist's scope scheduling); :func:`arrange`
sorts that order by each unit's expected seconds, longest first (a greedy longest-first schedule), so the run
ends with short unit tests on every worker instead of waiting for one long test that started last.

- The expected seconds of a test are the ones recorded in ``tests/durations.json`` (setup, call and
  teardown, as a run with ``IVM_RECORD_DURATIONS=tests/durations.json`` writes them, :class:`Recorder`);
  a test not recorded there counts as :data:`UNRECORDED_INTEGRATION` seconds if it is marked
  ``integration`` (it starts services: better early than last) and as nothing otherwise.
- Tests that share an expensive fixture run on one worker, in one unit (:func:`group_of`): those that use the
  session's Schema Registry (a JVM of its own per worker otherwise), those of a module with a module-scoped
  fixture (each worker would build it again: the wheel test's build, the secured broker), and those marked
  ``xdist_group(name)``.  A unit's expected seconds are the sum of its tests'.  xdist's own ``loadgroup``
  reads the groups from node ids it suffixes with ``@group``, which pytest 9 no longer lets a plugin change,
  so :class:`GroupScheduling` (xdist's scope scheduler, a unit per group) takes its place: the workers write
  the groups they found to a folder the controller made (:data:`GROUPS_ENV`), the controller reads them.

A serial run (no worker), or one with another ``--dist``, keeps pytest's own order: :func:`arrange` is only
called on the workers of a ``--dist loadgroup`` run, where every worker sorts the same collection the same way
(xdist checks that the workers' orders agree).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

import pytest

DURATIONS = Path(__file__).with_name("durations.json")
UNRECORDED_INTEGRATION = 30.0  # seconds: a new integration test, until the durations are recorded again
GROUP_SUFFIX = "@"  # xdist adds "@<group>" to a grouped test's node id (--dist loadgroup)


def base_id(nodeid: str) -> str:
    """The node id without the ``@group`` suffix xdist adds under ``--dist loadgroup``.

    >>> base_id("tests/unit/test_wheel.py::test_the_wheel_installs@wheel"), base_id("tests/x.py::test_y[a@b]")
    ('tests/unit/test_wheel.py::test_the_wheel_installs', 'tests/x.py::test_y[a@b]')
    """
    head, sep, tail = nodeid.rpartition(GROUP_SUFFIX)
    return head if sep and "]" not in tail and "::" not in tail else nodeid


def load_durations(path: Path = DURATIONS) -> dict[str, float]:
    """The recorded seconds per node id (empty if the file is missing)."""
    try:
        return {str(k): float(v) for k, v in json.loads(path.read_text()).items()}
    except FileNotFoundError:
        return {}


def group_of(item: pytest.Item) -> str | None:
    """The group an item runs in (see the module docstring), or None: its own unit."""
    mark = item.get_closest_marker("xdist_group")
    if mark is not None:
        return str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
    if "schema_registry" in item.fixturenames:
        return "registry"
    infos = getattr(item, "_fixtureinfo", None)
    module = getattr(item, "module", None)
    if infos is None or module is None:
        return None
    for defs in infos.name2fixturedefs.values():
        if defs and defs[-1].scope in ("module", "package", "class"):
            return module.__name__
    return None


def expected_seconds(item: pytest.Item, recorded: Mapping[str, float]) -> float:
    """How long ``item`` is expected to take (module docstring)."""
    known = recorded.get(item.nodeid)
    if known is not None:
        return known
    return UNRECORDED_INTEGRATION if item.get_closest_marker("integration") is not None else 0.0


def arrange(items: list[pytest.Item], recorded: Mapping[str, float]) -> dict[str, str]:
    """Sort ``items`` in place: units by expected seconds, longest first; a group's tests stay together in
    their own order; equal units keep pytest's order.  Returns the groups: node id -> group name."""
    units: dict[str, list[int]] = {}
    groups: dict[str, str] = {}
    for index, item in enumerate(items):
        group = group_of(item)
        if group is not None:
            groups[item.nodeid] = group
        units.setdefault(f"group:{group}" if group else item.nodeid, []).append(index)
    seconds = {unit: sum(expected_seconds(items[i], recorded) for i in members) for unit, members in units.items()}
    order = sorted(units, key=lambda unit: (-seconds[unit], units[unit][0]))
    items[:] = [items[i] for unit in order for i in units[unit]]
    return groups


#: the environment variable naming the folder where the workers leave their groups for the controller
GROUPS_ENV = "IVM_TEST_GROUPS"


def write_groups(groups: Mapping[str, str]) -> None:
    """On a worker: leave its groups (node id -> group) for the controller's :class:`GroupScheduling`."""
    folder = os.environ.get(GROUPS_ENV)
    if not folder:
        return
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    partial = Path(folder, f"{worker}.json.part")
    partial.write_text(json.dumps(dict(groups)))
    partial.replace(Path(folder, f"{worker}.json"))  # whole or not there


def read_groups(folder: Path) -> dict[str, str]:
    """The groups a worker left in ``folder`` (every worker collects and sorts alike: any one will do)."""
    for path in sorted(folder.glob("*.json")):
        return {str(k): str(v) for k, v in json.loads(path.read_text()).items()}
    return {}


def make_group_scheduling(config: pytest.Config, log: object, folder: Path) -> object:
    """xdist's scope scheduler with a unit per group (:func:`read_groups`) and one per other test."""
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self.groups is None:  # the workers have all collected (and written them) before the first call
                self.groups = read_groups(folder)
            group = self.groups.get(nodeid)
            return f"group:{group}" if group is not None else nodeid

    return GroupScheduling(config, log)


class GroupPlugin:
    """On the controller of a ``--dist loadgroup`` run: the folder for the workers' groups (in the environment
    the workers inherit) and the scheduler that reads them."""

    def __init__(self) -> None:
        import tempfile

        self.folder = Path(tempfile.mkdtemp(prefix="ivm-test-groups-"))
        os.environ[GROUPS_ENV] = str(self.folder)

    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: object) -> object:
        config.option.loadscopereorder = False  # the order is arrange()'s, not by the units' numbers of tests
        return make_group_scheduling(config, log, self.folder)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        import shutil

        os.environ.pop(GROUPS_ENV, None)
        shutil.rmtree(self.folder, ignore_errors=True)


class Recorder:
    """Sums each test's setup, call and teardown seconds (on the controller of a parallel run, or in a
    serial run) into ``path``: the tests of at least ``floor`` seconds, as :func:`load_durations` reads them,
    over the ones the file held (a run of some tests keeps the others' seconds).  The file is written as each
    such test ends, so a run stopped halfway keeps what it measured."""

    def __init__(self, path: Path, floor: float = 0.5) -> None:
        self.path = path
        self.floor = floor
        self.seconds: dict[str, float] = {}
        self.kept = load_durations(path)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        nodeid = base_id(report.nodeid)
        self.seconds[nodeid] = self.seconds.get(nodeid, 0.0) + report.duration
        if report.when == "teardown":
            self.kept.pop(nodeid, None)
            if self.seconds[nodeid] >= self.floor:
                self.kept[nodeid] = round(self.seconds[nodeid], 1)
                self._write()

    def _write(self) -> None:
        partial = self.path.with_name(self.path.name + ".part")
        partial.write_text(json.dumps(dict(sorted(self.kept.items())), indent=0) + "\n")
        partial.replace(self.path)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self._write()
        total = sum(self.seconds.values())
        longest = sorted(self.seconds.items(), key=lambda kv: -kv[1])[:5]
        lines = [f"recorded {len(self.kept)} durations to {self.path}; this run's tests' seconds add up to {total:.0f}"]
        lines += [f"  {seconds:7.1f} s  {nodeid}" for nodeid, seconds in longest]
        session.config.get_terminal_writer().line("\n".join(lines))


def on_worker() -> bool:
    """Whether this process is a pytest-xdist worker."""
    return "PYTEST_XDIST_WORKER" in os.environ


def record_to() -> Path | None:
    """Where a run records its durations (``IVM_RECORD_DURATIONS``), never from a worker."""
    target = os.environ.get("IVM_RECORD_DURATIONS")
    return Path(target) if target and not on_worker() else None
