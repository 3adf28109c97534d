"""The termination message: one line a worker leaves behind when it exits with an error.

Kubernetes copies the file at a container's ``terminationMessagePath`` into the pod's
status (``lastState.terminated.message``), where the operator reads it and shows it as
the Pipeline's condition: ``ConfigRejected: sinks.kafka.results.topic: required key is
missing`` says more than "CrashLoopBackOff". The line is ``<Reason>: <what went wrong>``;
the reason names the kind of failure (one per exit code, the usage code split three
ways), so the operator and people can act on it without parsing the rest.

Writing it must never be why a worker fails: a path that cannot be written is skipped.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Mapping

from knarr.config.environment import TERMINATION_LOG_ENV
from knarr.errors import ConfigError, ExitCode, HandlerError, KnarrError, UnavailableError, UsageError

DEFAULT_PATH = "/dev/termination-log"  # the kubelet's default terminationMessagePath
# Kubernetes keeps at most 4096 bytes of a container's message (and 12 KiB per pod): stay well under.
MAX_BYTES = 1024
ELLIPSIS = "…"


class Reason(enum.StrEnum):
    """Why a worker exited with an error; the operator's conditions and README use the same words."""

    CONFIG_REJECTED = "ConfigRejected"  # exit 2: the configuration (file or KNARR_* env) is unusable
    HANDLER_REJECTED = "HandlerRejected"  # exit 2: the handler cannot be imported or breaks the hook contract
    ARGUMENTS_REJECTED = "ArgumentsRejected"  # exit 2: the command line itself (no --config, no handler)
    SERVICE_UNAVAILABLE = "ServiceUnavailable"  # exit 3: the broker, a sink or the DLQ cannot be reached
    FATAL = "Fatal"  # exit 1: the worker cannot go on without losing data, or an unexpected error
    WORK_FAILED = "WorkFailed"  # exit 4: a bounded run finished with failed or dead-lettered work
    DRAIN_INCOMPLETE = "DrainIncomplete"  # exit 5: stopped, but in-flight work did not finish in time


_BY_EXIT_CODE = {
    ExitCode.FATAL: Reason.FATAL,
    ExitCode.USAGE: Reason.ARGUMENTS_REJECTED,
    ExitCode.UNAVAILABLE: Reason.SERVICE_UNAVAILABLE,
    ExitCode.WORK_FAILED: Reason.WORK_FAILED,
    ExitCode.DRAIN_INCOMPLETE: Reason.DRAIN_INCOMPLETE,
}


def reason_for_exit_code(code: int) -> Reason:
    try:
        return _BY_EXIT_CODE[ExitCode(code)]
    except (ValueError, KeyError):
        return Reason.FATAL


def reason_for_error(exc: BaseException) -> Reason:
    if isinstance(exc, ConfigError):
        return Reason.CONFIG_REJECTED
    if isinstance(exc, HandlerError):
        return Reason.HANDLER_REJECTED
    if isinstance(exc, UsageError):
        return Reason.ARGUMENTS_REJECTED
    if isinstance(exc, UnavailableError):
        return Reason.SERVICE_UNAVAILABLE
    if isinstance(exc, KnarrError):
        return reason_for_exit_code(exc.exit_code)
    return Reason.FATAL


def describe_error(exc: BaseException) -> str:
    """knarr's own errors speak for themselves; anything else is a bug, named by its type."""
    return str(exc) if isinstance(exc, KnarrError) else f"{type(exc).__name__}: {exc}"


def headline(text: str) -> str:
    """The first line of an error, made to stand alone.

    knarr's multi-line errors open with a heading (``invalid configuration:``, ``handler 'x' is
    not usable:``) and list one problem per line: the first problem is what people need, and
    how many more there are.
    """
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return ""
    head, rest = lines[0], lines[1:]
    if head.endswith(":") and rest:
        # The configuration's heading only repeats what ConfigRejected says.
        head = rest[0] if head.startswith("invalid configuration") else f"{head} {rest[0]}"
        if len(rest) > 1:
            head += f" (and {len(rest) - 1} more)"
    return head


def termination_message(reason: Reason, detail: str) -> str:
    """``<Reason>: <headline>``, at most MAX_BYTES of UTF-8."""
    line = f"{reason}: {headline(detail)}" if detail.strip() else str(reason)
    encoded = line.encode()
    if len(encoded) <= MAX_BYTES:
        return line
    room = MAX_BYTES - len(ELLIPSIS.encode())
    return encoded[:room].decode(errors="ignore") + ELLIPSIS


def termination_log_path(env: Mapping[str, str] | None = None) -> str | None:
    """``$KNARR_TERMINATION_LOG``, else Kubernetes' default path if this container has it; None: nowhere."""
    env = os.environ if env is None else env
    path = env.get(TERMINATION_LOG_ENV)
    if path:
        return path
    if os.path.exists(DEFAULT_PATH) and os.access(DEFAULT_PATH, os.W_OK):
        return DEFAULT_PATH
    return None


def write_termination_message(reason: Reason, detail: str, env: Mapping[str, str] | None = None) -> bool:
    """Leave the message for Kubernetes; False (and nothing raised) when there is nowhere to write it."""
    path = termination_log_path(env)
    if path is None:
        return False
    try:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(termination_message(reason, detail) + "\n")
    except OSError:
        return False
    return True


def record_error(exc: BaseException) -> bool:
    return write_termination_message(reason_for_error(exc), describe_error(exc))


def record_exit(code: int, detail: str) -> bool:
    """An exit with ``code`` that no exception explains (a fatal stop, an incomplete drain)."""
    if code == ExitCode.OK:
        return False
    return write_termination_message(reason_for_exit_code(code), detail)
