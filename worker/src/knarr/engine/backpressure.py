"""Flow control: when to stop consuming, and which partitions to pause at the client.

Two counts decide, each with a high and a low watermark:

- the **load**: a partition's queued messages plus its tasks in flight that still have work to do
  (waiting for a slot, running, in ``on_task_complete``, between retries);
- the **deliveries**: tasks whose outputs are with the sinks, awaiting their confirmation (and
  the outputs of ``on_message_complete`` and ``on_window_complete`` that are, one each). They
  are bounded apart because how many there are is the task rate times the sinks' latency, not a
  matter of slots: a broker confirms a record 5-10 ms after it is produced, so at 20,000 tiny
  tasks a second 100-200 tasks wait on it, and counted in the load they filled it by themselves
  and held the pool idle (docs/performance.md, "Outputs awaiting confirmation, counted apart").

Two mechanisms:

- **Hold**: when either count reaches its high watermark, the worker stops taking messages until
  both are down to their low ones, or until the pool has a slot free that nothing waits for (no
  task, no queued message) while both are under their high ones: then what holds the counts up
  is work past the executors (outputs waiting for a sink), and holding on would only leave the
  slot idle. Nothing is paused at the Kafka client meanwhile, so the messages it already fetched
  stay in its (bounded) queue and flow again at once; a client pause would drop them and resuming
  would wait for a new fetch (hundreds of ms in librdkafka), leaving the pool idle every cycle.
- **Isolation**: a partition whose own load reaches ``high + batch`` got there by fan-out —
  consumption alone cannot put that much on one partition, because the worker holds at
  ``high`` and one poll adds at most ``batch`` — so it is paused at the client, left out of
  the hold, and the other partitions keep flowing (a 10,000-task message on one partition
  must not starve the rest). It rejoins once it has drained to the low watermark.

Memory stays bounded whatever the lag: the partitions taking part in the hold hold fewer than
``high + batch`` messages of work together, an isolated partition receives nothing new, and the
tasks awaiting the sinks stay under their own high watermark plus what the work in flight adds
before the next hold.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Flow:
    hold: bool = False
    isolated: frozenset[int] = field(default_factory=frozenset)


@dataclass(frozen=True, slots=True)
class Watermarks:
    """A count's high watermark (a hold begins there) and low one (the hold may end there)."""

    high: int
    low: int

    def released(self, count: int, pool_idle: bool) -> bool:
        """Whether the count lets a hold end: down to the low watermark, or under the high one with a
        slot free that nothing waits for."""
        return count <= self.low or (pool_idle and count < self.high)


def decide_flow(loads: dict[int, int], previous: Flow, work: Watermarks, batch: int, pool_idle: bool,
                delivering: int, delivery: Watermarks) -> Flow:
    """The flow state now, given each partition's load (bounded by ``work``), the tasks awaiting the
    sinks (``delivering``, bounded by ``delivery``), the state before (hysteresis), and whether the
    pool has a slot free that nothing waits for."""
    flooded_at = work.high + batch
    isolated = frozenset(
        p for p, load in loads.items()
        if load >= flooded_at or (p in previous.isolated and load > work.low)
    )
    rest = sum(load for p, load in loads.items() if p not in isolated)
    hold = rest >= work.high or delivering >= delivery.high or (
        previous.hold and not hold_ends(rest, work, pool_idle, delivering, delivery))
    return Flow(hold, isolated)


def hold_ends(load: int, work: Watermarks, pool_idle: bool, delivering: int, delivery: Watermarks) -> bool:
    """Whether a hold is over: the load and the deliveries both let it end."""
    return work.released(load, pool_idle) and delivery.released(delivering, pool_idle)


def held_load(loads: dict[int, int], flow: Flow) -> int:
    """The load that decides when a hold ends: every partition's but the isolated ones'."""
    return sum(load for p, load in loads.items() if p not in flow.isolated)
