"""``ivm status`` under ``placement = "executors"``: every slice's snapshots listed, per configuration."""

from __future__ import annotations

from pathlib import Path

from ivm.processor.commands.status import render_text, slice_snapshots


def test_slice_snapshots_are_listed_per_slice(tmp_path: Path) -> None:
    for fingerprint, index, batches in (("f1", 0, [4, 2]), ("f1", 10, [6]), ("f1", 2, []), ("f0", 0, [1])):
        folder = tmp_path / "slices" / fingerprint / str(index)
        folder.mkdir(parents=True)
        for batch in batches:
            (folder / f"snapshot-{batch:012d}.pkl").write_bytes(b"x")
        if not batches:
            (folder / "other.txt").write_bytes(b"x")  # a folder without snapshots
    listed = slice_snapshots(str(tmp_path))
    assert listed == [
        {"slice": 0, "fingerprint": "f0", "snapshots": ["snapshot-000000000001.pkl"]},
        {"slice": 0, "fingerprint": "f1", "snapshots": ["snapshot-000000000002.pkl", "snapshot-000000000004.pkl"]},
        {"slice": 2, "fingerprint": "f1", "snapshots": []},
        {"slice": 10, "fingerprint": "f1", "snapshots": ["snapshot-000000000006.pkl"]},
    ]
    status = {
        "pipeline": "p", "process": {"summary": "running"}, "last_committed_batch": None, "total_lag": 0,
        "snapshots": [], "state_dir": "/state", "slice_snapshots": listed,
    }  # fmt: skip
    lines = render_text(status)
    assert "  slice 10 snapshots (f1): snapshot-000000000006.pkl" in lines
    assert "  slice 2 snapshots (f1): none" in lines
    assert slice_snapshots(str(tmp_path / "nothing")) == []
