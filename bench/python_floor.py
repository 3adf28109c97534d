"""Persistent mode's floor in Python: the least any Python worker does for the echo workload.

bench/spawn_floor.c is spawn mode's floor: no worker at all, only the spawns. This is persistent
mode's: the work every Python worker must do for bench/persistent.py's workload, and nothing else.
One thread, no event loop, no models, hooks, flow control, retries, metrics or recorder:

    consume a batch -> one request frame per message to a free program (the same
    bench/echo_task.py programs, max_executors of them, knarr's own frame codec) -> read the
    answers -> produce one JSON record per message -> when its delivery is confirmed, the
    message is done -> commit each partition's contiguous done offsets every 50 ms, and the
    last ones synchronously.

The clock runs from the first consumed batch (the programs start inside it, as in persistent mode)
to that last commit. It is a floor for comparison, not a worker: it handles no failure at all.

    python bench/python_floor.py '{"bootstrap": ..., "topic": ..., "ends": {...}, "output": ..., "slots": 4}'

prints one line, ``RESULT {json}``: bench/persistent.py's ``python_floor`` runs it and reads it.
Optional keys: ``group`` (the consumer group; default ``<topic>-python-floor``) and ``ahead``: how many
requests a program may have at once (default 1, as the engine; 2 writes its next request while it
runs the current one, so a busy program finds it waiting and is not woken for it).
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from collections import deque
from functools import partial
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent / "worker" / "src"))

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from clocks import broker_between, broker_cpu_seconds, cpu_self, stat_cpu_seconds  # noqa: E402
from knarr.engine.frames import Decoder, encode  # noqa: E402

RESULT = "RESULT "
ECHO_PROGRAM = [sys.executable, str(BENCH / "echo_task.py")]
COMMIT_EVERY_SECONDS = 0.05


class Programs:
    """``slots`` echo programs, each running one task at a time, with up to ``ahead`` - 1 more waiting in its stdin."""

    def __init__(self, slots: int, ahead: int = 1) -> None:
        self.procs = [subprocess.Popen(ECHO_PROGRAM, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
                      for _ in range(slots)]
        self.decoders = [Decoder() for _ in self.procs]
        self.by_fd = {proc.stdout.fileno(): i for i, proc in enumerate(self.procs)}
        self.poller = select.epoll()
        for proc in self.procs:
            self.poller.register(proc.stdout.fileno(), select.EPOLLIN)
        for i in range(slots):  # each says hello first
            while not self._frames(i):
                pass
        self.free = [i for _ in range(ahead) for i in range(slots)]  # a program once per request it may take
        self.places = len(self.free)
        self.running: dict[int, deque[tuple[int, int]]] = {i: deque() for i in range(slots)}

    @property
    def in_flight(self) -> int:
        """Requests sent and not answered yet."""
        return self.places - len(self.free)

    def _frames(self, i: int) -> list:
        return self.decoders[i].feed(os.read(self.procs[i].stdout.fileno(), 65536))

    def send(self, partition: int, offset: int) -> None:
        i = self.free.pop()
        self.running[i].append((partition, offset))
        os.write(self.procs[i].stdin.fileno(), encode({
            "type": "task", "id": f"{partition}:{offset}", "args": [f"{partition}:{offset}"], "env": {},
            "timeout_seconds": 30}))

    def answers(self, timeout: float) -> list[tuple[int, int, bytes]]:
        """(partition, offset, stdout) of each task answered, waiting up to ``timeout`` for the first."""
        done = []
        for fd, _ in self.poller.poll(timeout):
            i = self.by_fd[fd]
            for frame in self._frames(i):
                partition, offset = self.running[i].popleft()
                self.free.append(i)
                done.append((partition, offset, frame.parts[0]))
        return done

    def cpu_seconds(self) -> float:
        return sum(stat_cpu_seconds(Path(f"/proc/{proc.pid}/stat")) for proc in self.procs)

    def close(self) -> None:
        for proc in self.procs:
            proc.stdin.close()
            proc.wait()


class Watermark:
    """Per partition: the lowest offset not yet done, and the done ones above it."""

    def __init__(self, partitions: dict[int, int]) -> None:
        self.next = dict.fromkeys(partitions, 0)
        self.done: dict[int, set[int]] = {p: set() for p in partitions}
        self.moved: set[int] = set()

    def complete(self, partition: int, offset: int) -> None:
        done = self.done[partition]
        done.add(offset)
        nxt = self.next[partition]
        while nxt in done:
            done.discard(nxt)
            nxt += 1
        if nxt != self.next[partition]:
            self.next[partition] = nxt
            self.moved.add(partition)

    def take(self, topic: str) -> list[TopicPartition]:
        offsets = [TopicPartition(topic, p, self.next[p]) for p in sorted(self.moved)]
        self.moved.clear()
        return offsets


def run(spec: dict) -> dict:
    topic, ends = spec["topic"], {int(p): end for p, end in spec["ends"].items()}
    consumer = Consumer({"bootstrap.servers": spec["bootstrap"], "group.id": spec.get("group", f"{topic}-python-floor"),
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    producer = Producer({"bootstrap.servers": spec["bootstrap"], "linger.ms": 5, "enable.idempotence": True,
                         "acks": "all"})
    watermark = Watermark(ends)
    total, finished = sum(ends.values()), 0
    queue: deque[tuple[int, int]] = deque()
    programs: Programs | None = None
    first: dict | None = None
    last_commit = 0.0

    def delivered(partition: int, offset: int, err, _msg) -> None:
        nonlocal finished
        if err is not None:
            raise SystemExit(f"delivery failed: {err}")
        watermark.complete(partition, offset)
        finished += 1

    while finished < total:
        if len(queue) < 1000:
            idle = not queue and not (programs and programs.in_flight) and not len(producer)
            batch = consumer.consume(500, 0.5 if idle and first is None else 0.001 if idle else 0)
            if batch and first is None:
                first = {"at": time.perf_counter(), "cpu": cpu_self(), "loop": time.thread_time(),
                         "broker": broker_cpu_seconds()}
                programs = Programs(spec["slots"], spec.get("ahead", 1))
            queue.extend((m.partition(), m.offset()) for m in batch if m.error() is None)
        if programs is not None:
            while programs.free and queue:
                programs.send(*queue.popleft())
            for partition, offset, stdout in programs.answers(0.01 if programs.in_flight else 0):
                producer.produce(spec["output"], json.dumps({"echo": stdout.decode()}).encode(),
                                 on_delivery=partial(delivered, partition, offset))
        producer.poll(0)
        now = time.monotonic()
        if now - last_commit >= COMMIT_EVERY_SECONDS and watermark.moved:
            consumer.commit(offsets=watermark.take(topic), asynchronous=True)
            last_commit = now
    consumer.commit(offsets=[TopicPartition(topic, p, end) for p, end in ends.items()], asynchronous=False)
    assert first is not None and programs is not None
    done = {"at": time.perf_counter(), "cpu": cpu_self(), "loop": time.thread_time(), "broker": broker_cpu_seconds()}
    programs_cpu = programs.cpu_seconds()
    programs.close()
    consumer.close()
    broker = broker_between(first["broker"], done["broker"])
    return {"count": total, "seconds": done["at"] - first["at"], "cpu_seconds": done["cpu"] - first["cpu"],
            "loop_cpu_seconds": done["loop"] - first["loop"], "programs_cpu": programs_cpu,
            "broker_cpu_seconds": broker}


if __name__ == "__main__":
    print(RESULT + json.dumps(run(json.loads(sys.argv[1]))), flush=True)
