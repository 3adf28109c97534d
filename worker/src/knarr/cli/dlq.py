"""``knarr dlq inspect`` and ``knarr dlq replay``: what is in a dead-letter queue, and doing it again.

Both read the DLQ the same way (the config's ``dlq.path`` or ``dlq.topic``, or ``--file`` /
``--topic``), bounded by ``--limit``, and take the same filters. The work is in :mod:`knarr.dlq`;
this is argument handling and printing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time

from knarr.config.loading import load_config
from knarr.config.root import CONFIG_PATH_ENV, KnarrConfig
from knarr.dlq import replay as planning
from knarr.dlq import store
from knarr.dlq.records import Filters
from knarr.dlq.summary import as_json, render, summarise
from knarr.errors import ExitCode, UsageError

DEFAULT_LIMIT = 100_000
MAX_LIMIT = 10_000_000


def add_parsers(sub: argparse._SubParsersAction) -> None:
    dlq = sub.add_parser("dlq", help="inspect or replay a dead-letter queue")
    commands = dlq.add_subparsers(dest="dlq_command", required=True, metavar="COMMAND")

    inspect = commands.add_parser("inspect", help="counts by sink, reason and hour, the time range, samples")
    _common(inspect)
    inspect.add_argument("--samples", type=_count(0, 100), default=3, help="sample records shown (default 3)")
    inspect.add_argument("--top", type=_count(1, 1000), default=10, help="reasons listed (default 10)")
    inspect.set_defaults(fn=_inspect, command="dlq inspect")

    replay = commands.add_parser("replay", help="re-deliver dead letters to their sink, or re-queue them to the source")
    _common(replay)
    replay.add_argument("--dry-run", action="store_true", help="say what would be done, do nothing")
    replay.add_argument("--to-source", action="store_true",
                        help="re-queue source messages to kafka.source_topic (the default for records of the "
                             "parse/arrange/task/hook stages, which hold source messages)")
    replay.add_argument("--again", action="store_true", help="also replay records the replay ledger has as replayed")
    replay.add_argument("--no-progress", dest="progress", action="store_false",
                        help="no progress bar (it only shows on a terminal)")
    replay.set_defaults(fn=_replay, command="dlq replay")


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help=f"YAML config file (or set {CONFIG_PATH_ENV}): its dlq.path or dlq.topic")
    p.add_argument("--topic", help="the DLQ topic (instead of the config's)")
    p.add_argument("--file", help="the DLQ file, JSON Lines (instead of the config's)")
    p.add_argument("--brokers", help="bootstrap servers of the DLQ topic (default: dlq.brokers, then kafka.brokers)")
    p.add_argument("--limit", type=_count(1, MAX_LIMIT), default=DEFAULT_LIMIT,
                   help=f"read at most this many records (default {DEFAULT_LIMIT})")
    p.add_argument("--sink", action="append", default=[], help="only records of this sink name (repeatable)")
    p.add_argument("--sink-type", action="append", default=[], help="only records of this sink type (repeatable)")
    p.add_argument("--stage", action="append", default=[],
                   help="only records of this stage: sink, source, or a step (parse, arrange, task, ...)")
    p.add_argument("--reason", help="only records whose error matches (a regular expression or plain text, any case)")
    p.add_argument("--since", help="only records from this time on: ISO 8601 (UTC unless given) or a span back (2h, 7d)")
    p.add_argument("--until", help="only records before this time: ISO 8601 or a span back from now")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def _count(low: int, high: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is not between {low} and {high}")
        return value
    return parse


def _config(args: argparse.Namespace, required: bool) -> KnarrConfig | None:
    path = args.config or os.environ.get(CONFIG_PATH_ENV)
    if not path:
        if required:
            raise UsageError(f"give --config PATH (or set {CONFIG_PATH_ENV}): the replay builds the sinks and "
                             "finds the source topic from it")
        return None
    return load_config(path, plugins=required)  # inspecting needs no sink, so no plug-in need be installed


def _read(args: argparse.Namespace, config: KnarrConfig | None):
    location = store.locate(config, args.topic, args.file, args.brokers)
    filters = Filters.build(args.sink, args.sink_type, args.reason, args.since, args.until, now=time.time(),
                            stages=args.stage)
    found = store.read(location, args.limit)
    matched = [r for r in found.records if filters.matches(r)]
    replayed = store.ledger(location).ids()
    return location, found, matched, replayed


def _inspect(args: argparse.Namespace) -> int:
    config = _config(args, required=False)
    location, found, matched, replayed = _read(args, config)
    summary = summarise(matched, location=location.label, read=found.read, unreadable=found.unreadable,
                        limited=found.limited, top_reasons=args.top, samples=args.samples, replayed_ids=replayed)
    if args.json:
        print(json.dumps({**as_json(summary), "missing": found.missing}, indent=2))
    else:
        print(render(summary))
        if found.missing:
            print(f"  ({location.label} does not exist: nothing was dead-lettered there yet)")
    return ExitCode.OK


def _replay(args: argparse.Namespace) -> int:
    from knarr.dlq.replaying import Replayer, outcome_json, render_outcome, source_target
    from knarr.observability.logging import configure_logging
    from knarr.observability.progress import progress_bar

    config = _config(args, required=True)
    assert config is not None
    location, found, matched, replayed = _read(args, config)
    target = source_target(config)
    steps = planning.plan(matched, replayed, to_source=args.to_source, again=args.again, source_target=target)
    head = f"{len(matched)} of {found.read} records match in {location.label}"
    if found.limited:
        head += f" (reading stopped at --limit {found.read})"
    if args.dry_run:
        counts = planning.count(steps)
        if args.json:
            print(json.dumps({"dry_run": True, "matched": len(matched), "read": found.read, "plan": [
                {"action": a, "target": t, "records": n, "items": i} for a, t, n, i in counts.rows]}, indent=2))
        else:
            print(f"knarr dlq replay --dry-run: {head}; nothing was sent")
            print(planning.describe_plan(steps))
        return ExitCode.OK

    # The delivery path logs what people should see (a sink that is down and waited for) on stderr.
    configure_logging(config.logging.level if config.logging.level != "INFO" else "WARNING", "console")
    replayer = Replayer(config, store.ledger(location), target)
    try:
        with progress_bar("replay", unit="rec", enabled=args.progress) as bar:
            if bar is not None:
                bar.total = len(steps)
            outcome = asyncio.run(replayer.run(steps, on_step=lambda s: bar.update(1) if bar else None))
    except KeyboardInterrupt:
        print(f"knarr dlq replay: interrupted after these ({head}):\n{render_outcome(replayer.outcome)}\n"
              f"the records done are in the replay ledger ({location.ledger_label}): run the same command again "
              "to go on with the rest", file=sys.stderr)
        return ExitCode.WORK_FAILED
    if args.json:
        print(json.dumps({"matched": len(matched), "read": found.read, **outcome_json(outcome)}, indent=2))
    else:
        print(f"knarr dlq replay: {head}")
        print(render_outcome(outcome))
        print(f"replay ledger: {location.ledger_label} (a later replay skips the records written there)")
    return ExitCode.OK if outcome.ok else ExitCode.WORK_FAILED

