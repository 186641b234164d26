"""``ivm produce`` reads edge lists and CSV files as users have them (``ivm/processor/kafka/produce.py``).

Comment lines, a declared or named header, extra columns, tab/space/comma
separators and gzip are each parsed into the right updates; every line that is
not data, a comment or the header stops the load with one line naming the file,
the line number and what was expected.  The sample graph the demo, benchmarks and
tests read is the repository's own copy (``data/``).
"""

from __future__ import annotations

import gzip
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ivm.processor.codecs.avro import load_relation_codecs
from ivm.processor.data import FACEBOOK_EDGES, data_dir, facebook_edges, sample_graph
from ivm.processor.kafka.produce import InputError, Target, parse_columns, read_edges, read_updates
from ivm.updates import Update

ROOT = Path(__file__).resolve().parents[2]
CODECS = load_relation_codecs()
R, S, T = (Target.of(CODECS[name]) for name in "RST")


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    if name.endswith(".gz"):
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return path


def rows(updates: list[Update], relation: str = "R") -> list[tuple]:
    return [u.row for u in updates if u.relation == relation]


# -- the forms users have ------------------------------------------------------------------------


def test_comment_lines_of_snap_and_konect_are_skipped(tmp_path: Path) -> None:
    snap = "# Directed graph: ego-Facebook\n# Nodes: 4 Edges: 2\n# FromNodeId\tToNodeId\n0\t1\n1\t2\n"
    konect = "% sym unweighted\n% 2 3 3\n\n  % indented comment\n0 1\n1 2\n"
    for name, text in (("snap.txt", snap), ("konect.tsv", konect)):
        assert rows(read_updates(write(tmp_path, name, text), [R], 1)) == [(0, 1), (1, 2)]


def test_a_count_header_is_skipped_when_declared_and_is_data_otherwise(tmp_path: Path) -> None:
    path = write(tmp_path, "g.txt", "# a graph\n4039 88234\n0 1\n1 2\n")
    assert rows(read_updates(path, [R], 1, header="skip")) == [(0, 1), (1, 2)]
    # undeclared, a numeric first line is an edge like any other: never dropped silently
    assert rows(read_updates(path, [R], 1)) == [(4039, 88234), (0, 1), (1, 2)]


def test_a_csv_header_naming_the_attributes_in_another_order_picks_them_by_name(tmp_path: Path) -> None:
    path = write(tmp_path, "r.csv", "weight,B,A\n0.5,2,1\n1.5,3,2\n")
    assert rows(read_updates(path, [R], 1)) == [(1, 2), (2, 3)]


def test_columns_by_header_name_in_another_order_for_every_relation(tmp_path: Path) -> None:
    path = write(tmp_path, "e.csv", "dst,weight,src\n2,0.5,1\n3,1.0,2\n")
    updates = read_updates(path, [R, S, T], 1, columns=parse_columns("src,dst"), both_directions=True)
    assert updates[:6] == [
        Update("R", (1, 2), 1), Update("R", (2, 1), 1),
        Update("S", (1, 2), 1), Update("S", (2, 1), 1),
        Update("T", (1, 2), 1), Update("T", (2, 1), 1),
    ]  # fmt: skip
    assert rows(updates, "T") == [(1, 2), (2, 1), (2, 3), (3, 2)]


def test_columns_by_position(tmp_path: Path) -> None:
    path = write(tmp_path, "e.txt", "1 9 2\n2 9 3\n")
    assert rows(read_updates(path, [R], 1, columns=parse_columns("3,1"))) == [(2, 1), (3, 2)]


def test_extra_columns_beyond_the_attributes_are_ignored(tmp_path: Path) -> None:
    path = write(tmp_path, "w.txt", "1 2 0.75 1700000000\n2 3 0.5 1700000001\n")
    assert rows(read_updates(path, [R], -1)) == [(1, 2), (2, 3)]
    assert {u.mult for u in read_updates(path, [R], -1)} == {-1}


@pytest.mark.parametrize(
    "text",
    ["1\t2\n2\t3\n", "1 2\n2 3\n", "1  \t 2\n 2 3 \n", "1,2\n2,3\n", "1, 2\r\n2 ,3\r\n", '"1","2"\n2,"3"\n'],
    ids=["tabs", "spaces", "mixed-blanks", "commas", "commas-crlf", "quoted"],
)
def test_tab_space_and_comma_separators(tmp_path: Path, text: str) -> None:
    assert rows(read_updates(write(tmp_path, "e.txt", text), [R], 1)) == [(1, 2), (2, 3)]


def test_an_explicit_tab_separator_keeps_spaces_inside_fields(tmp_path: Path) -> None:
    names = Target("N", ("id", "name"), (int, str), ("an integer", "a string"))
    path = write(tmp_path, "n.tsv", "1\tAda Lovelace\n2\tAlan Turing\n")
    assert rows(read_updates(path, [names], 1, separator="tab"), "N") == [(1, "Ada Lovelace"), (2, "Alan Turing")]


def test_gzip_input(tmp_path: Path) -> None:
    path = write(tmp_path, "e.csv.gz", "# gzipped\nA,B\n1,2\n2,3\n")
    assert rows(read_updates(path, [R], 1)) == [(1, 2), (2, 3)]
    # recognised by its content, whatever the name
    renamed = path.rename(tmp_path / "e.csv")
    assert rows(read_updates(renamed, [R], 1)) == [(1, 2), (2, 3)]


def test_sample_keeps_the_same_rows_for_every_relation(tmp_path: Path) -> None:
    path = write(tmp_path, "e.txt", "".join(f"{i} {i + 1}\n" for i in range(200)))
    updates = read_updates(path, [R, S], 1, fraction=0.5, seed=3)
    assert rows(updates, "R") == rows(updates, "S")
    assert 50 < len(rows(updates, "R")) < 150


# -- the one-line errors ----------------------------------------------------------------------------


def error(path: Path, **options) -> str:
    with pytest.raises(InputError) as caught:
        read_updates(path, options.pop("targets", [R]), 1, **options)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_a_non_numeric_data_line_names_file_line_and_expectation(tmp_path: Path) -> None:
    path = write(tmp_path, "e.txt", "# c\n1 2\n\n2 x\n")
    message = error(path)
    assert message.startswith(f"{path}:4: column 2 is 'x', not an integer; expected R's A (an integer, column 1)")
    assert message.endswith("separated by tabs or spaces: '2 x'")


def test_a_header_that_names_no_attribute_is_an_error_with_a_hint(tmp_path: Path) -> None:
    path = write(tmp_path, "e.csv", "src,dst\n1,2\n")
    message = error(path)
    assert message.startswith(f"{path}:1: column 1 is 'src', not an integer")
    assert "--header" in message and "--skip-header" in message


def test_too_few_columns(tmp_path: Path) -> None:
    path = write(tmp_path, "e.txt", "1 2\n3\n")
    assert error(path).startswith(f"{path}:2: 1 column(s); expected R's A (an integer, column 1), B")
    path = write(tmp_path, "w.txt", "1 2 3\n1 2\n")
    assert error(path, columns=[1, 3]).startswith(f"{path}:2: 2 column(s); expected R's A (an integer, column 1), B")


def test_an_unknown_column_name(tmp_path: Path) -> None:
    path = write(tmp_path, "e.csv", "# edges\nu,v,w\n1,2,3\n")
    assert (
        error(path, columns=["src", "v"]) == f"{path}:2: no column 'src' (for R.A) in the header; its columns: u, v, w"
    )
    # a header naming R's attributes but not S's
    path = write(tmp_path, "r.csv", "A,B\n1,2\n")
    assert error(path, targets=[R, S]).startswith(f"{path}:1: no column 'C' (for S.C) in the header")


def test_gzip_errors_and_missing_files(tmp_path: Path) -> None:
    truncated = tmp_path / "t.gz"
    whole = gzip.compress("".join(f"{i} {7 * i}\n" for i in range(20_000)).encode())
    truncated.write_bytes(whole[: len(whole) // 2])
    assert re.match(rf"{re.escape(str(truncated))}:\d+: unreadable gzip data", error(truncated))
    assert error(tmp_path / "nope.txt") == f"{tmp_path / 'nope.txt'}: no such file"
    binary = tmp_path / "b.txt"
    binary.write_bytes(b"1 2\n\xff\xfe\x00\n")
    assert error(binary).startswith(f"{binary}:2: expected UTF-8 text")


def test_option_errors(tmp_path: Path) -> None:
    path = write(tmp_path, "e.txt", "1 2\n")
    with pytest.raises(ValueError, match="--columns gives 1 columns; relation R has 2 attributes"):
        read_updates(path, [R], 1, columns=[1])
    with pytest.raises(ValueError, match="--skip-header skips"):
        read_updates(path, [R], 1, columns=["a", "b"], header="skip")


def test_ivm_produce_stops_on_a_bad_line_before_contacting_kafka(tmp_path: Path) -> None:
    path = write(tmp_path, "e.txt", "1 2\n2 x\n")
    out = subprocess.run(
        [sys.executable, "-m", "ivm.processor.cli", "produce", str(path), "-r", "R", "--bootstrap", "127.0.0.1:1"],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )  # fmt: skip
    assert out.returncode == 2
    assert out.stderr.startswith(f"ivm produce: {path}:2: column 2 is 'x', not an integer")
    assert out.stderr.count("\n") == 1


# -- the sample graph: the repository's own copy ------------------------------------------------------


def test_the_sample_graph_is_in_the_repository() -> None:
    # the package data (ivm/resources/data), in a checkout a link to the repository's data/ folder
    assert sample_graph().resolve() == ROOT / "data" / "graphs" / "facebook_combined.edges.gz"
    edges = facebook_edges()
    assert len(edges) == FACEBOOK_EDGES == len(set(edges))
    assert edges[:2] == [(0, 1), (0, 2)]
    assert list(read_edges(sample_graph())) == edges


def test_ivm_data_overrides_the_data_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IVM_DATA", str(tmp_path))
    assert data_dir() == tmp_path
    assert sample_graph() == tmp_path / "graphs" / "facebook_combined.edges.gz"


def test_the_docker_image_and_compose_file_use_the_repository_copy() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^COPY data \./data$", dockerfile, re.M)
    # the installed package reads the graph from its package data (ivm/resources/data: the build copies the
    # folders its links name, so the image copies them all); /app/data stays for the compose file's example
    for folder in ("schemas", "config", "data", "monitoring"):
        assert re.search(rf"^COPY {folder} \./{folder}$", dockerfile, re.M), folder
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert not any("shared" in v for v in compose["services"]["processor"].get("volumes", []))
    assert "/app/data/graphs/facebook_combined.edges.gz" in (ROOT / "docker-compose.yml").read_text()
