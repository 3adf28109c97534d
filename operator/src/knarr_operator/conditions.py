"""Status conditions (Ready, Progressing, Degraded, Suspended, RolledBack), computed from observations. Pure.

Every reason is one word a person can look up in the README's Troubleshooting table; the
worker's own reasons (ConfigRejected, HandlerRejected, ServiceUnavailable, …) come from its
termination message (see :mod:`knarr_operator.failures`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from knarr_operator.failures import Failure
from knarr_operator.rollout import DEADLINE_EXCEEDED, rolled_back_message

CONFIG_REJECTED = "ConfigRejected"
SUSPENDED = "Suspended"
ROLLED_BACK = "RolledBack"
# The conditions that say what the operator decided, not what the workers do: kept as they were
# while a spec is rejected (nothing about them changed).
DECISIONS = (SUSPENDED, ROLLED_BACK)


@dataclass(frozen=True)
class Observation:
    """What the operator saw this round."""

    generation: int
    rejected: str | None = None  # why the worker would refuse the spec's config (nothing was rolled out)
    kafka_error: str | None = None
    desired_replicas: int | None = None
    deployment: Mapping[str, Any] | None = None  # the Deployment's status (and metadata.generation)
    deployment_generation: int | None = None
    failure: Failure | None = None  # why workers are failing, from their pods
    suspended: bool = False
    resume_replicas: int | None = None
    rolled_back: Mapping[str, Any] | None = None  # status.rolledBack, while the workers run the last ready spec
    deadline_exceeded: bool = False  # the spec missed its deadline and could not be rolled back
    deadline_seconds: int = 0


def _condition(type_: str, status: bool, reason: str, message: str) -> dict[str, Any]:
    return {"type": type_, "status": "True" if status else "False", "reason": reason, "message": message}


def rolled_out(deployment: Mapping[str, Any] | None, deployment_generation: int | None, wanted: int) -> bool:
    """The Deployment controller has seen the current template and every worker runs it."""
    status = deployment or {}
    observed = status.get("observedGeneration")
    updated = int(status.get("updatedReplicas") or 0)
    return (
        deployment is not None
        and observed is not None
        and (deployment_generation is None or observed >= deployment_generation)
        and updated >= wanted
        and int(status.get("replicas") or 0) == updated
    )


def workers_ready(deployment: Mapping[str, Any] | None, deployment_generation: int | None, wanted: int) -> bool:
    return rolled_out(deployment, deployment_generation, wanted) and int((deployment or {}).get("readyReplicas") or 0) >= wanted


def rejected(message: str) -> list[dict[str, Any]]:
    """The spec's config would be refused by the worker: nothing rolled out, the old workers keep running."""
    return [
        _condition("Ready", False, CONFIG_REJECTED, message),
        _condition("Progressing", False, CONFIG_REJECTED, "not rolled out: the workers keep running the previous spec; fix the spec"),
        _condition("Degraded", True, CONFIG_REJECTED, message),
    ]


def conditions(obs: Observation) -> list[dict[str, Any]]:
    if obs.rejected:
        return rejected(obs.rejected)
    status = obs.deployment or {}
    ready = int(status.get("readyReplicas") or 0)
    updated = int(status.get("updatedReplicas") or 0)
    wanted = obs.desired_replicas if obs.desired_replicas is not None else int(status.get("replicas") or 0)
    done = rolled_out(obs.deployment, obs.deployment_generation, wanted)
    all_ready = ready >= wanted and done
    back = obs.rolled_back
    running = f"{ready}/{wanted} workers ready" + (f" (running generation {back.get('toGeneration')}'s spec)" if back else "")

    if obs.suspended:
        ready_c = _condition("Ready", False, SUSPENDED, "spec.suspend is true: no worker runs")
    elif obs.kafka_error:
        ready_c = _condition("Ready", False, "KafkaUnreachable", obs.kafka_error)
    elif all_ready:
        ready_c = _condition("Ready", True, "WorkersReady", running)
    elif obs.failure:
        ready_c = _condition("Ready", False, obs.failure.reason, obs.failure.message)
    else:
        ready_c = _condition("Ready", False, "WorkersNotReady", running)

    if obs.suspended:
        progressing = _condition("Progressing", False, SUSPENDED, "spec.suspend is true: nothing rolls out until it is false")
    elif back:
        progressing = _condition("Progressing", False, ROLLED_BACK, rolled_back_message(back))
    elif obs.deadline_exceeded and not done:
        why = f" ({obs.failure.reason}: {obs.failure.message})" if obs.failure else ""
        progressing = _condition(
            "Progressing", False, DEADLINE_EXCEEDED,
            f"generation {obs.generation} was not ready within {obs.deadline_seconds}s{why}, and there is no earlier "
            f"ready spec to roll back to (or spec.rollout.autoRollback is false); fix the spec",
        )
    elif done:
        progressing = _condition("Progressing", False, "RolledOut", "every worker runs the current spec")
    else:
        progressing = _condition("Progressing", True, "RollingOut", f"{updated}/{wanted} workers updated")

    if obs.kafka_error:
        degraded = _condition("Degraded", True, "KafkaUnreachable", obs.kafka_error)
    elif obs.failure and not obs.suspended:
        degraded = _condition("Degraded", True, obs.failure.reason, obs.failure.message)
    elif back:
        degraded = _condition("Degraded", True, ROLLED_BACK, rolled_back_message(back))
    else:
        degraded = _condition("Degraded", False, "AsExpected", "no problem seen")

    return [ready_c, progressing, degraded, suspended_condition(obs), rolled_back_condition(back)]


def suspended_condition(obs: Observation) -> dict[str, Any]:
    if not obs.suspended:
        return _condition(SUSPENDED, False, "Running", "spec.suspend is false")
    when = f"; {obs.resume_replicas} when resumed" if obs.resume_replicas is not None else ""
    return _condition(
        SUSPENDED, True, SUSPENDED,
        f"the workers are scaled to 0{when}; the Deployment, its config and the consumer group's committed offsets are kept",
    )


def rolled_back_condition(back: Mapping[str, Any] | None) -> dict[str, Any]:
    if not back:
        return _condition(ROLLED_BACK, False, "CurrentSpec", "the workers run the current spec")
    return _condition(ROLLED_BACK, True, str(back.get("reason") or DEADLINE_EXCEEDED), rolled_back_message(back))


def merge_transition_times(new: Sequence[dict[str, Any]], old: Sequence[Mapping[str, Any]], now: str) -> list[dict[str, Any]]:
    """Keep lastTransitionTime while a condition's status stays the same."""
    before = {c.get("type"): c for c in old}
    out = []
    for cond in new:
        prev = before.get(cond["type"])
        same = prev is not None and prev.get("status") == cond["status"]
        out.append({**cond, "lastTransitionTime": prev.get("lastTransitionTime", now) if same and prev else now})
    return out
