"""Mutation tests of the configuration: any valid configuration passes ``ivm check``; one typo in a key,
one value of the wrong type, or one dropped required section or key fails it (exit 2) with a one-line
finding that names the mutated key where the file has it.  No Kafka, no Spark."""

from __future__ import annotations

import json
import shutil
import string
import tomllib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ivm.processor.cli import main
from ivm.processor.config import (
    KafkaTable,
    MetricsTable,
    PolicyTable,
    ProcessorTable,
    QueryTable,
    RelationTable,
    SparkTable,
)

ROOT = Path(__file__).resolve().parents[2]
TABLES = {
    "processor": ProcessorTable,
    "kafka": KafkaTable,
    "spark": SparkTable,
    "metrics": MetricsTable,
    "policy": PolicyTable,
    "relations": RelationTable,
    "queries": QueryTable,
}
SCHEMAS = ROOT / "schemas" / "relations"

# query templates over R(A,B), S(B,C), T(C,A), each with the engines that can maintain it
TEMPLATES: list[tuple[str, list[str]]] = [
    ("Q() :- R(a,b), S(b,c), T(c,a)", ["auto", "first_order", "first_order_delta", "ivm_eps", "ivm_eps_auto"]),
    ("Q(a) :- R(a,b), S(b,c)", ["auto", "fivm", "first_order_delta", "propagation"]),
    ("Q() :- R(a,b), S(a,c)", ["auto", "fivm", "qhier", "first_order_delta"]),
    ("Q(a, SUM(b)) :- R(a,b), T(b,c)", ["auto", "fivm", "first_order_delta"]),
    ("SELECT COUNT(*) FROM R, S WHERE R.B = S.B", ["auto", "fivm", "first_order_delta"]),
    ("Q(COVAR(a, b, c)) :- R(a,b), S(b,c)", ["auto", "fivm"]),  # with a model
]
TOPIC = st.text(string.ascii_lowercase + string.digits + "._-", min_size=1, max_size=12)
NAME = st.text(string.ascii_lowercase, min_size=1, max_size=8)


def keys_of(model) -> list[str]:
    return [f.alias or name for name, f in model.model_fields.items()]


@st.composite
def queries(draw, index: int) -> dict[str, Any]:
    text, engines = draw(st.sampled_from(TEMPLATES))
    q: dict[str, Any] = {"name": f"q{index}", "query": text}
    engine = draw(st.sampled_from(engines))
    if engine != "auto" or draw(st.booleans()):
        q["engine"] = engine
    if engine == "ivm_eps" and draw(st.booleans()):
        q["eps"] = draw(st.floats(0.0, 1.0))
    if draw(st.booleans()):
        q["shards"] = draw(st.integers(1, 3))
    if text.startswith("Q(COVAR"):
        if draw(st.booleans()):
            q["model"] = "linear_regression"
            q["label"] = draw(st.sampled_from("abc"))
            if draw(st.booleans()):
                q["method"] = draw(st.sampled_from(["closed_form", "gradient_descent"]))
        else:
            q["model"] = "chow_liu"
    if engine == "propagation" or (engine == "auto" and text.startswith("Q(a) :-")):
        q["patterns"] = draw(st.lists(st.sampled_from(["R=insert-only", "S=fifo", "R+S=fifo"]), max_size=2))
    return q


@st.composite
def configurations(draw) -> dict[str, Any]:
    """A valid configuration: sections with random keys, the relations its 1-3 queries use (and maybe more)."""
    raw: dict[str, Any] = {}
    if draw(st.booleans()):
        raw["processor"] = draw(
            st.fixed_dictionaries(
                {},
                optional={
                    "name": NAME,
                    "state_dir": st.sampled_from(["state", "/tmp/ivm-state"]),
                    "snapshot_every": st.integers(0, 100),
                    "exactly_once": st.booleans(),
                    "shards": st.integers(1, 4),
                },
            )
        )
    registry = draw(st.booleans())
    kafka = draw(
        st.fixed_dictionaries(
            {},
            optional={
                "bootstrap": st.sampled_from(["127.0.0.1:9092", "kafka:9092,kafka2:19092"]),
                "dead_letter_topic": st.sampled_from(["ivm.dead-letter", "dead_letters"]),
            },
        )
    )
    if registry:
        kafka["schema_registry"] = "http://127.0.0.1:8081"
    if kafka or draw(st.booleans()):
        raw["kafka"] = kafka
    if draw(st.booleans()):
        raw["spark"] = draw(
            st.fixed_dictionaries(
                {},
                optional={
                    "master": st.sampled_from(["local[2]", "local[*]"]),
                    "max_offsets_per_trigger": st.integers(1, 10**6),
                    "trigger_ms": st.integers(0, 10_000),
                    "fetch_bytes": st.integers(1, 1 << 30),
                    "starting_offsets": st.sampled_from(["earliest", "latest"]),
                },
            )
        )
    if draw(st.booleans()):
        raw["metrics"] = draw(
            st.fixed_dictionaries(
                {}, optional={"port": st.integers(0, 65535), "address": st.sampled_from(["127.0.0.1", "0.0.0.0"])}
            )
        )
    if draw(st.booleans()):
        raw["policy"] = draw(
            st.fixed_dictionaries(
                {},
                optional={
                    "negative": st.sampled_from(["reject", "allow"]),
                    "duplicate": st.sampled_from(["accumulate", "reject"]),
                },
            )
        )
    n = draw(st.integers(1, 3))
    raw["queries"] = [draw(queries(i)) for i in range(n)]
    window = draw(st.sampled_from([None, {"window_count": 5}, {"window_seconds": 2.5}]))
    relations = []
    for name in "RST":
        rel: dict[str, Any] = {"name": name}
        if draw(st.booleans()):
            rel["topic"] = "in." + name + draw(TOPIC)
        schema = draw(st.sampled_from([None, "relative", "absolute"]))
        if schema == "relative":
            rel["schema"] = f"schemas/{name}.avsc"
        elif schema == "absolute":
            rel["schema"] = str(SCHEMAS / f"{name}.avsc")
        if draw(st.booleans()):
            rel["encoding"] = "confluent" if registry and draw(st.booleans()) else "avro"
        if window is not None and name in "RS":
            rel.update(window)
            rel["window_group"] = "rs"
        relations.append(rel)
    raw["relations"] = relations
    return raw


def to_toml(raw: dict[str, Any]) -> str:
    """The TOML text of a document of tables and arrays of tables of scalars and string lists."""

    def value(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, int | float):
            return repr(v)
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        return json.dumps(v)

    lines: list[str] = []
    for key, table in raw.items():
        rows = table if isinstance(table, list) else [table]
        for row in rows:
            lines.append(f"[[{key}]]" if isinstance(table, list) else f"[{key}]")
            lines += [f"{k} = {value(v)}" for k, v in row.items()]
            lines.append("")
    return "\n".join(lines)


def where(raw: dict[str, Any], section: str, index: int | None, touches_name: bool) -> str:
    """The table label the findings use: [processor], [queries.NAME] or [queries[i]] when the name is bad."""
    if index is None:
        return f"[{section}]"
    name = raw[section][index].get("name")
    if touches_name or not isinstance(name, str):
        return f"[{section}[{index}]]"
    return f"[{section}.{name}]"


def typo(word: str, choice: int, position: int) -> str:
    i = position % len(word)
    if choice == 0:  # drop a letter
        return word[:i] + word[i + 1 :] if len(word) > 1 else word + word
    if choice == 1 and len(word) > 1:  # swap two neighbours
        j = min(i + 1, len(word) - 1)
        i = j - 1
        return word[:i] + word[j] + word[i] + word[j + 1 :]
    if choice == 2:  # double a letter
        return word[: i + 1] + word[i:]
    return word[:i] + ("x" if word[i] != "x" else "y") + word[i + 1 :]  # replace a letter


def wrong_type(v: Any, pick: int) -> Any:
    """A value of another TOML type that the key's declared type refuses (strict: no coercion)."""
    if isinstance(v, bool):
        return ["true" if v else "false", int(v)][pick % 2]
    if isinstance(v, int):
        return [str(v), v + 0.5, bool(v % 2)][pick % 3]
    if isinstance(v, float):
        return [str(v), True][pick % 2]
    if isinstance(v, list):
        return ",".join(v)
    return [7, True, ["x"]][pick % 3]


def table_keys(section: str) -> list[str]:
    return keys_of(TABLES[section])


def places(raw: dict[str, Any]) -> list[tuple[str, int | None, str]]:
    """Every (section, entry index, key) of the document."""
    out = []
    for section, table in raw.items():
        rows = list(enumerate(table)) if isinstance(table, list) else [(None, table)]
        out += [(section, i, key) for i, row in rows for key in row]
    return out


@st.composite
def mutated(draw) -> tuple[dict[str, Any], dict[str, Any], str]:
    """(valid configuration, the configuration with exactly one mutation, the line prefix that must name it)."""
    raw = draw(configurations())
    bad = json.loads(json.dumps(raw))
    kind = draw(st.sampled_from(["typo", "type", "drop", "typo", "type", "drop", "table typo"]))
    if kind == "drop":
        required = [("relations", i, "name") for i in range(len(raw["relations"]))]
        required += [("queries", i, key) for i in range(len(raw["queries"])) for key in ("name", "query")]
        required += [("queries", i, "label") for i, q in enumerate(raw["queries"]) if "label" in q]
        required += [("relations", None, None), ("queries", None, None)]
        section, index, key = draw(st.sampled_from(required))
        if key is None:
            del bad[section]
            return raw, bad, f"no [[{section}]] configured"
        del bad[section][index][key]
        label = where(raw, section, index, key == "name")
        return raw, bad, f"{label} {key}: required"
    if kind == "table typo":  # a table's own name
        section = draw(st.sampled_from(list(raw)))
        new = typo(section, draw(st.integers(0, 3)), draw(st.integers(0, 30)))
        if new in TABLES:
            new = section + "s"
        bad[new] = bad.pop(section)
        return raw, bad, f"unknown key {new!r} at the top level"
    section, index, key = draw(st.sampled_from(places(raw)))
    row = bad[section] if index is None else bad[section][index]
    label = where(raw, section, index, key == "name")
    if kind == "typo":
        valid = table_keys(section)
        for _ in range(20):
            new = typo(key, draw(st.integers(0, 3)), draw(st.integers(0, 30)))
            if new not in valid and new not in row:
                break
        else:
            new = key + "x"
        row[new] = row.pop(key)
        return raw, bad, f"unknown key {new!r} in {label}"
    row[key] = wrong_type(row[key], draw(st.integers(0, 5)))
    return raw, bad, f"{label} {key}: expected "


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """A configuration folder with a ``schemas`` subfolder (relative schema paths resolve against it)."""
    path = tmp_path_factory.mktemp("pipeline")
    (path / "schemas").mkdir()
    for name in "RST":
        shutil.copy(SCHEMAS / f"{name}.avsc", path / "schemas" / f"{name}.avsc")
    return path


def check(folder: Path, raw: dict[str, Any], capsys) -> tuple[int, list[str]]:
    path = folder / "pipeline.toml"
    path.write_text(to_toml(raw))
    assert tomllib.loads(path.read_text()) == raw  # the writer round-trips
    code = main(["check", "-c", str(path)])
    return code, capsys.readouterr().err.splitlines()


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=mutated())
def test_one_mutation_fails_check_with_a_line_naming_the_key(case, folder: Path, capsys) -> None:
    raw, bad, expected = case
    code, err = check(folder, raw, capsys)
    assert (code, err) == (0, []), err
    code, err = check(folder, bad, capsys)
    assert code == 2
    assert err and all(line.startswith("ivm check: ") for line in err), err
    assert any(line.startswith(f"ivm check: {expected}") for line in err), (expected, err)


def demo_places() -> list[tuple[str, int | None, str]]:
    return places(tomllib.loads((ROOT / "config" / "demo.toml").read_text()))


@pytest.mark.parametrize(("section", "index", "key"), demo_places())
def test_every_key_of_the_demo_file_is_checked(
    section: str, index: int | None, key: str, tmp_path: Path, capsys
) -> None:
    """A typo in any key of config/demo.toml, or a value of another type, is named; the file itself passes."""
    text = (ROOT / "config" / "demo.toml").read_text()
    raw = tomllib.loads(text)
    (tmp_path / "config").mkdir()
    shutil.copytree(ROOT / "schemas", tmp_path / "schemas")
    assert check(tmp_path / "config", raw, capsys) == (0, [])
    label = where(raw, section, index, key == "name")
    original = raw[section][key] if index is None else raw[section][index][key]
    for mutation in ("typo", "type"):
        bad = json.loads(json.dumps(raw))
        row = bad[section] if index is None else bad[section][index]
        if mutation == "typo":
            row[key[:-1]] = row.pop(key)
            expected = f"unknown key {key[:-1]!r} in {label}"
        else:
            row[key] = wrong_type(original, 0)
            expected = f"{label} {key}: expected "
        code, err = check(tmp_path / "config", bad, capsys)
        assert code == 2
        assert any(line.startswith(f"ivm check: {expected}") for line in err), (expected, err)
