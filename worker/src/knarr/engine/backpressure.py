"""Flow control: when to stop consuming, and which partitions to pause at the client.

Load is a partition's queued messages plus its in-flight tasks. Two mechanisms:

- **Hold**: when the load reaches the high watermark, the worker stops taking messages
  until it falls to the low one, or until the pool has a slot free that nothing waits for
  (no task, no queued message) while the load is under the high watermark: then what holds
  the load up is work past the executors (outputs waiting for a sink's confirmation), and
  holding on would only leave the slot idle. Nothing is paused at the Kafka client
  meanwhile, so the messages it already fetched stay in its (bounded) queue and flow again
  at once; a client pause would drop them and resuming would wait for a new fetch (hundreds
  of ms in librdkafka), leaving the pool idle every cycle.
- **Isolation**: a partition whose own load reaches ``high + batch`` got there by fan-out —
  consumption alone cannot put that much on one partition, because the worker holds at
  ``high`` and one poll adds at most ``batch`` — so it is paused at the client, left out of
  the hold, and the other partitions keep flowing (a 10,000-task message on one partition
  must not starve the rest). It rejoins once it has drained to the low watermark.

Memory stays bounded whatever the lag: the partitions taking part in the hold hold fewer
than ``high + batch`` messages together, and an isolated partition receives nothing new.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Flow:
    hold: bool = False
    isolated: frozenset[int] = field(default_factory=frozenset)


def decide_flow(loads: dict[int, int], previous: Flow, high: int, low: int, batch: int,
                pool_idle: bool = False) -> Flow:
    """The flow state now, given each partition's load and the state before (hysteresis), and whether
    the pool has a slot free that nothing waits for."""
    flooded_at = high + batch
    isolated = frozenset(
        p for p, load in loads.items()
        if load >= flooded_at or (p in previous.isolated and load > low)
    )
    rest = sum(load for p, load in loads.items() if p not in isolated)
    hold = rest >= high or (previous.hold and not hold_ends(rest, high, low, pool_idle))
    return Flow(hold, isolated)


def hold_ends(load: int, high: int, low: int, pool_idle: bool) -> bool:
    """Whether a hold is over: the load is down to the low watermark, or under the high one with a
    slot free that nothing waits for."""
    return load <= low or (pool_idle and load < high)


def held_load(loads: dict[int, int], flow: Flow) -> int:
    """The load that decides when a hold ends: every partition's but the isolated ones'."""
    return sum(load for p, load in loads.items() if p not in flow.isolated)
