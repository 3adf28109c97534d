"""Rollouts and automatic rollback: which spec the workers should run. Pure; the handler does the I/O.

Each spec the workers run is identified by the hash of its *workload* part — everything but
the runtime keys (scaling, backfills, suspend, restartNonce, rollout), which change how many
workers run, not what each one runs. The operator remembers the last workload that became
Ready (``status.lastReadySpec`` plus the spec itself in the ``<name>-last-ready`` ConfigMap).

A new workload gets ``rollout.readyDeadlineSeconds`` from when it is first seen (suspended
time does not count). If its workers are not all ready by then, the workers go back to the
last ready workload (``status.rolledBack``), and stay there until the workload changes again
or ``restartNonce`` does — each is a new attempt. Without a last ready workload (the very
first spec), or with ``autoRollback: false``, the missed deadline is only reported.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from knarr_operator.failures import Failure
from knarr_operator.manifests.meta import content_hash
from knarr_operator.spec import RUNTIME_KEYS
from knarr_operator.timestamps import format_time, parse_time

DEADLINE_EXCEEDED = "ReadyDeadlineExceeded"  # the reason when no worker said why


def workload(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a Pipeline's spec that decides what each worker runs."""
    return {k: v for k, v in spec.items() if k not in RUNTIME_KEYS}


def workload_hash(spec: Mapping[str, Any]) -> str:
    return content_hash(workload(spec))


def with_workload(spec: Mapping[str, Any], good: Mapping[str, Any]) -> dict[str, Any]:
    """``spec``'s runtime keys over the workload ``good``: what the workers run after a rollback."""
    return {**{k: v for k, v in spec.items() if k in RUNTIME_KEYS}, **workload(good)}


@dataclass(frozen=True)
class RolloutState:
    """The rollout bookkeeping kept in the Pipeline's status (camelCase dicts, as stored)."""

    last_ready: Mapping[str, Any] | None = None  # lastReadySpec: {generation, hash}
    attempt: Mapping[str, Any] | None = None  # rollout: {generation, hash, startedAt}
    rolled_back: Mapping[str, Any] | None = None  # rolledBack: {generation, hash, restartNonce, reason, message, …}

    @classmethod
    def from_status(cls, status: Mapping[str, Any]) -> RolloutState:
        return cls(status.get("lastReadySpec") or None, status.get("rollout") or None, status.get("rolledBack") or None)

    def to_status(self) -> dict[str, Any]:
        """The status keys, None for those to remove."""
        return {"lastReadySpec": self.last_ready, "rollout": self.attempt, "rolledBack": self.rolled_back}


@dataclass(frozen=True)
class RolloutPlan:
    state: RolloutState  # to write back
    run_last_ready: bool  # render the last ready workload instead of the spec's
    record_ready: bool  # the spec's workload just became ready: remember it
    deadline_exceeded: bool = False  # missed, and nothing was (or could be) rolled back
    rolled_back_now: bool = False  # this round rolled back: post the event


def plan_rollout(
    state: RolloutState,
    *,
    generation: int,
    key: str,
    restart_nonce: str,
    ready: bool,  # the spec's workload is the one deployed, and all its workers are ready
    suspended: bool,
    now: float,
    deadline_seconds: float,
    auto_rollback: bool,
    failure: Failure | None,
) -> RolloutPlan:
    last_ready = state.last_ready
    back = state.rolled_back
    if back and back.get("hash") == key and back.get("restartNonce", "") == restart_nonce and last_ready:
        return RolloutPlan(RolloutState(last_ready, None, back), run_last_ready=True, record_ready=False)
    if last_ready and last_ready.get("hash") == key:
        return RolloutPlan(RolloutState(last_ready, None, None), run_last_ready=False, record_ready=False)
    attempt = state.attempt if state.attempt and state.attempt.get("hash") == key else None
    if ready:
        since = attempt["generation"] if attempt else generation  # later changes of runtime keys only bump the generation
        return RolloutPlan(RolloutState({"generation": since, "hash": key}, None, None), run_last_ready=False, record_ready=True)
    if suspended:  # the clock starts when the workers may run
        return RolloutPlan(RolloutState(last_ready, None, None), run_last_ready=False, record_ready=False)
    if attempt is None:
        attempt = {"generation": generation, "hash": key, "startedAt": format_time(now)}
    started = parse_time(attempt.get("startedAt"))
    overdue = started is None or now - started >= deadline_seconds
    if not overdue:
        return RolloutPlan(RolloutState(last_ready, attempt, None), run_last_ready=False, record_ready=False)
    if not (auto_rollback and last_ready):
        return RolloutPlan(RolloutState(last_ready, attempt, None), run_last_ready=False, record_ready=False, deadline_exceeded=True)
    why = failure or Failure(DEADLINE_EXCEEDED, "no worker reported why")
    rolled_back = {
        "generation": attempt["generation"],
        "hash": key,
        "restartNonce": restart_nonce,
        "reason": why.reason,
        "message": why.message,
        "toGeneration": last_ready.get("generation"),
        "deadlineSeconds": int(deadline_seconds),
    }
    return RolloutPlan(RolloutState(last_ready, None, rolled_back), run_last_ready=True, record_ready=False, rolled_back_now=True)


def rolled_back_message(back: Mapping[str, Any]) -> str:
    return (
        f"generation {back.get('generation')} was not ready within {back.get('deadlineSeconds')}s "
        f"({back.get('reason')}: {back.get('message')}); the workers run generation {back.get('toGeneration')}'s spec again. "
        f"Fix the spec (or change spec.restartNonce) to try again"
    )
