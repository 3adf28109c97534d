"""How a supervised pod ends: its exit code and termination message, from how its worker processes ended. Pure."""

from __future__ import annotations

import signal
from dataclasses import dataclass

from knarr.errors import ExitCode
from knarr.observability.termination import Reason, reason_for_exit_code

# Which exit code the pod's is when its processes stopped with different ones: the most telling first.
EXIT_PRIORITY = (ExitCode.FATAL, ExitCode.USAGE, ExitCode.UNAVAILABLE, ExitCode.DRAIN_INCOMPLETE, ExitCode.WORK_FAILED)


@dataclass(frozen=True, slots=True)
class Ended:
    """A worker process that ended: its index, its return code (negative: the signal that killed it) and
    its termination message ("<Reason>: <what>", "" when it left none)."""

    index: int
    code: int
    line: str = ""


@dataclass(frozen=True, slots=True)
class PodExit:
    code: int
    reason: Reason | None  # None: a clean exit, no termination message
    detail: str = ""


def ended_by_itself(ended: Ended) -> PodExit:
    """A process ended unasked, so the pod ends as it did: its code, its reason, its words."""
    reason_text, _, detail = ended.line.partition(": ")
    try:
        reason = Reason(reason_text)
    except ValueError:
        reason, detail = reason_for_exit_code(ended.code), ended.line
    code = ended.code
    if code == ExitCode.OK:  # a worker not asked to stop does not end unless something is wrong
        code, reason, detail = ExitCode.FATAL, Reason.FATAL, "ended by itself (exit code 0) unasked"
    elif code < 0:
        code, reason = ExitCode.FATAL, Reason.FATAL
        detail = detail or f"killed by {signal_name(-ended.code)}"
    return PodExit(code, reason, f"worker process {ended.index}: {detail or f'exit code {code}'}")


def stopped(ended: list[Ended]) -> PodExit:
    """The pod was asked to stop: the most telling of its processes' exits (a clean exit when all were)."""
    codes = {e.index: stop_code(e.code) for e in ended}
    code = next((c for c in EXIT_PRIORITY if c in codes.values()), ExitCode.OK)
    if code == ExitCode.OK:
        return PodExit(ExitCode.OK, None)
    which = [str(e.index) for e in ended if codes[e.index] == code]
    detail = next((e.line.partition(": ")[2] for e in ended if codes[e.index] == code and e.line), "")
    return PodExit(code, reason_for_exit_code(code), f"worker process(es) {', '.join(which)}: {detail or f'exit code {code}'}")


def stop_code(code: int) -> int:
    """A stopped process's exit code. Killed by SIGTERM or SIGINT (asked to stop before it could handle them):
    a clean stop; by any other signal: its drain did not finish."""
    if code >= 0:
        return code
    return ExitCode.OK if -code in (signal.SIGTERM, signal.SIGINT) else ExitCode.DRAIN_INCOMPLETE


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
