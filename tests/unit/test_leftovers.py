"""A killed run's scratch folders are removed at the next start of the same pipeline
(``ivm.processor.state.leftovers``), and nothing else is: other pipelines', running processes', unclaimed
folders, live shard hosts'."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ivm.processor.state import leftovers


def _dead_process() -> int:
    """A process claimed a folder and was killed with SIGKILL (as a killed run's driver is)."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    child.kill()
    child.wait(10)
    return child.pid


def _claimed(folder: Path, pipeline: str, pid: int, started: int | None) -> Path:
    folder.mkdir()
    (folder / "spark-data").mkdir()
    (folder / leftovers.OWNER).write_text(f'{{"pipeline": "{pipeline}", "pid": {pid}, "started": {started or 0}}}')
    return folder


def test_a_killed_runs_folders_are_removed_and_nothing_else(tmp_path: Path) -> None:
    dead = _dead_process()
    me = os.getpid()
    mine_started = leftovers._started(me)
    killed_spark = _claimed(tmp_path / "ivm-spark-aaa", "orders", dead, 123)
    killed_checkpoint = _claimed(tmp_path / "ivm-checkpoint-bbb", "orders", dead, 123)
    running = _claimed(tmp_path / "ivm-spark-ccc", "orders", me, mine_started)
    reused_pid = _claimed(tmp_path / "ivm-spark-ddd", "orders", me, (mine_started or 0) + 1)  # another process
    other = _claimed(tmp_path / "ivm-checkpoint-eee", "orders-2", dead, 123)
    unclaimed = tmp_path / "ivm-spark-fff"
    unclaimed.mkdir()
    hosts = tmp_path / "ivm-hosts"
    hosts.mkdir(mode=0o700)
    dead_host = hosts / "orders-0123456789ab-0123456789"
    dead_host.mkdir()
    (dead_host / "host.txt").write_text(f"127.0.0.1\n5000\n{dead}\n")
    live_host = hosts / "orders-0123456789ab-abcdefabcd"
    live_host.mkdir()
    (live_host / "host.txt").write_text(f"127.0.0.1\n5001\n{me}\n")
    never_served = hosts / "orders-ba9876543210-0123456789"
    never_served.mkdir()
    other_host = hosts / "orders-2-0123456789ab-0123456789"
    other_host.mkdir()
    (other_host / "host.txt").write_text(f"127.0.0.1\n5002\n{dead}\n")

    removed = leftovers.clean("orders", tmp_path)

    assert sorted(removed) == sorted([killed_spark, killed_checkpoint, reused_pid, dead_host, never_served])
    for gone in removed:
        assert not gone.exists()
    for kept in (running, other, unclaimed, live_host, other_host):
        assert kept.exists(), kept
    assert leftovers.clean("orders", tmp_path) == []


def test_a_claim_names_this_process(tmp_path: Path) -> None:
    folder = tmp_path / "ivm-checkpoint-x"
    folder.mkdir()
    leftovers.claim(folder, "orders")
    assert (folder / leftovers.OWNER).stat().st_mode & 0o777 == 0o600
    assert leftovers.clean("orders", tmp_path) == []  # this process runs: its folder stays
    assert folder.exists()
