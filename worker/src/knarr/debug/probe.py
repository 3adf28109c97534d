"""The message probe: one message through the real pipeline, with nothing delivered or committed.

``run_probe`` takes a message as a person writes it (``{key, value, headers?, partition?, offset?}``),
and sends it through the very stages a worker runs: ``deserialize_message``, ``arrange`` (a window
of that one message), the real subprocesses through the real ``TaskExecutor`` (on a slot scheduler
of its own, so timeouts, retries, ``on_error`` and replacement chains behave as in the worker), and
the hooks ``on_task_complete``, ``on_message_complete`` and ``on_window_complete``. The same
``PartitionProcessor`` and ``Ledger`` do the accounting; only its sinks are replaced by a collector
(probe_seams.py), so payloads are resolved to their sinks and kept, and dead letters are kept too.
There is no source, so there is nothing to commit.

The report (probe_report.py) says what would have been delivered where, and how every task went.
Bad input never raises: it comes back as the report's ``errors``.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from knarr.api.handler import BaseHandler
from knarr.api.messages import SourceMessage
from knarr.config.root import KnarrConfig
from knarr.debug.probe_report import build_report
from knarr.debug.probe_seams import CollectingSinks, Notes, ProbeExecutor, ProbeHandler, ProbeScheduler
from knarr.engine.processor import PartitionProcessor
from knarr.errors import UsageError

DEFAULT_TIMEOUT_SECONDS = 300.0
MAX_PARTITION = 1_000_000
MAX_OFFSET = 2**63 - 1
MESSAGE_SHAPE = '{"key": ..., "value": ..., "headers"?: {...}, "partition"?: 0, "offset"?: 0}'


class ProbeInputError(UsageError):
    """The message to probe is not one: not JSON, not an object, no value, an unknown key."""


class ProbeMessage(BaseModel):
    """A message as a person writes it for the probe."""

    model_config = ConfigDict(extra="forbid")

    value: Any = Field(..., description="The message's value: a string is used as it is, any other JSON value as its JSON text.")
    key: Any = Field(None, description="The message's key (a string, or any JSON value as its JSON text); null: none.")
    headers: dict[str, str | None] = Field(default_factory=dict, description="Shown in the report (knarr's messages carry no headers to the handler).")
    partition: int = Field(0, ge=0, le=MAX_PARTITION, description="The partition the message is said to come from.")
    offset: int = Field(0, ge=0, le=MAX_OFFSET, description="Its offset.")
    topic: str = Field("", max_length=249, description="Its topic; empty: the config's source topic.")


def parse_message(message: object) -> ProbeMessage:
    """``message`` (parsed JSON) as a ProbeMessage, or ProbeInputError saying what is wrong with it."""
    if not isinstance(message, dict):
        raise ProbeInputError(f"a message must be a JSON object like {MESSAGE_SHAPE}, not {_json_kind(message)}")
    try:
        return ProbeMessage.model_validate(message)
    except ValidationError as exc:
        raise ProbeInputError("the message is not usable:\n" + "\n".join(
            f"  {_problem(error)}" for error in exc.errors())) from None


def read_message(text: str, where: str = "the message") -> ProbeMessage:
    """A message from JSON text (a file's or stdin's content)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ProbeInputError(f"{where} is not JSON: line {exc.lineno} column {exc.colno}: {exc.msg}; "
                              f"give one object like {MESSAGE_SHAPE}") from None
    return parse_message(data)


def source_message(message: ProbeMessage, topic: str) -> SourceMessage:
    """The SourceMessage a worker would have taken off the topic."""
    return SourceMessage(
        topic=message.topic or topic, partition=message.partition, offset=message.offset,
        value=_bytes(message.value), key=None if message.key is None else _bytes(message.key),
        timestamp=int(time.time() * 1000),
    )


async def run_probe(config: KnarrConfig, handler: BaseHandler, message: dict | ProbeMessage,
                    timeout: float = DEFAULT_TIMEOUT_SECONDS, slots: int | None = None) -> dict[str, Any]:
    """Run ``message`` through ``handler``'s pipeline as ``config`` describes it; the report (see module doc).

    The tasks get a pool of their own, ``slots`` wide (default ``executor.max_executors``): inside a
    running worker, a smaller one keeps a probe from crowding the worker's own tasks.
    """
    started = time.monotonic()
    try:
        probe_message = message if isinstance(message, ProbeMessage) else parse_message(message)
    except ProbeInputError as exc:
        return build_report(None, {}, _with_error(Notes(), "message", str(exc)), 0.0)
    msg = source_message(probe_message, _topic(config))
    notes = Notes()
    executor_config = config.executor.model_copy(update={"window_linger_ms": 0})  # one message: no window to fill
    probed = ProbeHandler(handler, notes)
    scheduler = ProbeScheduler(slots or executor_config.max_executors, executor_config.max_per_partition)
    fatal: list[BaseException] = []
    stopped = asyncio.Event()

    def on_fatal(exc: BaseException) -> None:
        fatal.append(exc)
        stopped.set()

    processor = PartitionProcessor(
        msg.topic, msg.partition, probed, ProbeExecutor(probed, scheduler, executor_config, notes),
        CollectingSinks(_sink_names(config), notes), executor_config, on_fatal,  # type: ignore[arg-type]
        on_parse_error=config.source.on_parse_error,
    )
    processor.enqueue([msg])
    processor.start()
    try:
        finished = await _settled(processor, stopped, timeout)
    finally:
        await processor.stop()  # kills what still runs when the probe gave up
    if msg.parse_error is not None:  # the first thing that went wrong, so first in the list
        notes.errors.insert(0, {"stage": "deserialize_message", "error": f"the value does not parse: {msg.parse_error}"})
    for exc in fatal:
        _with_error(notes, "delivery", str(exc))
    if processor.failure is not None:
        _with_error(notes, "engine", processor.failure)
    elif not finished and not fatal:
        _with_error(notes, "probe", f"the message did not finish within {timeout:g}s; the tasks still running "
                                    "were stopped (shown as unfinished)")
    return build_report(msg, dict(probe_message.headers), notes, time.monotonic() - started)


async def _settled(processor: PartitionProcessor, stopped: asyncio.Event, timeout: float) -> bool:
    """Wait until the message's window is finished (True), a fatal error stopped it, or ``timeout``."""
    # The drain's own deadline comes later, so it never logs a timeout meant for a worker's shutdown.
    drained = asyncio.ensure_future(processor.drain(timeout * 2))
    fatal = asyncio.ensure_future(stopped.wait())
    try:
        await asyncio.wait({drained, fatal}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiting in (drained, fatal):
            waiting.cancel()
    return drained.done() and not drained.cancelled() and drained.result()


def _with_error(notes: Notes, stage: str, error: str) -> Notes:
    notes.errors.append({"stage": stage, "error": error})
    return notes


def _topic(config: KnarrConfig) -> str:
    if config.source.type == "local" and config.source.local is not None:
        return config.source.local.path
    return config.kafka.source_topic


def _sink_names(config: KnarrConfig) -> dict[str, list[str]]:
    names: dict[str, list[str]] = {}
    for kind, name, _ in config.sinks.instances():
        names.setdefault(kind, []).append(name)
    return names


def _bytes(value: Any) -> bytes:
    if isinstance(value, str):
        return value.encode("utf-8")
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _json_kind(value: object) -> str:
    kinds = {list: "a list", str: "a string", bool: "a boolean", int: "a number", float: "a number"}
    if value is None:
        return "null"
    return kinds.get(type(value), type(value).__name__)


def _problem(error: Any) -> str:
    where = ".".join(str(part) for part in error["loc"]) or "message"
    if error["type"] == "missing":
        return f"{where!r} is missing; give the message's {where} ({MESSAGE_SHAPE})"
    if error["type"] == "extra_forbidden":
        return (f"{where!r} is not a message key; a message has {', '.join(ProbeMessage.model_fields)}")
    return f"{where}: {error['msg']}"
