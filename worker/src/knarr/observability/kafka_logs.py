"""librdkafka's own log lines, through structlog: deduplicated, at a level that fits.

Without a logger, librdkafka prints straight to stderr — a broker that refuses connections
gives a line per retry, hundreds at startup. A client built with ``{"logger":
ClientLog(...).logger}`` hands its lines to Python instead (served when the client is
polled); this bridge logs each distinct line at most once a minute, counts the repeats,
lowers "error" to WARNING (the client retries on its own; knarr logs the consequences), and
remembers the last error so a startup failure can name it in one line.
"""

from __future__ import annotations

import logging
import re
import time
from itertools import count
from typing import Any

from knarr.observability.logging import get_logger
from knarr.observability.ratelimit import Deduplicator

# librdkafka's varying parts, so repeats of one condition dedupe to one key.
_VARYING = re.compile(r"\(after \d+ms in state \w+[^)]*\)|\(\d+ identical error\(s\) suppressed\)|rdkafka#\w+-\d+")
# "1/1 brokers are down" follows the error that says why; the why is the one worth naming.
_SUMMARY = re.compile(r"^\d+/\d+ brokers are down$")
_ids = count(1)


def _level(levelno: int) -> str:
    if levelno >= logging.WARNING:
        return "warning"
    return "info" if levelno >= logging.INFO else "debug"


class ClientLog(logging.Handler):
    """A logging handler for one Kafka client (``client`` names it in every line)."""

    def __init__(self, client: str, dedupe_seconds: float = 60.0, log: Any = None) -> None:
        super().__init__(logging.DEBUG)
        self.client = client
        self.dedupe = Deduplicator(window_seconds=dedupe_seconds)
        self.last_error = ""
        self.quiet = False  # record, but do not log (a startup check that reports in one line)
        self._log = log or get_logger(component="librdkafka", client=client)
        # Not from logging.getLogger: that registry keeps every logger forever, and a backfill
        # makes clients per chunk. This one lives as long as its client.
        self.logger = logging.Logger(f"knarr.librdkafka.{client}.{next(_ids)}", logging.DEBUG)
        self.logger.addHandler(self)
        self.logger.propagate = False

    def emit(self, record: logging.LogRecord) -> None:
        try:
            facility, text = self._parts(record)
            if record.levelno >= logging.ERROR and not _SUMMARY.match(_readable(text)):
                self.last_error = _readable(text)
            if self.quiet:
                return
            emit, repeats = self.dedupe.seen(_readable(text), time.monotonic())  # log line and error_cb alike
            if not emit:
                return
            fields = {"facility": facility}
            if repeats:
                fields["repeated"] = repeats
            getattr(self._log, _level(record.levelno))(_readable(text), **fields)
        except Exception:  # a log line must never break the client's thread
            self.handleError(record)

    def error_cb(self, error: object) -> None:
        """confluent-kafka's ``error_cb``: client-level errors (all brokers down, ...), deduplicated too."""
        text = error.str() if hasattr(error, "str") else str(error)  # a KafkaError's own message, unwrapped
        self.emit(logging.LogRecord(self.logger.name, logging.ERROR, "", 0, "%s [%s] %s",
                                    ("ERROR", self.client, text), None))

    def unreachable(self, brokers: str, timeout: float, fallback: str) -> str:
        """The one line that says a client gave up at startup: where, how long, the last error."""
        detail = self.last_error or fallback
        return (f"cannot reach Kafka at {brokers!r} within {timeout:g}s: {detail}; check the brokers' "
                "address and the network (TLS/SASL settings go in kafka.extra), or raise kafka.startup_timeout_seconds")

    @staticmethod
    def _parts(record: logging.LogRecord) -> tuple[str, str]:
        # confluent-kafka logs ("%s [%s] %s", facility, client name, message).
        args = record.args
        if isinstance(args, tuple) and len(args) == 3:
            return str(args[0]), str(args[2])
        return "", record.getMessage()


def _readable(text: str) -> str:
    """``[thrd:host:port/bootstrap]: host:port/bootstrap: Connect … refused (after 0ms …)`` → the message."""
    text = re.sub(r"^\[thrd:[^\]]*\]:\s*", "", text)
    text = re.sub(r"^\S+/(bootstrap|\d+):\s*", "", text)
    return _VARYING.sub("", text).strip()
