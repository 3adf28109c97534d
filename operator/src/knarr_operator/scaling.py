"""The autoscaling decision: consumer lag in, worker count out. Pure; the timer does the I/O.

Scale up at once (lag is work waiting); scale down only after the lag has allowed
fewer workers for ``scale_down_delay_seconds`` without a break, so a short lull
does not trigger a rebalance storm. Never more consumers than partitions: the
extra ones would sit idle in the consumer group. A pod of ``processes: N`` (knarr run
--processes) is N consumers, so it counts N times (consumers_per_pod).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kubernetes.utils.quantity import parse_quantity

from knarr_operator.spec import OperatorSpec, Scaling
from knarr_operator.worker_config import WorkerConfig


@dataclass(frozen=True)
class Decision:
    replicas: int
    low_lag_since: float | None  # when the lag first allowed fewer workers; None while it does not

    def changes(self, current: int) -> bool:
        return self.replicas != current


def consumers_per_pod(processes: int, cpu_limit: str | int | float | None) -> int:
    """The consumers a worker pod of ``processes`` brings to the group. 0 (one per CPU) is the pod's CPU
    limit rounded up, as the pod counts its cgroup's quota, when the limit is known; else one. A node with
    fewer CPUs than the limit runs fewer processes than counted here (the pod also caps at its affinity)."""
    if processes > 0:
        return processes
    if cpu_limit is None:
        return 1
    try:
        cpus = parse_quantity(cpu_limit)
    except ValueError:  # the Deployment's apply names a malformed quantity
        return 1
    return max(1, math.ceil(cpus))


def pod_consumers(spec: OperatorSpec, config: WorkerConfig) -> int:
    """The consumers one of the Pipeline's worker pods brings (consumers_per_pod of its processes and CPU limit)."""
    return consumers_per_pod(config.validated.processes, spec.resources.limits.get("cpu"))


def bounds(scaling: Scaling, partitions: int, consumers_per_pod: int = 1) -> tuple[int, int]:
    """[lowest, highest] worker count: the spec's range, capped so the pods' consumers do not outnumber the partitions."""
    cap = math.ceil(partitions / max(1, consumers_per_pod)) if partitions > 0 else scaling.max_replicas
    high = min(scaling.max_replicas, cap)
    return min(scaling.min_replicas, high), high


def wanted_replicas(scaling: Scaling, lag: int, partitions: int, consumers_per_pod: int = 1) -> int:
    low, high = bounds(scaling, partitions, consumers_per_pod)
    return max(low, min(high, math.ceil(max(lag, 0) / scaling.lag_per_replica)))


def decide(scaling: Scaling, *, current: int, lag: int, partitions: int, now: float, low_lag_since: float | None,
           consumers_per_pod: int = 1) -> Decision:
    low, high = bounds(scaling, partitions, consumers_per_pod)
    current_in_bounds = max(low, min(high, current))
    target = wanted_replicas(scaling, lag, partitions, consumers_per_pod)
    if target >= current_in_bounds:
        return Decision(target, None)
    since = now if low_lag_since is None else low_lag_since
    if now - since >= scaling.scale_down_delay_seconds:
        return Decision(target, None)
    return Decision(current_in_bounds, since)


def clamp_for_spec(scaling: Scaling, current: int | None) -> int:
    """The count to (re)apply on reconcile: keep what the scaler chose, within the spec's range."""
    if current is None:
        return scaling.min_replicas
    return max(scaling.min_replicas, min(scaling.max_replicas, current))


@dataclass(frozen=True)
class ReplicaPlan:
    """The Deployment's count this round, around ``spec.suspend``."""

    replicas: int | None  # for the builtin engine's manifest (suspended: 0 with either engine)
    resume_replicas: int | None  # remembered on the Deployment while suspended
    resumed_to: int | None = None  # resuming now: the count restored


def plan_replicas(scaling: Scaling, *, suspend: bool, current: int | None, remembered: int | None) -> ReplicaPlan:
    """Suspending remembers the count (once); resuming restores it, within the spec's range.

    ``current``: the Deployment's replicas (None: no Deployment yet); ``remembered``: the count
    a suspended Deployment carries from before.
    """
    if suspend:
        if remembered is None:
            remembered = current if current else clamp_for_spec(scaling, None)
        return ReplicaPlan(0, remembered)
    if remembered is not None:
        restored = clamp_for_spec(scaling, remembered)
        return ReplicaPlan(restored, None, restored)
    return ReplicaPlan(clamp_for_spec(scaling, current), None)
