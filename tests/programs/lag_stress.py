"""Hammer the operator's lag readers from several threads, as kopf's handler threads do.

    python lag_stress.py BOOTSTRAP GROUP TOPIC SECONDS

Four threads read the lag of two Pipelines (two threads share each reader) with a 0.3 s
timeout until SECONDS pass, then the readers are closed as the operator closes them on
shutdown. Prints one JSON line: calls, reads that succeeded, reads that failed. A crash inside
librdkafka kills this process, which is the point: the test that runs it sees the signal.
"""

from __future__ import annotations

import json
import sys
import threading
import time

from knarr_operator.lag import KafkaUnreachable, LagReaders


def main() -> int:
    bootstrap, group, topic, seconds = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    readers = LagReaders()
    until = time.monotonic() + seconds
    counts = {"calls": 0, "ok": 0, "unreachable": 0}
    lock = threading.Lock()

    def hammer(owner: str) -> None:
        while time.monotonic() < until:
            try:
                readers.lag(owner, bootstrap, group, topic, timeout=0.3)
                outcome = "ok"
            except KafkaUnreachable:
                outcome = "unreachable"
            with lock:
                counts["calls"] += 1
                counts[outcome] += 1

    threads = [threading.Thread(target=hammer, args=(owner,)) for owner in ("a", "b", "a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    final = readers.lag("a", bootstrap, group, topic, timeout=30)  # the broker answers again: a real value
    readers.close()
    print(json.dumps({**counts, "final_lag": final.total, "partitions": final.partitions}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
