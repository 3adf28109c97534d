"""``knarr probe``: run one message through the pipeline without delivering or committing anything.

The config and handler load as for ``knarr run``; the handler's ``on_startup`` and ``on_ready``
run (``on_ready`` gets no connection pool: no sink is connected). Then ``run_probe`` sends the
message through the real stages and the report is printed, readable or as JSON (``--json``).
Exit codes: 0 the message went through cleanly; 4 it went through, but a task failed, a hook
raised, something would be dead-lettered or it did not finish in time; 2 the config, handler or
message cannot be used (nothing ran).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from knarr.api.handler import BaseHandler, ready_arguments
from knarr.cache.handler_cache import attach_cache
from knarr.cli.run import load
from knarr.config.root import CONFIG_PATH_ENV, KnarrConfig
from knarr.debug.probe import DEFAULT_TIMEOUT_SECONDS, ProbeInputError, ProbeMessage, read_message, run_probe
from knarr.debug.probe_report import walk
from knarr.engine.containment import contain_tasks
from knarr.errors import ExitCode, HandlerError
from knarr.loader import load_handler_class
from knarr.observability.logging import configure_logging

MAX_TIMEOUT_SECONDS = 86_400.0
OUTPUT_LINES = 5  # of a task's stdout/stderr shown; --json has all of it
OUTPUT_CHARS = 400
LOG_LEVELS = ("off", "DEBUG", "INFO", "WARNING", "ERROR")


def add_parser(sub: Any, handler_help: str) -> None:
    probe = sub.add_parser(
        "probe", help="run one message through arrange, the tasks and the hooks; deliver and commit nothing",
        description="Run one message (a JSON object {key, value, headers?, partition?, offset?}; value is a "
                    "JSON value or a string) through deserialize, arrange, the real subprocesses and the output "
                    "hooks, and print what would be delivered to each sink and how every task went. Nothing is "
                    "delivered, dead-lettered or committed.")
    probe.add_argument("message", metavar="MESSAGE.json", help="file holding the message; - reads it from stdin")
    probe.add_argument("--config", help=f"YAML config file (or set {CONFIG_PATH_ENV})")
    probe.add_argument("--handler", help=handler_help)
    probe.add_argument("--json", dest="as_json", action="store_true", help="print the report as JSON")
    probe.add_argument("--timeout", type=_timeout, default=DEFAULT_TIMEOUT_SECONDS,
                       help=f"seconds the message may take before its tasks are stopped (default {DEFAULT_TIMEOUT_SECONDS:g})")
    probe.add_argument("--log-level", choices=LOG_LEVELS, default="off",
                       help="the engine's log lines on stderr (default off: the report says what happened)")
    probe.set_defaults(fn=lambda args: probe_command(args.config, args.handler, args.message, as_json=args.as_json,
                                                     timeout=args.timeout, log_level=args.log_level))


def _timeout(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < value <= MAX_TIMEOUT_SECONDS:
        raise argparse.ArgumentTypeError(f"{text} must be more than 0 and at most {MAX_TIMEOUT_SECONDS:g} seconds")
    return value


def probe_command(config_path: str | None, handler_option: str | None, message_path: str, *, as_json: bool = False,
                  timeout: float = DEFAULT_TIMEOUT_SECONDS, log_level: str = "off") -> int:
    config, spec = load(config_path, handler_option)
    message = read_message(_read(message_path), "stdin" if message_path == "-" else message_path)
    handler = _instantiate(load_handler_class(spec), spec)
    configure_logging("CRITICAL" if log_level == "off" else log_level, "console")
    with contain_tasks(config.executor.task_cgroup):  # no task the probe starts outlives it
        report = asyncio.run(_probe(config, handler, message, timeout))
    print(json.dumps(report, indent=2) if as_json else report_text(report))
    return ExitCode.WORK_FAILED if went_wrong(report) else ExitCode.OK


def _read(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise ProbeInputError(f"cannot read the message file {path!r}: {exc.strerror if isinstance(exc, OSError) else exc}") from None


def _instantiate(handler_cls: type[BaseHandler], spec: str) -> BaseHandler:
    try:
        return handler_cls()
    except Exception as exc:
        raise HandlerError(f"handler {spec!r}: {handler_cls.__name__}() raised {type(exc).__name__}: {exc}") from None


async def _probe(config: KnarrConfig, handler: BaseHandler, message: ProbeMessage, timeout: float) -> dict[str, Any]:
    cache = None
    for hook in ("on_startup", "on_ready"):
        try:
            if hook == "on_startup":
                updated = await handler.on_startup(config)
                config = updated if isinstance(updated, KnarrConfig) else config
                # A cache of the probe's own, in memory only: it reads and writes no worker's file or shared tier.
                cache = await attach_cache(config.model_copy(update={"cache": config.cache.model_copy(
                    update={"db_dir": "", "shared": None})}), handler, "")
            else:
                await handler.on_ready(*ready_arguments(handler.on_ready, config, None))
        except Exception as exc:
            raise HandlerError(f"the handler's {hook} raised {type(exc).__name__}: {exc}") from None
    try:
        return await run_probe(config, handler, message, timeout=timeout)
    finally:
        if cache is not None:
            await cache.close()


def went_wrong(report: dict[str, Any]) -> bool:
    """Errors, failed or unfinished tasks, or dead letters: what makes ``knarr probe`` exit 4."""
    return bool(report["errors"] or report["dead_letters"]
                or any(node["status"] in ("failed", "unfinished") for node in walk(report["tasks"])))


# --- the readable report --------------------------------------------------------------------------
def report_text(report: dict[str, Any]) -> str:
    lines: list[str] = []
    msg = report["message"]
    if msg is not None:
        lines.append(f"message   {msg['topic']}[{msg['partition']}]@{msg['offset']}  key={msg['key']!r}  "
                     f"value={_short(msg['value'] or '', 200)}")
        if msg["headers"]:
            lines.append(f"          headers {json.dumps(msg['headers'])} (shown only: handlers see no headers)")
    lines.append(f"arranged  {len(report['arranged'])} task(s)")
    if report["tasks"]:
        lines.append("tasks")
        for node in report["tasks"]:
            lines += _node_lines(node, 1)
    group = report["group"]
    closed = "" if group["closed"] else " (on_message_complete was not reached)"
    lines.append(f"group     total {group['total']}: succeeded {group['succeeded']}, failed {group['failed']}, "
                 f"replaced {group['replaced']}{closed}")
    lines.append("would deliver" + ("" if report["would_deliver"] else ": nothing"))
    for sink, payloads in sorted(report["would_deliver"].items()):
        lines.append(f"  {sink}: {len(payloads)} payload(s)")
        lines += [f"    [{p['stage']}] {_payload_text(p)}" for p in payloads]
    for letter in report["dead_letters"]:
        task = f" (task {letter['task_id']})" if letter["task_id"] else ""
        lines.append(f"would dead-letter  offsets {letter['offsets']} at {letter['stage']}{task}: {_short(letter['reason'], 300)}")
    if report["errors"]:
        lines.append("errors")
        for error in report["errors"]:
            where = f"\n      at {error['where']}" if error.get("where") else ""
            lines.append(f"  {error['stage']}: {error['error']}{where}")
    lines.append(f"nothing was delivered or committed (took {report['duration_ms'] / 1000:.2f}s)")
    return "\n".join(lines)


def _node_lines(node: dict[str, Any], depth: int) -> list[str]:
    pad = "  " * depth
    timing = "" if node["duration_ms"] is None else f"  {node['duration_ms']:g} ms"
    exit_code = "" if node["exit_code"] is None else f"  exit {node['exit_code']}"
    reason = f" ({node['reason']})" if node["status"] != "succeeded" and node["reason"] else ""
    lines = [f"{pad}{node['status']}{reason}  {node['task_id']}{exit_code}{timing}  slot wait {node['slot_wait_ms']:g} ms"
             f"  args {_short(' '.join(node['args']), 200)}"]
    for attempt in node["attempts"]:
        code = f" exit {attempt['exit_code']}" if attempt["exit_code"] is not None else ""
        lines.append(f"{pad}  attempt {attempt['attempt']}: {attempt['reason']}{code} -> {attempt['decision']}")
    if node.get("error"):
        lines.append(f"{pad}  error: {_short(node['error'], OUTPUT_CHARS)}")
    for stream in ("stdout", "stderr"):
        if node[stream].strip():
            lines += [f"{pad}  {stream}: {line}" for line in _tail(node[stream])]
    for child in node["children"]:
        lines += _node_lines(child, depth + 1)
    return lines


def _payload_text(payload: dict[str, Any]) -> str:
    fields = [f"{k}={v!r}" for k, v in payload.items() if k not in ("stage", "data") and v not in ("", [], {}, None)]
    return " ".join([*fields, _short(json.dumps(payload["data"]), 300)])


def _tail(text: str) -> list[str]:
    lines = text.rstrip("\n").splitlines()
    shown = [_short(line, OUTPUT_CHARS) for line in lines[-OUTPUT_LINES:]]
    if len(lines) > OUTPUT_LINES:
        shown.insert(0, f"... {len(lines) - OUTPUT_LINES} earlier line(s); --json shows all")
    return shown


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
