"""Why the workers are not running, read from their pods' container statuses. Pure.

A worker that exits with an error writes ``<Reason>: <what went wrong>`` to its termination
log (see ``knarr.observability.termination``), and the kubelet keeps it in the pod's status:
``lastState.terminated.message`` while the container waits to be restarted
(``state.waiting.reason: CrashLoopBackOff``). That reason becomes the Pipeline's.

Without such a line (an older worker image, or one killed before it could write), the
kubelet's own words are used: the exit code and the tail of the log, OOMKilled, or a
waiting reason such as ImagePullBackOff or CreateContainerConfigError (a missing Secret).
A worker that is ready now is healthy, whatever its last exit was.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from knarr.observability.termination import Reason

WORKER_REASONS = frozenset(str(r) for r in Reason)
# Waiting reasons that say the container cannot even start; the kubelet's message explains them.
STARTUP_FAILURES = frozenset({
    "ImagePullBackOff", "ErrImagePull", "InvalidImageName", "CreateContainerConfigError", "CreateContainerError",
    "RunContainerError",
})
CRASH_LOOP = "CrashLoopBackOff"
EXITED = "WorkerExited"  # exited with an error but left no reason line
MAX_MESSAGE = 1024
_LINE = re.compile(r"^([A-Z][A-Za-z]+): (.*)$")


@dataclass(frozen=True)
class Failure:
    """Why workers fail: a reason word for conditions and events, and the message to act on."""

    reason: str
    message: str


def worker_failure(pods: Iterable[Mapping[str, Any]], container: str = "worker") -> Failure | None:
    """The most recent failure among the pods' ``container``s that are not ready, if any."""
    found: list[tuple[tuple[int, str], Failure]] = []
    for pod in pods:
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            continue  # on its way out (a rollout, a scale-down): its exit says nothing about the spec
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            if status.get("name") != container or status.get("ready"):
                continue
            failure = _container_failure(status)
            if failure is not None:
                found.append(failure)
    if not found:
        return None
    return max(found, key=lambda item: item[0])[1]


def _container_failure(status: Mapping[str, Any]) -> tuple[tuple[int, str], Failure] | None:
    """The failure and its rank: a container that cannot start outranks one that exited; then the latest exit."""
    state = status.get("state") or {}
    waiting = state.get("waiting") or {}
    if waiting.get("reason") in STARTUP_FAILURES:
        return (1, ""), Failure(waiting["reason"], _bounded(waiting.get("message") or waiting["reason"]))
    terminated = state.get("terminated") or (status.get("lastState") or {}).get("terminated")
    if not terminated or int(terminated.get("exitCode") or 0) == 0:
        return None
    return (0, str(terminated.get("finishedAt") or "")), _from_termination(terminated, crash_looping=waiting.get("reason") == CRASH_LOOP)


def _from_termination(terminated: Mapping[str, Any], *, crash_looping: bool) -> Failure:
    message = (terminated.get("message") or "").strip()
    first = message.splitlines()[0] if message else ""
    match = _LINE.match(first)
    if match and match.group(1) in WORKER_REASONS:
        return Failure(match.group(1), _bounded(match.group(2)))
    code = terminated.get("exitCode")
    kubelet_reason = terminated.get("reason") or ""
    if kubelet_reason == "OOMKilled":
        return Failure("OOMKilled", f"the worker used more memory than its limit (exit code {code}); raise spec.resources.limits.memory")
    tail = message.splitlines()[-1].strip() if message else ""
    said = f": {tail}" if tail else ""
    return Failure(CRASH_LOOP if crash_looping else EXITED, _bounded(f"the worker exited with code {code}{said}"))


def _bounded(text: str) -> str:
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 1] + "…"
