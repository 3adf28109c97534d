"""Status conditions (Ready, Progressing, Degraded), computed from observations. Pure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Observation:
    """What the operator saw this round."""

    generation: int
    invalid_config: str | None = None  # the worker's message, when it would reject the config
    kafka_error: str | None = None
    desired_replicas: int | None = None
    deployment: Mapping[str, Any] | None = None  # the Deployment's status (and metadata.generation)
    deployment_generation: int | None = None


def _condition(type_: str, status: bool, reason: str, message: str) -> dict[str, Any]:
    return {"type": type_, "status": "True" if status else "False", "reason": reason, "message": message}


def conditions(obs: Observation) -> list[dict[str, Any]]:
    if obs.invalid_config:
        return [
            _condition("Ready", False, "InvalidConfig", obs.invalid_config),
            _condition("Progressing", False, "InvalidConfig", "fix the spec; nothing was changed"),
            _condition("Degraded", True, "InvalidConfig", obs.invalid_config),
        ]
    status = obs.deployment or {}
    ready = int(status.get("readyReplicas") or 0)
    updated = int(status.get("updatedReplicas") or 0)
    total = int(status.get("replicas") or 0)
    wanted = obs.desired_replicas if obs.desired_replicas is not None else int(status.get("replicas") or 0)
    observed = status.get("observedGeneration")
    rolled_out = (
        obs.deployment is not None
        and observed is not None
        and (obs.deployment_generation is None or observed >= obs.deployment_generation)
        and updated >= wanted
        and total == updated
    )
    progressing = _condition(
        "Progressing",
        not rolled_out,
        "RollingOut" if not rolled_out else "RolledOut",
        f"{updated}/{wanted} workers updated" if not rolled_out else "every worker runs the current spec",
    )
    if obs.kafka_error:
        return [
            _condition("Ready", False, "KafkaUnreachable", obs.kafka_error),
            progressing,
            _condition("Degraded", True, "KafkaUnreachable", obs.kafka_error),
        ]
    all_ready = ready >= wanted and rolled_out
    return [
        _condition(
            "Ready",
            all_ready,
            "WorkersReady" if all_ready else "WorkersNotReady",
            f"{ready}/{wanted} workers ready",
        ),
        progressing,
        _condition("Degraded", False, "AsExpected", "no problem seen"),
    ]


def merge_transition_times(new: Sequence[dict[str, Any]], old: Sequence[Mapping[str, Any]], now: str) -> list[dict[str, Any]]:
    """Keep lastTransitionTime while a condition's status stays the same."""
    before = {c.get("type"): c for c in old}
    out = []
    for cond in new:
        prev = before.get(cond["type"])
        same = prev is not None and prev.get("status") == cond["status"]
        out.append({**cond, "lastTransitionTime": prev.get("lastTransitionTime", now) if same and prev else now})
    return out
