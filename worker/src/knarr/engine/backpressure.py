"""Which partitions to pause: a pure decision from each partition's load.

Consumption pauses when the total load (queued messages + in-flight tasks over all
partitions) reaches the high watermark, and resumes at the low one — but only the
partitions carrying at least their fair share of the load are paused. A partition flooded
by a 10,000-task fan-out is held back while one that trickles keeps flowing, and memory
stays bounded: paused partitions stop growing, and the others together add at most their
shares.
"""

from __future__ import annotations


def paused_partitions(loads: dict[int, int], paused: set[int], high: int, low: int) -> set[int]:
    """The partitions that should be paused now, given which are paused already (hysteresis)."""
    if not loads:
        return set()
    total = sum(loads.values())
    n = len(loads)
    high_share = max(1, high // n)
    low_share = max(1, low // n)
    result = set()
    for partition, load in loads.items():
        if partition in paused:
            # Stay paused until the whole worker is back under the low watermark, or this
            # partition has drained to a small share of it.
            if total > low and load > low_share:
                result.add(partition)
        elif total >= high and load >= high_share:
            result.add(partition)
    return result
