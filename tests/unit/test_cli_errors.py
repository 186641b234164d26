"""Every error a user can cause is one line: ``ivm COMMAND: <cause, naming the key, file or address>``.

Each case runs ``ivm.processor.cli.main([...])`` in-process and checks the exit code
(2 for usage and configuration, 1 for runtime), that stderr holds exactly one
line (one line per finding for a configuration) starting ``ivm COMMAND: `` and
naming what is wrong, that no traceback is printed (``capfd`` sees librdkafka's
own writes to the process's stderr too), and for an unreachable broker that
the command ends within seconds.  No broker is needed: an unreachable one is a
closed local port.  ``-v`` adds the traceback; a bug (an unexpected exception)
still ends with its traceback.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import ivm.processor.cli
from ivm.processor.cli import main
from ivm.processor.local.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
RELATIONS = ROOT / "schemas" / "relations"
BROKER_DEADLINE = 15.0  # seconds an unreachable broker may take to be reported


def run_cli(capfd: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str], str, float]:
    """``(exit code, stderr lines, stdout, seconds)`` of ``ivm ARGV`` run in-process."""
    started = time.monotonic()
    code = main(list(argv))
    elapsed = time.monotonic() - started
    out, err = capfd.readouterr()
    return code, [line for line in err.splitlines() if line.strip()], out, elapsed


def assert_one_line(lines: list[str], command: str, *names: str) -> None:
    """Exactly one line, ``ivm COMMAND: ...``, naming each of ``names``; no traceback, no librdkafka log."""
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"ivm {command}: "), lines
    for name in names:
        assert name in lines[0], (name, lines)


def write_config(folder: Path, bootstrap: str, relations: dict[str, str] | None = None, extra: str = "") -> Path:
    """A valid pipeline configuration over R, S, T (or ``relations``: name -> schema path) in ``folder``."""
    relations = relations or {r: str(RELATIONS / f"{r}.avsc") for r in "RST"}
    text = (
        f'[processor]\nname = "e"\nstate_dir = "{folder / "state"}"\n{extra}'
        f'[kafka]\nbootstrap = "{bootstrap}"\n'
        + "".join(f'[[relations]]\nname = "{r}"\nschema = "{path}"\n' for r, path in relations.items())
        + '[[queries]]\nname = "tri"\nquery = "Q() :- R(a,b), S(b,c), T(c,a)"\n'
    )
    path = folder / "pipeline.toml"
    path.write_text(text)
    return path


@pytest.fixture
def closed() -> str:
    """``127.0.0.1:PORT`` with nothing listening."""
    return f"127.0.0.1:{free_port()}"


@pytest.fixture
def edges(tmp_path: Path) -> Path:
    path = tmp_path / "edges.txt"
    path.write_text("1 2\n2 3\n")
    return path


# --- a configuration that parses but does not make sense: one line per finding, exit 2 ----------------

NONSENSE = """\
[processor]
name = "x"
exactly_once = "false"
[kafka]
bootstrap = "127.0.0.1:9092"
[[relations]]
name = "R"
schema = "missing.avsc"
[queries.q]
query = "Q() :- R(a,b)"
"""
FINDINGS = ("exactly_once", "[[queries]]", "missing.avsc")


@pytest.mark.parametrize(
    "argv",
    [
        ["check"],
        ["status"],
        ["subscribe", "q.result"],
        ["reset", "--yes"],
        ["query", "list"],
        ["query", "add", "p", "Q() :- R(a,b)"],
        ["bootstrap", "-l", "R=r.csv"],
        ["explain", "q"],
    ],
    ids=lambda argv: " ".join(argv[:2]),
)
def test_a_configuration_that_makes_no_sense(argv: list[str], tmp_path: Path, capfd) -> None:
    config = tmp_path / "bad.toml"
    config.write_text(NONSENSE)
    command = " ".join(argv[:2]) if argv[0] == "query" else argv[0]
    code, lines, out, _ = run_cli(capfd, *argv, "-c", str(config))
    assert code == 2
    assert len(lines) == len(FINDINGS), lines
    for line, finding in zip(lines, FINDINGS, strict=True):
        assert line.startswith(f"ivm {command}: ") and finding in line, lines
    assert "Traceback" not in out


# --- schema files: missing, not JSON, not a relation record --------------------------------------------


def test_a_missing_and_broken_relation_schemas_in_a_configuration(tmp_path: Path, capfd) -> None:
    (tmp_path / "notjson.avsc").write_text("{not json")
    (tmp_path / "notrel.avsc").write_text('{"type": "record", "name": "S", "fields": [{"name": "B", "type": "long"}]}')
    relations = {"R": str(tmp_path / "notjson.avsc"), "S": str(tmp_path / "notrel.avsc"), "T": "missing.avsc"}
    config = write_config(tmp_path, "127.0.0.1:9092", relations)
    config.write_text(config.read_text().replace("Q() :- R(a,b), S(b,c), T(c,a)", "Q() :- R(a,b)"))
    code, lines, _, _ = run_cli(capfd, "check", "-c", str(config))
    assert code == 2  # all three schema files reported at once, one line each, by the relation's key
    assert len(lines) == 3, lines
    assert lines[0].startswith("ivm check: [relations.R] schema") and "is not JSON" in lines[0], lines
    assert lines[1].startswith("ivm check: [relations.S] schema") and "not a relation update" in lines[1], lines
    assert "[relations.T] schema" in lines[2] and "missing.avsc" in lines[2], lines
    (tmp_path / "missing.avsc").write_text((RELATIONS / "T.avsc").read_text())
    code, lines, _, _ = run_cli(capfd, "check", "-c", str(config))
    assert code == 2
    assert len(lines) == 2, lines
    assert lines[0].startswith("ivm check: [relations.R] schema") and "notjson.avsc" in lines[0], lines
    assert lines[1].startswith("ivm check: [relations.S] schema") and "notrel.avsc" in lines[1], lines


@pytest.mark.parametrize(
    ("content", "cause"),
    [
        ("{not json", "is not JSON"),
        ('{"type": "record", "name": "R", "fields": [{"name": "A", "type": "long"}]}', "not a relation update"),
        ('["long"]', "not a relation update"),
    ],
    ids=["not-json", "no-mult", "not-a-record"],
)
def test_ivm_produce_with_a_broken_relation_schema(
    content: str, cause: str, tmp_path: Path, edges: Path, monkeypatch, capfd
) -> None:
    folder = tmp_path / "schemas" / "relations"
    folder.mkdir(parents=True)
    (folder / "R.avsc").write_text(content)
    monkeypatch.setenv("IVM_SCHEMAS", str(tmp_path / "schemas"))
    code, lines, _, _ = run_cli(capfd, "produce", str(edges), "-r", "R", "--bootstrap", "127.0.0.1:1")
    assert code == 2
    assert_one_line(lines, "produce", str(folder / "R.avsc"), cause)


@pytest.mark.parametrize(
    ("spec", "cause"),
    [
        ("notjson.avsc", "not JSON"),
        ("notrel.avsc", "not a relation update schema"),
        ("missing.avsc", "no such file"),
        ("{bad", "not JSON"),
        ("R", "use R=A,B"),
    ],
)
def test_ivm_explain_with_a_broken_schema(spec: str, cause: str, tmp_path: Path, monkeypatch, capfd) -> None:
    (tmp_path / "notjson.avsc").write_text("{not json")
    (tmp_path / "notrel.avsc").write_text('{"type": "record", "name": "R", "fields": [{"name": "A", "type": "long"}]}')
    monkeypatch.chdir(tmp_path)
    code, lines, out, _ = run_cli(capfd, "explain", "--schema", spec, "SELECT COUNT(*) FROM R")
    assert code == 2 and not out
    assert_one_line(lines, "explain", spec, cause)


# --- an unreachable broker: one line naming the address, exit 1, within seconds ---------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["status", "-c", "{config}"],
        ["status", "-c", "{config}", "--json"],
        ["subscribe", "tri.result", "-c", "{config}"],
        ["subscribe", "tri.result", "--bootstrap", "{closed}"],
        ["produce", "{edges}", "-r", "R", "-r", "S", "--bootstrap", "{closed}"],
        ["bootstrap", "-c", "{config}", "-l", "R={edges}"],
        ["query", "list", "-c", "{config}"],
        ["reset", "-c", "{config}", "--yes"],
    ],
    ids=lambda argv: " ".join(a for a in argv[:2] if "{" not in a),
)
def test_an_unreachable_broker(argv: list[str], closed: str, edges: Path, tmp_path: Path, capfd) -> None:
    config = write_config(tmp_path, closed)
    args = [a.format(config=config, closed=closed, edges=edges) for a in argv]
    command = " ".join(args[:2]) if args[0] == "query" else args[0]
    if args[0] in ("query", "reset"):  # their Kafka timeouts are 30 s and more: bounded in a subprocess
        try:
            done = subprocess.run(
                [sys.executable, "-m", "ivm.processor.cli", *args], capture_output=True, text=True,
                timeout=BROKER_DEADLINE, cwd=ROOT,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            pytest.fail(f"ivm {command} took more than {BROKER_DEADLINE:.0f} s to report an unreachable broker")
        code, lines = done.returncode, done.stderr.splitlines()
    else:
        code, lines, _, elapsed = run_cli(capfd, *args)
        assert elapsed < BROKER_DEADLINE
    assert code == 1
    assert_one_line(lines, command, closed, "cannot reach the Kafka broker", "connection refused")


def test_an_unknown_broker_host(capfd) -> None:
    code, lines, _, elapsed = run_cli(capfd, "subscribe", "x.result", "--bootstrap", "no-such-host.invalid:9092")
    assert code == 1 and elapsed < BROKER_DEADLINE
    assert_one_line(lines, "subscribe", "no-such-host.invalid:9092", "unknown host")


def test_a_port_that_is_not_a_kafka_broker(capfd) -> None:
    """Something listens but never answers as Kafka: one line after the probe's timeout, not 30 s."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        address = f"127.0.0.1:{listener.getsockname()[1]}"
        code, lines, _, elapsed = run_cli(capfd, "subscribe", "x.result", "--bootstrap", address)
    assert code == 1 and elapsed < BROKER_DEADLINE
    assert_one_line(lines, "subscribe", address, "no Kafka broker there answered")


def test_an_unreachable_schema_registry(edges: Path, capfd) -> None:
    registry = f"http://127.0.0.1:{free_port()}"
    code, lines, _, elapsed = run_cli(
        capfd, "produce", str(edges), "-r", "R", "--encoding", "confluent", "--schema-registry", registry
    )
    assert code == 1 and elapsed < BROKER_DEADLINE
    assert_one_line(lines, "produce", registry, "cannot be reached")


# --- topics, relations and files that do not exist ---------------------------------------------------------


def test_ivm_produce_to_an_unknown_relation(edges: Path, capfd) -> None:
    code, lines, _, _ = run_cli(capfd, "produce", str(edges), "-r", "R", "-r", "X", "--bootstrap", "127.0.0.1:1")
    assert code == 2
    assert_one_line(lines, "produce", "no schema for X in", "known: R, S, T")


def test_ivm_produce_a_file_that_does_not_exist(tmp_path: Path, capfd) -> None:
    missing = tmp_path / "nothing.txt"
    code, lines, _, _ = run_cli(capfd, "produce", str(missing), "-r", "R", "--bootstrap", "127.0.0.1:1")
    assert code == 2
    assert_one_line(lines, "produce", str(missing), "no such file")


def test_ivm_produce_a_line_that_does_not_parse(tmp_path: Path, capfd) -> None:
    path = tmp_path / "e.txt"
    path.write_text("1 2\n2 x\n")
    code, lines, _, _ = run_cli(capfd, "produce", str(path), "-r", "R", "--bootstrap", "127.0.0.1:1")
    assert code == 2
    assert_one_line(lines, "produce", f"{path}:2", "not an integer")


@pytest.mark.parametrize(
    ("load", "cause"),
    [("R={missing}", "does not exist"), ("X={edges}", "no relation 'X'"), ("R", "RELATION=PATH")],
)
def test_ivm_bootstrap_bad_loads(load: str, cause: str, tmp_path: Path, edges: Path, closed: str, capfd) -> None:
    config = write_config(tmp_path, closed)
    item = load.format(missing=tmp_path / "missing.csv", edges=edges)
    code, lines, _, _ = run_cli(capfd, "bootstrap", "-c", str(config), "-l", item)
    assert code == 2
    assert_one_line(lines, "bootstrap", item, cause)


def test_ivm_demo_with_an_edge_file_that_does_not_exist(tmp_path: Path, capfd) -> None:
    code, lines, out, _ = run_cli(capfd, "demo", "--edges", str(tmp_path / "none.txt"))
    assert code == 2 and not out
    assert_one_line(lines, "demo", "none.txt", "no such file")


# --- queries that do not parse or are not supported ---------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "cause"),
    [
        ("SELECT COUNT(* FROM R", "line 1, column"),
        ("SELECT COUNT(*) FROM R WHERE", "line 1, column"),
        ("SELECT COUNT(*) FROM R WHERE A = 'x", "cannot parse SQL"),
        ("SELECT COUNT(*) FROM R WHERE A > 1", "comparison '>' in WHERE"),
        ("SELECT COUNT(*) FROM R LEFT JOIN S ON R.B = S.B", "LEFT JOIN"),
        ("SELECT COUNT(*) FROM (SELECT * FROM R)", "SUBQUERY"),
        ("SELECT COUNT(*) FROM U", "unknown relation 'U'"),
        ("Q(a) :- R(a,b), S(b,c", "expected ','"),
        ("Q(x) :- R(a,b)", "do not occur in the body"),
        ("DROP TABLE R", "expected a rule"),
    ],
)
def test_ivm_explain_a_query_that_does_not_parse(query: str, cause: str, capfd) -> None:
    code, lines, out, _ = run_cli(capfd, "explain", query)
    assert code == 2 and not out
    assert_one_line(lines, "explain", cause)


def test_ivm_explain_sql_finds_the_relation_schemas_from_any_folder(tmp_path: Path, monkeypatch, capfd) -> None:
    monkeypatch.chdir(tmp_path)
    code, lines, out, _ = run_cli(capfd, "explain", "SELECT COUNT(*) FROM R, S WHERE R.B = S.B")
    assert code == 0 and not lines
    assert out.startswith("query: Q() :- R(A, B), S(B, C)")
    code, lines, _, _ = run_cli(capfd, "explain", "SELECT COUNT(*) FROM Delta")
    assert code == 2 and "known: ['R', 'S', 'T']" in lines[0]  # the output schemas are not relations


def test_ivm_explain_an_engine_that_refuses(capfd) -> None:
    code, lines, _, _ = run_cli(capfd, "explain", "Q() :- R(a,b), S(b,c), T(c,a)", "--engine", "qhier")
    assert code == 2
    assert_one_line(lines, "explain", "--engine")


# --- ports in use ------------------------------------------------------------------------------------------


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield listener.getsockname()[1]


@pytest.mark.parametrize("service", ["kafka", "prometheus"])
def test_ivm_local_on_a_port_in_use(service: str, busy_port: int, tmp_path: Path, capfd) -> None:
    argv = ["local", service, "--port", str(busy_port)]
    if service == "kafka":
        argv += ["--dir", str(tmp_path / "kafka")]
    code, lines, _, _ = run_cli(capfd, *argv)
    assert code == 1
    assert_one_line(lines, f"local {service}", f"127.0.0.1:{busy_port}", "is not free", "--port")


def test_ivm_local_a_port_out_of_range(capfd) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["local", "kafka", "--port", "70000"])
    assert exit_.value.code == 2
    assert "70000 is not a TCP port" in capfd.readouterr().err


# --- -v, bugs and python -m ivm.processor.cli -----------------------------------------------------------------


def test_verbose_adds_the_traceback(capfd) -> None:
    code, lines, _, _ = run_cli(capfd, "-v", "explain", "SELECT COUNT(* FROM R")
    assert code == 2
    assert lines[0].startswith("Traceback") and any("QuerySyntaxError" in line for line in lines)
    assert lines[-1].startswith("ivm explain: cannot parse SQL")


def test_a_bug_still_shows_its_traceback(monkeypatch) -> None:
    import ivm.processor.commands.check

    def broken(args) -> int:
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(ivm.processor.commands.check, "run", broken)
    with pytest.raises(ZeroDivisionError):
        main(["check", "-c", "x.toml"])


def test_python_m_processor_cli_reports_command_errors(tmp_path: Path) -> None:
    """``python -m ivm.processor.cli``: the commands' CommandError is the imported module's class."""
    done = subprocess.run(
        [sys.executable, "-m", "ivm.processor.cli", "demo", "--edges", str(tmp_path / "none.txt")],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.splitlines() == [f"ivm demo: --edges {tmp_path / 'none.txt'}: no such file"]


def test_user_errors_are_classified() -> None:
    from ivm.processor.config import ConfigError
    from ivm.processor.kafka.topics import BrokerUnreachable

    assert ivm.processor.cli.user_error(ConfigError(["a", "b"])) == (2, ["a", "b"])
    assert ivm.processor.cli.user_error(BrokerUnreachable("x")) == (1, ["x"])
    assert ivm.processor.cli.user_error(FileNotFoundError(2, "No such file or directory", "f.txt")) == (
        2,
        ["f.txt: no such file or directory"],
    )
    assert ivm.processor.cli.user_error(ValueError("a bug's")) is None
    assert ivm.processor.cli.user_error(KeyError("k")) is None


@pytest.mark.parametrize("query", [[], ["q"]], ids=["whole pipeline", "one query"])
def test_ivm_reset_while_the_pipeline_runs_is_refused(query: list[str], tmp_path: Path, capfd) -> None:
    """Issue 36 point 5c: the README says to stop the pipeline before `ivm reset`; while its heartbeat says it
    runs, the reset is refused (one line, exit 1) and the snapshot stays."""
    from ivm.processor.operations.heartbeat import Heartbeat

    state = tmp_path / "state"
    toml = tmp_path / "pipeline.toml"
    toml.write_text(
        f'[processor]\nname = "p"\nstate_dir = "{state}"\n[kafka]\nbootstrap = "127.0.0.1:{free_port()}"\n'
        f'[[relations]]\nname = "R"\n[[queries]]\nname = "q"\nquery = "Q() :- R(a,b)"\n'
    )
    state.mkdir()
    (state / "snapshot-000000000003.pkl").write_bytes(b"kept")
    beat = Heartbeat(state, pipeline="p").start()
    try:
        code, lines, _out, _ = run_cli(capfd, "reset", *query, "-c", str(toml), "--yes")
    finally:
        beat.stop()
    assert code == 1
    assert len(lines) == 1 and lines[0].startswith("ivm reset: pipeline p is running (pid "), lines
    assert "stop it first" in lines[0]
    assert (state / "snapshot-000000000003.pkl").read_bytes() == b"kept"
