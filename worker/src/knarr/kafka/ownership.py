"""Partitions that no member of the consumer group owns: found, and judged stranded, without I/O.

With static membership (`group.instance.id`), a member killed in the middle of a cooperative
rebalance can leave partitions with no owner. The first phase took them from it; handing them
to someone is a second rebalance, which only the member that gave them up asks for. Its static
successor rejoins with the assignment the group kept for it and asks for nothing, so the group
stays stable while those partitions go unconsumed (reproduced on a real broker:
tests/worker/test_static_membership.py).

The Kafka source looks at the group now and then (`kafka.ownership_check_seconds`). A partition
of the topic in nobody's assignment of a stable group is normal for a moment: a member is
draining what it gave up before the second phase, or a silent member's session has not ended
yet. Seen unowned in every look for longer than either can last, it is stranded, and the
source rejoins the group, which rebalances it and hands the partition out.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class GroupLook:
    """What one look at the group found: whether it is stable, and which partitions of the topic are assigned."""

    stable: bool
    partitions: int  # how many the topic has
    assigned: frozenset[int]  # of this topic, in any member's assignment


def unowned(look: GroupLook) -> frozenset[int]:
    """The topic's partitions that no member owns; none while the group is rebalancing (it is handing them out)."""
    if not look.stable:
        return frozenset()
    return frozenset(range(look.partitions)) - look.assigned


def assigned_partitions(topic: str, assignments: Iterable[tuple[str, int]]) -> frozenset[int]:
    """The partitions of ``topic`` among (topic, partition) pairs of every member's assignment."""
    return frozenset(p for t, p in assignments if t == topic)


def grace_seconds(session_timeout_s: float, revoke_wait_s: float, interval_s: float) -> float:
    """How long a partition may stay unowned before it counts as stranded: longer than a revoking member's
    drain, and than a silent member's session (its end rebalances the group), plus one look's interval."""
    return max(session_timeout_s, revoke_wait_s) + interval_s


@dataclass
class StrandWatch:
    """Remembers since when each partition has been unowned in every look."""

    grace: float
    since: dict[int, float] = field(default_factory=dict)

    def observe(self, now: float, unowned_now: frozenset[int]) -> frozenset[int]:
        """Take one look's unowned partitions; return those unowned in every look for at least ``grace``."""
        self.since = {p: self.since.get(p, now) for p in unowned_now}
        return frozenset(p for p, first in self.since.items() if now - first >= self.grace)

    def reset(self) -> None:
        """After a rejoin: what was seen before it says nothing about the group after it."""
        self.since = {}
