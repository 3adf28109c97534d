"""The ``knarr`` command: run, check, init, demo, dlq, probe and backfill.

Every subcommand returns an exit code; an error for people (:class:`knarr.errors.KnarrError`)
is printed as one message, prefixed with the command, and ends the command with the code
its class carries (see ``knarr.errors.ExitCode`` and the README's table).
"""

from __future__ import annotations

import argparse
import os
import sys

from knarr.config.root import CONFIG_PATH_ENV
from knarr.errors import ExitCode, KnarrError


def _run(args: argparse.Namespace) -> int:
    from knarr.cli.run import run_command

    return run_command(args.config, args.handler, progress=args.progress, processes=args.processes)


def _check(args: argparse.Namespace) -> int:
    from knarr.cli.check import check_command

    return check_command(args.config, args.handler)


def _init(args: argparse.Namespace) -> int:
    from knarr.cli.scaffold import init_command

    return init_command(args.directory, force=args.force, persistent=args.persistent)


def _demo(args: argparse.Namespace) -> int:
    from knarr.demo.run import run_demo

    return run_demo(args.out, kafka=args.kafka)


def _backfill(args: list[str]) -> int:
    try:
        from knarr_spark.cli import main as backfill_main  # the Spark backfill package, installed separately
    except ImportError:
        print("knarr backfill: the Spark backfill package (knarr-spark) is not installed", file=sys.stderr)
        return ExitCode.USAGE
    return backfill_main(args)


def version_text() -> str:
    import platform

    import confluent_kafka

    from knarr import __version__

    return (f"knarr {__version__} (Python {platform.python_version()}, confluent-kafka {confluent_kafka.__version__}, "
            f"librdkafka {confluent_kafka.libversion()[0]})")


def _processes(text: str) -> int:
    from knarr.config.root import MAX_PROCESSES

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number; give 0 to {MAX_PROCESSES}") from None
    if not 0 <= value <= MAX_PROCESSES:
        raise argparse.ArgumentTypeError(f"{value} is out of range; give 0 (one per CPU) to {MAX_PROCESSES}")
    return value


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="knarr", description="Kafka -> subprocess stream processing")
    p.add_argument("--version", action="version", version=version_text())
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    handler_help = ("module.path:Class or path/to/file.py:Class; default: the config's `handler` key")

    run = sub.add_parser("run", help="run a worker")
    run.add_argument("--config", help=f"YAML config file (or set {CONFIG_PATH_ENV})")
    run.add_argument("--handler", help=handler_help)
    run.add_argument("--no-progress", dest="progress", action="store_false",
                     help="no progress bar (it only shows for the local source, on a terminal)")
    run.add_argument("--processes", type=_processes, metavar="N",
                     help="worker processes under one supervisor, sharing executor.max_executors (0: one per CPU "
                          "allowed; default: the config's `processes`, 1)")
    run.set_defaults(fn=_run)

    check = sub.add_parser("check", help="validate a config and its handler without connecting to anything")
    check.add_argument("--config", help=f"YAML config file (or set {CONFIG_PATH_ENV})")
    check.add_argument("--handler", help=handler_help)
    check.set_defaults(fn=_check)

    init = sub.add_parser("init", help="write a small working pipeline (handler, config, input, Pipeline manifest)")
    init.add_argument("directory", help="where to write it (created if missing)")
    init.add_argument("--force", action="store_true", help="overwrite files that exist")
    init.add_argument("--persistent", action="store_true",
                      help="run the tasks in a persistent task program (tasks.py, started once per pool slot) "
                           "instead of spawning a process per task")
    init.set_defaults(fn=_init)

    demo = sub.add_parser("demo", help="run the fan-out search demo on the embedded source")
    demo.add_argument("--out", default="out/demo", help="where the demo writes its input and results")
    demo.add_argument("--kafka", default=None, help="bootstrap servers: run the demo on Kafka instead")
    demo.set_defaults(fn=_demo)

    from knarr.cli.dlq import add_parsers as add_dlq_parsers
    from knarr.cli.probe import add_parser as add_probe_parser

    add_dlq_parsers(sub)
    add_probe_parser(sub, handler_help)

    sub.add_parser("backfill", help="reprocess history on Spark (see knarr backfill --help)")
    sub.add_parser("migrate-config", help="translate a Drakkar config (see knarr migrate-config --help)")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "backfill":
        return _backfill(argv[1:])
    if argv and argv[0] == "migrate-config":
        from knarr.migrate.cli import main as migrate_main

        return migrate_main(argv[1:])
    args = parser().parse_args(argv)  # bad arguments: argparse exits 2 (ExitCode.USAGE)
    from knarr.observability.termination import record_error

    try:
        return int(args.fn(args))
    except KnarrError as exc:
        print(f"knarr {args.command}: {exc}", file=sys.stderr)
        record_error(exc)  # the one line Kubernetes shows in the pod's status
        return int(exc.exit_code)
    except BrokenPipeError:  # `knarr check ... | head`: the reader left; that is not an error
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115  (so the interpreter's final flush is quiet)
        return ExitCode.OK
    except Exception as exc:  # a bug: the traceback goes to stderr as always, the reason to Kubernetes
        record_error(exc)
        raise
