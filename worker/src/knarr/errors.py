"""knarr's errors and exit codes: one tree, one table.

Every error knarr raises for people derives from :class:`KnarrError` and carries the exit
code the ``knarr`` command ends with when it is not handled. The table below is the only
place exit codes are defined; the README's table is generated from it (with the config
reference: ``python -m knarr.config.reference --write README.md``) and a test fails when
they drift.
"""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    """How a ``knarr`` command ended; EXIT_CODE_MEANINGS says what each means."""

    OK = 0
    FATAL = 1
    USAGE = 2
    UNAVAILABLE = 3
    WORK_FAILED = 4
    DRAIN_INCOMPLETE = 5


EXIT_CODE_MEANINGS: dict[ExitCode, str] = {
    ExitCode.OK: "Everything asked for was done (a stopped worker drained and committed cleanly).",
    ExitCode.FATAL: "A fatal error at run time (e.g. a payload naming an unknown sink, a DLQ that refuses "
                    "every record); the worker stopped without committing past unfinished work.",
    ExitCode.USAGE: "Bad arguments, configuration, handler or probed message (the message names the key, "
                    "file:line or hook); nothing ran.",
    ExitCode.UNAVAILABLE: "A service needed at startup cannot be reached: the broker (after "
                          "`kafka.startup_timeout_seconds`), a sink, the DLQ, or the local source's input file.",
    ExitCode.WORK_FAILED: "A bounded run (`knarr backfill`, `knarr run` on the local source) finished, but tasks "
                          "failed for good or payloads were dead-lettered; its summary counts them. `knarr probe`: "
                          "the message went through, but a task failed, a hook raised, something would be "
                          "dead-lettered or it did not finish in time; its report says which.",
    ExitCode.DRAIN_INCOMPLETE: "Stopped on request (SIGTERM/SIGINT), but in-flight work did not finish within "
                               "`executor.drain_timeout_seconds`: the final commit was skipped and the unfinished "
                               "messages will be replayed.",
}


class KnarrError(Exception):
    """Base of every error knarr reports to people. ``exit_code`` is what ``knarr`` exits with."""

    exit_code: ExitCode = ExitCode.FATAL


class UsageError(KnarrError):
    """Arguments, configuration or handler are unusable; nothing ran."""

    exit_code = ExitCode.USAGE


class ConfigError(UsageError):
    """The configuration cannot be used; the message lists every problem and how to fix it."""


class HandlerError(UsageError):
    """The handler cannot be loaded or is not a valid knarr handler; the message says where and why."""


class UnavailableError(KnarrError):
    """A service needed at startup (broker, sink, DLQ, input file) cannot be reached."""

    exit_code = ExitCode.UNAVAILABLE


class FatalError(KnarrError):
    """Something the worker cannot go on from without losing data (e.g. an unknown sink name)."""

    exit_code = ExitCode.FATAL


def exit_code_table() -> str:
    """The exit-code table in Markdown, as embedded in the README."""
    lines = ["| code | meaning |", "|---|---|"]
    lines += [f"| `{code.value}` | {EXIT_CODE_MEANINGS[code]} |" for code in ExitCode]
    return "\n".join(lines) + "\n"
