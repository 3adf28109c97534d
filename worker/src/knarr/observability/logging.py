"""Structured logging (structlog): JSON or console, with worker and partition context bound."""

from __future__ import annotations

import logging
import sys

import structlog


debug_enabled = False


def configure_logging(level: str = "INFO", fmt: str = "json", **context: str) -> None:
    global debug_enabled
    debug_enabled = level.upper() == "DEBUG"
    renderer = structlog.processors.JSONRenderer() if fmt == "json" else structlog.dev.ConsoleRenderer(colors=False)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level.upper(), logging.INFO)),
        # One write per line (the text and its newline together): the lines of several worker processes
        # sharing a stream (knarr run --processes) never run into one another.
        logger_factory=structlog.WriteLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
    structlog.contextvars.clear_contextvars()
    structlog.contextvars.bind_contextvars(**{k: v for k, v in context.items() if v})


def get_logger(**context: object) -> structlog.typing.FilteringBoundLogger:
    # A lazy proxy: it follows configure_logging() even when created at import time.
    return structlog.get_logger(**context)
