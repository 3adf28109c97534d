"""A worker that starts behind a backlog: its memory and its pace, with knarr's read-ahead bound and
with librdkafka's defaults, side by side in one run.

The workload: N small JSON messages (default 800,000) on P partitions (default 16) of a fresh
topic, all of them there before the worker starts, as after an outage. ``knarr run`` (the real
CLI, a process of its own, with 4 executors) consumes it, one ``/bin/true`` task per message, so
the backlog outlasts the window. After ``--seconds`` (default 20) the worker's RSS is read (its
peak, ``VmHWM``, and ``VmRSS`` now); then it is stopped with SIGTERM and the messages it committed
are counted.

Each setting runs ``--rounds`` times (default 2), alternating, each on a topic of its own:
- **knarr**: the source consumer as knarr sets it up (``knarr.kafka.settings``);
- **librdkafka**: the same worker with librdkafka's own defaults put back through ``kafka.extra``
  (``queued.min.messages`` 100000, ``queued.max.messages.kbytes`` 65536, ``fetch.message.max.bytes``
  1 MiB, ``fetch.max.bytes`` 50 MiB, ``fetch.queue.backoff.ms`` 1000).

Besides RSS and messages/s it counts the partitions the worker moved on in the window: a client
that fetches a lot of one partition at a time works through them one by one.

    python bench/backlog.py [--messages N] [--partitions P] [--seconds S] [--rounds R]
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent))

from knarr.config.models import KafkaConfig  # noqa: E402
from knarr.kafka import settings  # noqa: E402
from tests.services.kafka import committed_offsets, create_topic, ensure_kafka, produce_values, unique_name  # noqa: E402
from tests.worker.procs import status_kb  # noqa: E402

LIBRDKAFKA_DEFAULTS = {"queued.min.messages": 100_000, "queued.max.messages.kbytes": 65_536,
                       "fetch.message.max.bytes": 1_048_576, "fetch.max.bytes": 52_428_800,
                       "fetch.queue.backoff.ms": 1_000}
SETTINGS = {"knarr": {}, "librdkafka": LIBRDKAFKA_DEFAULTS}
HANDLER = '''
import knarr


class OneTaskEach(knarr.BaseHandler):
    async def arrange(self, messages, pending):
        return [knarr.ExecutorTask(args=[], source_offsets=[m.offset]) for m in messages]
'''


@dataclass(frozen=True)
class Run:
    setting: str
    peak_mib: float
    end_mib: float
    committed: int
    seconds: float
    partitions_moved: int  # partitions with anything committed

    @property
    def rate(self) -> float:
        return self.committed / self.seconds


def fill(bootstrap: str, topic: str, partitions: int, messages: int) -> None:
    """``messages`` small JSON records, round-robin over the partitions."""
    create_topic(bootstrap, topic, partitions)
    produce_values(bootstrap, topic, ((i % partitions, json.dumps({"i": i, "text": f"message {i}"}).encode())
                                      for i in range(messages)),
                   {"linger.ms": 50, "batch.num.messages": 10_000, "queue.buffering.max.messages": 1_000_000})


def one_run(bootstrap: str, setting: str, partitions: int, messages: int, seconds: float, workdir: Path) -> Run:
    topic = unique_name(f"bench-backlog-{setting}")
    fill(bootstrap, topic, partitions, messages)
    config = {
        "kafka": {"brokers": bootstrap, "source_topic": topic, "consumer_group": topic, "extra": SETTINGS[setting]},
        "executor": {"binary_path": "/bin/true", "max_executors": 4},
        "sinks": {"filesystem": {"out": {"base_path": str(workdir / "out")}}},  # the tasks have no outputs
        "dlq": {"topic": f"{topic}-dlq"},
        "metrics": {"enabled": False},
        "logging": {"level": "WARNING"},
    }
    config_path = workdir / f"{topic}.json"
    config_path.write_text(json.dumps(config))
    knarr = Path(sys.executable).parent / "knarr"
    worker = subprocess.Popen([str(knarr), "run", "--config", str(config_path), "--handler", "handler:OneTaskEach",
                               "--no-progress"], cwd=workdir)
    started = time.monotonic()
    try:
        try:
            code = worker.wait(seconds)
        except subprocess.TimeoutExpired:
            pass  # still working, as it should be
        else:
            raise RuntimeError(f"the worker exited early (code {code}); its log is above")
        peak, end = status_kb(worker.pid, "VmHWM"), status_kb(worker.pid, "VmRSS")
        if peak is None or end is None:
            raise RuntimeError(f"the worker was gone at the end of the window (code {worker.wait()}); its log is above")
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(60)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
    elapsed = time.monotonic() - started  # what it committed while draining counts too
    committed = committed_offsets(bootstrap, topic, topic)
    return Run(setting, peak / 1024, end / 1024, sum(committed.values()), elapsed,
               sum(1 for offset in committed.values() if offset > 0))


def report(runs: list[Run], partitions: int, messages: int, seconds: float) -> None:
    print(f"\nbacklog bench: {messages} messages on {partitions} partitions, all there before the worker starts; "
          f"knarr run, 4 executors, one /bin/true task per message; {seconds:g} s each run")
    knarr = settings.source_consumer(KafkaConfig(), "bench")
    print("  " + ", ".join(f"{key} {knarr[key]} (librdkafka's default {default})"
                           for key, default in LIBRDKAFKA_DEFAULTS.items()))
    print(f"  {'setting':12} {'peak RSS':>10} {'RSS at end':>11} {'committed':>10} {'msgs/s':>8}  partitions moved")
    for run in runs:
        print(f"  {run.setting:12} {run.peak_mib:7.0f} MiB {run.end_mib:8.0f} MiB {run.committed:10d} {run.rate:8.0f}"
              f"  {run.partitions_moved} of {partitions}")
    for setting in SETTINGS:
        mine = [r for r in runs if r.setting == setting]
        print(f"  {setting:12} peak RSS {min(r.peak_mib for r in mine):.0f}-{max(r.peak_mib for r in mine):.0f} MiB, "
              f"{min(r.rate for r in mine):.0f}-{max(r.rate for r in mine):.0f} msgs/s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=800_000)
    parser.add_argument("--partitions", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    if args.messages < 1 or args.partitions < 1 or args.seconds <= 0 or args.rounds < 1:
        parser.error("--messages, --partitions and --rounds take whole numbers of 1 or more, --seconds a positive number")
    bootstrap = ensure_kafka()
    runs = []
    with tempfile.TemporaryDirectory(prefix="knarr-bench-backlog-") as tmp:
        workdir = Path(tmp)
        (workdir / "handler.py").write_text(HANDLER)
        order = [s for r in range(args.rounds) for s in (list(SETTINGS) if r % 2 == 0 else list(SETTINGS)[::-1])]
        for number, setting in enumerate(order, 1):
            print(f"backlog: run {number} of {len(order)}, {setting} ...", file=sys.stderr, flush=True)
            runs.append(one_run(bootstrap, setting, args.partitions, args.messages, args.seconds, workdir))
    report(runs, args.partitions, args.messages, args.seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
