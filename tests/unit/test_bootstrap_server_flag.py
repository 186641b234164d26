"""Every command that talks to Kafka takes the broker address as Kafka's own tools do, ``--bootstrap-server``,
and still as ``--bootstrap``; with the same help text everywhere."""

from __future__ import annotations

import argparse

import pytest

from ivm.processor.cli import build_parser

#: A minimal command line of each command that talks to Kafka (``produce`` is another change's).
KAFKA_COMMANDS = {
    "run": ["run", "-c", "p.toml"],
    "status": ["status", "-c", "p.toml"],
    "subscribe": ["subscribe", "tri.result"],
    "query add": ["query", "add", "q", "Q() :- R(a, b)", "-c", "p.toml"],
    "query remove": ["query", "remove", "q", "-c", "p.toml"],
    "query list": ["query", "list", "-c", "p.toml"],
    "reset": ["reset", "-c", "p.toml", "--yes"],
    "bootstrap": ["bootstrap", "-c", "p.toml", "-l", "R=r.csv"],
}
#: Commands that do not connect to a broker given on the command line (``demo`` starts its own).
OFFLINE_COMMANDS = {"explain": ["explain", "Q() :- R(a, b)"], "check": ["check", "-c", "p.toml"], "demo": ["demo"]}


def subparser(words: list[str]) -> argparse.ArgumentParser:
    """The parser of ``ivm WORDS...`` (``["query", "add"]``: the ``add`` action of ``query``)."""
    parser = build_parser()
    for word in words:
        choices = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
        parser = choices[word]
    return parser


def bootstrap_action(parser: argparse.ArgumentParser) -> argparse.Action | None:
    return next((a for a in parser._actions if "--bootstrap-server" in a.option_strings), None)


@pytest.mark.parametrize("flag", ["--bootstrap-server", "--bootstrap"])
@pytest.mark.parametrize("command", list(KAFKA_COMMANDS))
def test_every_kafka_command_takes_both_flags(command: str, flag: str) -> None:
    args = build_parser().parse_args([*KAFKA_COMMANDS[command], flag, "broker-1:9092,broker-2:9092"])
    assert args.bootstrap == "broker-1:9092,broker-2:9092"
    assert build_parser().parse_args(KAFKA_COMMANDS[command]).bootstrap is None  # the configuration's, then


def test_both_flags_are_one_option_with_the_same_help_everywhere() -> None:
    helps = set()
    for command in KAFKA_COMMANDS:
        action = bootstrap_action(subparser(command.split()))
        assert action is not None, f"ivm {command} has no --bootstrap-server"
        assert action.option_strings == ["--bootstrap-server", "--bootstrap"] and action.dest == "bootstrap"
        helps.add(action.help)
    assert len(helps) == 1, helps
    assert "host:port" in helps.pop()


@pytest.mark.parametrize("command", list(OFFLINE_COMMANDS))
def test_offline_commands_take_neither(command: str) -> None:
    parser = subparser([command])
    assert bootstrap_action(parser) is None
    assert not any("--bootstrap" in a.option_strings for a in parser._actions)


def test_status_help_shows_both(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["status", "--help"])
    out = capsys.readouterr().out
    assert "--bootstrap-server HOST:PORT, --bootstrap HOST:PORT" in out
