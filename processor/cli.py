"""The ``ivm`` command line.

Each subcommand is a module of ``ivm/processor/commands/`` with two functions,
``add_parser(subparsers)`` and ``run(args) -> int``; this file finds and
dispatches them, and turns the errors a user can cause into one line each.

Exit codes: 0 success, 1 runtime failure (a broker or registry that cannot be
reached, a Kafka error, a busy port), 2 bad usage or configuration (a
configuration finding, a query that does not parse, a file that does not
exist); 130 after Ctrl-C, 141 when the reader of the output went away
(``| head``).  An error a user can cause is printed as ``ivm COMMAND: message``, one
line (one line per finding for a configuration), without a traceback; ``ivm -v
COMMAND`` prints the traceback too.  Anything else is a bug and ends with its
traceback.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import pkgutil
import sys
import traceback

import ivm.processor.commands


class CommandError(Exception):
    """An error a command reports to its user: the message (its lines) and the exit code (1 or 2)."""

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ivm",
        description="Incremental view maintenance over Kafka relation topics, on Spark. "
        "Every COMMAND has --help. Exit codes: 0 success, 1 runtime failure (Kafka, the schema registry, a busy "
        "port), 2 bad usage or configuration; errors are one line each, -v adds the traceback.",
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true",
        help="log at INFO level, show the Kafka client's own log lines and the traceback of an error",
    )  # fmt: skip
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for info in sorted(pkgutil.iter_modules(ivm.processor.commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"ivm.processor.commands.{info.name}")
        if hasattr(module, "add_parser") and hasattr(module, "run"):
            sub = module.add_parser(subparsers)
            sub.set_defaults(handler=module.run)
    return parser


def command_name(args: argparse.Namespace) -> str:
    """``ivm COMMAND`` with its sub-action (``ivm query list``, ``ivm local kafka``), the errors' prefix."""
    words = ["ivm", args.command]
    for sub in ("action", "service"):
        value = getattr(args, sub, None)
        if isinstance(value, str):
            words.append(value)
    return " ".join(words)


def user_error(err: BaseException) -> tuple[int, list[str]] | None:
    """``(exit code, lines)`` of an error a user can cause, ``None`` for anything else (a bug).

    Exit 2: usage and configuration (:class:`~ivm.processor.config.ConfigError`, one line per
    finding; a query that does not parse or that an engine refuses; an input file that does
    not parse, does not exist or cannot be read; a topic that is not the pipeline's).  Exit 1:
    runtime (a Kafka broker or schema registry that cannot be reached or fails, a bootstrap
    that cannot run, an artifact that cannot be fetched, a timeout).
    """
    if isinstance(err, CommandError):
        return err.exit_code, str(err).splitlines() or [type(err).__name__]
    if isinstance(err, ModuleNotFoundError) and missing_extra(err) is not None:
        return 2, [missing_extra(err) or ""]
    if _instance(err, "ivm.processor.config.ConfigError"):
        return 2, list(err.errors)
    if _instance(err, *_USAGE):
        return 2, str(err).splitlines()
    if isinstance(err, FileNotFoundError | IsADirectoryError | NotADirectoryError | PermissionError):
        reason = (err.strerror or type(err).__name__).lower()
        return 2, [f"{err.filename}: {reason}" if err.filename else str(err)]
    if _instance(err, *_RUNTIME):
        return 1, _one_line(str(err))
    if _instance(err, "confluent_kafka.KafkaException"):
        from ivm.processor.kafka.topics import kafka_reason

        return 1, [f"Kafka: {kafka_reason(err)}"]
    if isinstance(err, TimeoutError):
        return 1, _one_line(str(err) or "timed out")
    return None


#: The error types of bad usage or configuration (exit 2), as ``module.Class``.
_USAGE = (
    "ivm.query.parse.QuerySyntaxError",  # a query that does not parse, or SQL the reader refuses
    "ivm.engines.base.EngineRefused",  # an engine that cannot maintain the query
    "ivm.processor.planning.Refused",  # an engine, eps or pattern ivm run would refuse
    "ivm.processor.kafka.produce.InputError",  # an input file line that does not parse
    "ivm.processor.kafka.subscribe.UnknownTopicError",  # a topic that is not the pipeline's
)
#: The error types of runtime failures (exit 1).
_RUNTIME = (
    "ivm.processor.kafka.topics.BrokerUnreachable",
    "ivm.processor.codecs.confluent.RegistryError",
    "ivm.processor.bootstrap.BootstrapError",
    "ivm.processor.local.artifacts.ArtifactError",
    "ivm.processor.local.ports.PortInUse",
)


#: The top-level modules of the optional dependencies (pyproject.toml's extras) -> the extra that declares them.
EXTRA_MODULES = {
    "pyspark": "processor",
    "pyarrow": "processor",
    "confluent_kafka": "processor",
    "fastavro": "processor",
    "prometheus_client": "processor",
    "yaml": "processor",
    "pydantic": "processor",
    "pydantic_core": "processor",
    "matplotlib": "bench",
    "duckdb": "bench",
}


def missing_extra(err: ModuleNotFoundError) -> str | None:
    """The line for a command that needs an optional dependency the install lacks, ``None`` for any other.

    The base install (``pip install ivm-kafka``) has the engine library and ``ivm --help``; the streaming
    commands need the ``processor`` extra.

    >>> missing_extra(ModuleNotFoundError("No module named 'pydantic'", name="pydantic"))
    "needs pydantic, of the 'processor' extra, which this install lacks: pip install 'ivm-kafka[processor]'"
    >>> missing_extra(ModuleNotFoundError("No module named 'nothing'", name="nothing")) is None
    True
    """
    top = (err.name or "").partition(".")[0]
    extra = EXTRA_MODULES.get(top)
    if extra is None:
        return None
    return f"needs {top}, of the {extra!r} extra, which this install lacks: pip install 'ivm-kafka[{extra}]'"


def _instance(err: BaseException, *names: str) -> bool:
    """Whether ``err`` is an instance of one of the classes ``module.Class``.

    Only modules already imported are looked at: an error cannot be an instance of
    a class whose module was never loaded, and the error path imports nothing heavy.
    """
    for name in names:
        module, _, cls = name.rpartition(".")
        loaded = sys.modules.get(module)
        kind = getattr(loaded, cls, None) if loaded is not None else None
        if isinstance(kind, type) and isinstance(err, kind):
            return True
    return False


def _one_line(text: str) -> list[str]:
    return [" ".join(line.strip() for line in text.splitlines() if line.strip()) or text]


def configure_logging(verbose: bool) -> None:
    """INFO with ``-v``, WARNING otherwise; the Kafka client's own log lines only with ``-v``."""
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    from ivm.processor.kafka.clients import KAFKA_LOGGER

    KAFKA_LOGGER.setLevel(logging.DEBUG if verbose else logging.CRITICAL + 1)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(args.verbose)
    try:
        return int(args.handler(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the reader of stdout left (`ivm subscribe ... | head`): stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so that flushing at exit raises nothing more
        return 141
    except Exception as err:
        known = user_error(err)
        if known is None:
            raise  # a bug: its traceback
        code, lines = known
        if args.verbose:
            traceback.print_exception(err, file=sys.stderr)
        where = command_name(args)
        for line in lines:
            print(f"{where}: {line}", file=sys.stderr)
        return code


if __name__ == "__main__":  # python -m ivm.processor.cli: run the imported module's main, whose CommandError the
    from ivm.processor.cli import main as _main  # commands raise (this __main__ copy has a class of its own)

    sys.exit(_main())
