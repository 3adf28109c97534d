"""The ``knarr`` command: ``knarr run`` (the worker), ``knarr demo``, ``knarr backfill`` (Spark), ``knarr migrate-config``."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

from knarr.config.loading import ConfigError, load_config
from knarr.config.root import CONFIG_PATH_ENV


def _run(args: argparse.Namespace) -> int:
    from knarr.loader import HandlerLoadError, load_handler_class
    from knarr.engine.worker import Worker
    from knarr.sinks.base import SinkConnectError

    if not args.config and not os.environ.get(CONFIG_PATH_ENV):
        print(f"knarr run: give --config PATH or set {CONFIG_PATH_ENV}", file=sys.stderr)
        return 2
    try:
        config = load_config(args.config)
        handler_cls = load_handler_class(args.handler)
    except (ConfigError, HandlerLoadError) as exc:
        print(f"knarr run: {exc}", file=sys.stderr)
        return 2
    try:
        worker = Worker(config, handler_cls())
        worker.hard_deadline = True  # a process of its own: a shutdown that overruns its deadline exits
        return asyncio.run(worker.run())
    except ConfigError as exc:
        print(f"knarr run: {exc}", file=sys.stderr)
        return 2
    except (SinkConnectError, ConnectionError, FileNotFoundError) as exc:
        print(f"knarr run: cannot start: {exc}", file=sys.stderr)
        return 3


def _demo(args: argparse.Namespace) -> int:
    from knarr.demo.run import run_demo

    return run_demo(args.out, kafka=args.kafka)


def _backfill(args: list[str]) -> int:
    try:
        from knarr_spark.cli import main as backfill_main  # the Spark backfill package, installed separately
    except ImportError:
        print("knarr backfill: the Spark backfill package (knarr-spark) is not installed", file=sys.stderr)
        return 2
    return backfill_main(args)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "backfill":
        return _backfill(argv[1:])
    if argv and argv[0] == "migrate-config":
        from knarr.migrate.cli import main as migrate_main

        return migrate_main(argv[1:])
    parser = argparse.ArgumentParser(prog="knarr", description="Kafka -> subprocess stream processing")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a worker")
    run.add_argument("--config", help=f"YAML config file (or set {CONFIG_PATH_ENV})")
    run.add_argument("--handler", required=True, help="module.path:Class or path/to/file.py:Class")
    run.set_defaults(fn=_run)
    demo = sub.add_parser("demo", help="run the fan-out search demo on the embedded source")
    demo.add_argument("--out", default="out/demo", help="where the demo writes its input and results")
    demo.add_argument("--kafka", default=None, help="bootstrap servers: run the demo on Kafka instead")
    demo.set_defaults(fn=_demo)
    sub.add_parser("backfill", help="reprocess history on Spark (see knarr backfill --help)")
    sub.add_parser("migrate-config", help="translate a Drakkar config (see knarr migrate-config --help)")
    args = parser.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
