"""Fixtures for the real local services (DESIGN §6).

The broker, Spark and Prometheus are started by the project's own code; a
service that cannot start fails the tests that need it (never a skip).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from ivm.processor.local.kafka import KafkaBroker
from tests import scheduling

LOGS = Path(__file__).resolve().parents[1] / ".local" / "test-logs"


def pytest_configure(config: pytest.Config) -> None:
    """Durations recorded on request (``IVM_RECORD_DURATIONS``); on the controller of a ``--dist loadgroup``
    run, the scheduler of tests/scheduling.py."""
    target = scheduling.record_to()
    if target is not None:
        config.pluginmanager.register(scheduling.Recorder(target), "ivm-durations")
    if not scheduling.on_worker() and getattr(config.option, "dist", "no") == "loadgroup":
        config.pluginmanager.register(scheduling.GroupPlugin(), "ivm-groups")


@pytest.hookimpl(trylast=True)  # after -m/-k deselected theirs: the workers' groups are of the tests that run
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On a pytest-xdist worker of a ``--dist loadgroup`` run (xdist sets ``loadgroup`` there): the longest tests
    first, shared expensive fixtures on one worker (tests/scheduling.py)."""
    if scheduling.on_worker() and getattr(config.option, "loadgroup", False):
        scheduling.write_groups(scheduling.arrange(items, scheduling.load_durations()))


@pytest.fixture(scope="session")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    workdir = LOGS / f"kafka-{uuid.uuid4().hex[:6]}"
    broker = KafkaBroker.start(workdir)
    yield broker
    broker.stop()


@pytest.fixture(scope="session")
def spark():
    from ivm.processor.local.spark import spark_session, stop_session

    log_dir = LOGS / f"spark-{uuid.uuid4().hex[:6]}"  # a folder per session: each xdist worker has its own
    log_dir.mkdir(parents=True, exist_ok=True)
    session = spark_session("ivm-tests", "local[2]", log_dir=str(log_dir))
    yield session
    stop_session(session)


@pytest.fixture
def topic_prefix() -> str:
    """Topics of their own for each test, on the shared broker."""
    return f"t{uuid.uuid4().hex[:8]}."


class JobThread:
    """The streaming job in a background thread of the test process."""

    def __init__(self, config, spark, metrics=None) -> None:
        from ivm.processor.job import run_job

        self.reports: list = []
        self.error: BaseException | None = None
        self.stop_event = threading.Event()

        def target() -> None:
            try:
                run_job(config, stop=self.stop_event, on_batch=self.reports.append, spark=spark, metrics=metrics)
            except BaseException as err:  # surfaced by stop()
                self.error = err

        self.thread = threading.Thread(target=target, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(120)
        if self.error is not None:
            raise self.error


@pytest.fixture
def start_job(spark):
    jobs: list[JobThread] = []

    def start(config, metrics=None) -> JobThread:
        job = JobThread(config, spark, metrics)
        jobs.append(job)
        return job

    yield start
    for job in jobs:
        job.stop()
