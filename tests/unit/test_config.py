"""Pipeline configuration: the demo file loads; invalid files fail with the key named."""

from __future__ import annotations

from pathlib import Path

import pytest

from processor.config import ConfigError, load_config, parse_config

ROOT = Path(__file__).resolve().parents[2]


def test_demo_config_loads() -> None:
    config = load_config(ROOT / "config" / "demo.toml")
    assert [r.name for r in config.relations] == ["R", "S", "T"]
    assert config.queries[0].result_topic == "triangle.result"
    assert config.policy.negative == "reject"
    assert config.with_overrides(bootstrap="x:1", metrics_port=None).bootstrap == "x:1"


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"relations": [{"name": "R"}]}, r"no \[\[queries\]\]"),
        ({"queries": [{"name": "q", "query": "Q() :- R(a)"}]}, r"no \[\[relations\]\]"),
        ({"bogus": 1, "relations": [], "queries": []}, "unknown top-level keys"),
        ({"relations": [{"name": "R"}], "queries": [{"name": "q"}]}, r"queries\[0\]\.query is required"),
        (
            {"relations": [{"name": "R"}], "queries": [{"name": "q", "query": "x", "eps": 2}]},
            r"eps must be a number in \[0, 1\]",
        ),
        (
            {"relations": [{"name": "R"}], "queries": [{"name": "q", "query": "x"}], "policy": {"negative": "no"}},
            r"\[policy\]",
        ),
    ],
)
def test_invalid_configs_name_the_key(raw: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config(raw)


def test_missing_file() -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config("/nonexistent.toml")


def test_dump_round_trips() -> None:
    import tomllib

    from processor.config import dump_config

    config = load_config(ROOT / "config" / "demo.toml").with_overrides(name='we"ird', shards=8, metrics_port=9)
    assert parse_config(tomllib.loads(dump_config(config))) == config
