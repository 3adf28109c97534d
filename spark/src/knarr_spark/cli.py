"""``knarr backfill``: the arguments, the run, the summary, the report and the exit code.

The same ``main(argv)`` serves ``knarr backfill …`` (the CLI), ``knarr-backfill …`` and the
operator's SparkApplication (``spark_entry.py``, whose ``arguments`` are exactly what
follows the word ``backfill``).

Exit codes (knarr.errors.ExitCode): 0 everything was reprocessed; 1 a chunk failed for good (see
the report); 2 bad arguments, config, handler or range; 3 the input cannot be reached; 4 every
chunk ran, but tasks failed for good or payloads were dead-lettered.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from knarr.config.loading import load_config
from knarr.errors import ExitCode, KnarrError
from knarr.loader import load_handler_class
from knarr_spark.file_input import input_format
from knarr_spark.job import DEFAULT_CHUNK_SIZE, BackfillRequest, FileInput, KafkaSlice, run_backfill
from knarr_spark.ranges import RangeError, parse_offsets, parse_timestamp
from knarr_spark.report import BackfillReport, summary_text

PROG = "knarr backfill"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Reprocess a slice of history with the worker's handler, on Spark.")
    p.add_argument("--config", required=True, help="the worker's YAML config (the same file the streaming worker uses)")
    p.add_argument("--handler", required=True, help="module.path:Class or path/to/file.py:Class")
    source = p.add_argument_group("input (one of)")
    source.add_argument("--from-timestamp", help="RFC 3339 time (or epoch ms): the first message at or after it")
    source.add_argument("--to-timestamp", help="RFC 3339 time (or epoch ms), exclusive; empty: up to the current end")
    source.add_argument("--from-offsets", help="PARTITION:OFFSET,… inclusive")
    source.add_argument("--to-offsets", help="PARTITION:OFFSET,… exclusive")
    source.add_argument("--input", help="JSONL or Parquet file/directory, any Hadoop-compatible path")
    source.add_argument("--input-format", choices=("jsonl", "parquet"), help="default: from the --input suffix")
    p.add_argument("--master", help="Spark master, e.g. local[4] or local[4,3] (3 attempts per task); "
                                    "default: whatever spark-submit says")
    p.add_argument("--report", help="write the JSON report here")
    p.add_argument("--chunk-size", type=int, default=DEFAULT_CHUNK_SIZE,
                   help=f"most messages per Spark task (default {DEFAULT_CHUNK_SIZE})")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark setting (repeatable)")
    return p


def request_from_args(args: argparse.Namespace) -> BackfillRequest:
    """Turn the arguments into a request; raises for people (ConfigError, RangeError, …)."""
    by_time = args.from_timestamp is not None or args.to_timestamp is not None
    by_offsets = args.from_offsets is not None or args.to_offsets is not None
    by_file = args.input is not None
    if sum((by_time, by_offsets, by_file)) != 1:
        raise RangeError("give exactly one input: --from-timestamp/--to-timestamp, --from-offsets/--to-offsets, or --input")
    if args.chunk_size < 1:
        raise RangeError(f"--chunk-size must be at least 1, got {args.chunk_size}")
    source: KafkaSlice | FileInput
    if by_file:
        source = FileInput(args.input, input_format(args.input, args.input_format))
    elif by_offsets:
        if args.from_offsets is None or args.to_offsets is None:
            raise RangeError("--from-offsets and --to-offsets go together")
        source = KafkaSlice(from_offsets=parse_offsets(args.from_offsets, "--from-offsets"),
                            to_offsets=parse_offsets(args.to_offsets, "--to-offsets"))
    else:
        start = parse_timestamp(args.from_timestamp or "", "--from-timestamp")
        if start is None:
            raise RangeError("--from-timestamp is required with --to-timestamp")
        source = KafkaSlice(from_time=start, to_time=parse_timestamp(args.to_timestamp or "", "--to-timestamp"))
    load_handler_class(args.handler)  # fail here, on the driver, not in every task
    conf = {}
    for item in args.conf:
        key, sep, value = item.partition("=")
        if not sep:
            raise RangeError(f"--conf {item!r} must be KEY=VALUE")
        conf[key] = value
    return BackfillRequest(load_config(args.config), args.handler, source, args.chunk_size, args.master, spark_conf=conf)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(sys.argv[1:] if argv is None else argv)
    try:
        report = run_backfill(request_from_args(args))
    except KnarrError as exc:  # bad arguments, config, handler or range (2); unreachable input (3)
        print(f"{PROG}: {exc}", file=sys.stderr)
        return exc.exit_code
    print(summary_text(report), file=sys.stderr)
    if args.report:
        path = Path(args.report)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(report.as_dict(), indent=2) + "\n")
        print(f"report: {path}", file=sys.stderr)
    return exit_code(report)


def exit_code(report: BackfillReport) -> int:
    if not report.ok:
        return ExitCode.FATAL
    return ExitCode.WORK_FAILED if report.work_failed else ExitCode.OK


def entry() -> None:
    sys.exit(main())
