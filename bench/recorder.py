"""The flight recorder's cost: the same engine workload with debug off and on, in one run.

Workload (the local Kafka broker, started or reused): a pre-filled topic of 4 partitions, one
/bin/echo task per message (make bench's workload), one Kafka output per message, offsets committed. Each run gets a
topic of its own with the same messages. Runs come in pairs, one off and one on, back to back,
the order alternating (off-on, on-off, ...); each pair gives a cost, and the verdict is the
median of the pairs' costs. Runs of one side spread by 20-40 % on a busy 2-core machine, but
the two runs of a pair see nearly the same machine.

With the recorder on, the config is the spec's defaults (``debug.enabled: true``, port 0, a
fresh ``db_dir``): every event is buffered, written by the recorder's thread every 5 s, and the
debug server listens (no client attached).

    uv run python bench/recorder.py [--messages 8000] [--rounds 8]

Target: throughput with the recorder on within 5 % of off.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))  # for tests.services.kafka (broker start and topic helpers)

from knarr.engine import event_loop  # noqa: E402

from tests.services.kafka import ensure_kafka  # noqa: E402

sys.path.insert(0, str(REPO_ROOT / "bench"))
from clocks import cpu_self  # noqa: E402
from results import add_option as add_json_option  # noqa: E402
from results import write as write_results  # noqa: E402
from rounds import median_interval, places, verdict  # noqa: E402
from workload import BINARY, Figure, engine_run, prefill  # noqa: E402  (make bench's workload and one run of it)

TARGET_COST_PERCENT = 5.0
MESSAGES = 8_000
ROUNDS = 8


@dataclass
class Run(Figure):
    """One run of a pair: what make bench's workload measured, and whether the recorder was on."""

    recorder: bool = False


@dataclass
class RecorderOverhead:
    """Runs in pairs, one off and one on, back to back; the order alternates (off-on, on-off, ...).

    Two runs of the same side spread 20-40 % on a busy 2-core machine, far more than the effect
    measured, and that drift is slow next to a run: the two runs of a pair see nearly the same
    machine. So each pair gives one cost, and the verdict is the median of the pairs' costs.
    """

    messages: int
    runs: list[Run] = field(default_factory=list)
    record_us: float = 0.0
    write_us: float = 0.0

    def pairs(self) -> list[tuple[Run, Run]]:
        """(off, on) of each pair, in run order."""
        pairs = []
        for first, second in zip(self.runs[::2], self.runs[1::2]):
            pairs.append((second, first) if first.recorder else (first, second))
        return pairs

    def costs(self) -> list[float]:
        """Throughput lost with the recorder on, in percent, one figure per pair."""
        return [(1 - on.rate / off.rate) * 100 for off, on in self.pairs()]

    @property
    def cost_percent(self) -> float:
        return statistics.median(self.costs())

    @property
    def cpu_cost_us(self) -> float:
        """Worker CPU per task added by the recorder, median over the pairs."""
        return statistics.median(on.cpu_us - off.cpu_us for off, on in self.pairs())

    def interval(self, draws: int = 10_000) -> tuple[float, float]:
        """Where the median of the pairs' costs lies with 95 % confidence (a bootstrap over the pairs)."""
        return median_interval(self.costs(), draws)

    @property
    def ok(self) -> bool:
        return self.cost_percent <= TARGET_COST_PERCENT

    @property
    def spread_percent(self) -> float:
        """The widest gap between two runs of the same side, relative to the slower one."""
        gaps = [max(rates) / min(rates) - 1 for rates in
                ([r.rate for r in self.runs if r.recorder == side] for side in (False, True)) if len(rates) > 1]
        return max(gaps, default=0.0) * 100

    def data(self) -> dict:
        """The comparison for a bench's --json: every run, each pair's cost, the verdict."""
        low, high = self.interval()
        return {"messages": self.messages, "runs": [run.data() for run in self.runs],
                "costs_percent": self.costs(), "cost_percent": self.cost_percent, "low": low, "high": high,
                "cpu_cost_us": self.cpu_cost_us, "target_percent": TARGET_COST_PERCENT, "met": self.ok,
                "record_us": self.record_us, "write_us": self.write_us}

    def report(self) -> str:
        pairs = self.pairs()
        on_runs = [on for _, on in pairs]
        per_task = statistics.median(r.events / r.count for r in on_runs) if on_runs else 0.0
        lines = [f"flight recorder overhead ({self.messages} messages, one {BINARY} task each, {len(pairs)} pairs of "
                 f"runs, off and on back to back)"]
        costs = self.costs()
        for (off, on), cost in zip(pairs, costs):
            lines.append(f"    off {off.rate:6.0f} tasks/s {off.cpu_us:6.1f} us CPU/task | on {on.rate:6.0f} tasks/s "
                         f"{on.cpu_us:6.1f} us CPU/task, {on.events} events | cost {cost:+5.1f} %")
        shown = ", ".join(f"{c:+.1f}" for c in sorted(costs))
        lines.append(f"  pairs' costs, sorted: {shown} %   (runs of one side spread "
                     f"{self.spread_percent:.0f} % on this machine)")
        low, high = self.interval()
        median_cost = f"{self.cost_percent:+.{places(self.cost_percent, TARGET_COST_PERCENT, 1)}f}"
        lines.append(f"  cost: {median_cost} % throughput (median of the pairs; 95 % bootstrap interval "
                     f"{low:+.1f} to {high:+.1f} %), {self.cpu_cost_us:+.1f} us worker CPU/task   "
                     f"target <= {TARGET_COST_PERCENT:.0f} %   {verdict(self.ok)}")
        if self.record_us:
            lines.append(f"  per event: record() {self.record_us:.2f} us on the event loop, written by the "
                         f"recorder's thread in {self.write_us:.2f} us; {per_task:.1f} events per task -> "
                         f"{per_task * (self.record_us + self.write_us):.1f} us CPU per task")
        return "\n".join(lines)


def event_costs(count: int = 50_000) -> tuple[float, float]:
    """CPU per event in microseconds: ``record()`` on the event loop, and the thread's write of it to SQLite.

    Measured on a recorder of its own with a typical task event; independent of the machine's load,
    unlike the end-to-end figures.
    """
    from knarr.config.models import DebugConfig
    from knarr.debug.recorder import FlightRecorder

    with tempfile.TemporaryDirectory(prefix="knarr-bench-recorder-") as db_dir:
        recorder = FlightRecorder(DebugConfig(enabled=True, db_dir=db_dir, max_buffer=count + 1), "bench")
        recorder._open()
        data = {"exit_code": 0, "args": ["out=x"], "attempt": 1, "pid": 1234, "stdout": "", "stderr": ""}
        started = cpu_self()
        for i in range(count):
            recorder.record("task_finished", 0, None, f"task-{i}", None, 1.0, data)
        record_us = (cpu_self() - started) / count * 1e6
        batch, recorder._buffer = recorder._buffer, recorder._new_buffer()
        started = cpu_self()
        recorder._write(batch)
        write_us = (cpu_self() - started) / count * 1e6
        recorder._close()
    return record_us, write_us


async def _run(bootstrap: str, topic: str, ends: dict[int, int], max_executors: int, recorder: bool,
               db_dir: str) -> Run:
    figure, _ = await engine_run(bootstrap, topic, ends, max_executors,
                                 debug={"enabled": recorder, "port": 0, "db_dir": db_dir}, lag_probe=False)
    return Run(**vars(figure), recorder=recorder)


async def measure_recorder_overhead(bootstrap: str | None = None, messages: int = MESSAGES, rounds: int = ROUNDS,
                                    max_executors: int | None = None, log=None) -> RecorderOverhead:
    """The same workload with the recorder off and on, ``rounds`` pairs of runs."""
    bootstrap = bootstrap or ensure_kafka()
    max_executors = max_executors or 2 * (os.cpu_count() or 1)
    say = log or (lambda text: print(text, file=sys.stderr))
    say("recorder overhead: pre-filling topics ...")
    filled = [prefill(bootstrap, messages) for _ in range(2 * rounds)]
    result = RecorderOverhead(messages)
    for i, (topic, ends) in enumerate(filled):
        recorder = i % 4 in (1, 2)  # off on, on off, off on, ...: a steady drift hits both sides alike
        say(f"recorder overhead: run {i + 1} of {len(filled)}, recorder {'on' if recorder else 'off'} ...")
        # A fresh directory per run: in a shared one, each run's retention also dropped earlier runs' files
        # (the runs' events pass retention_max_events from the third on), a cost no single worker pays.
        with tempfile.TemporaryDirectory(prefix="knarr-bench-recorder-") as db_dir:
            result.runs.append(await _run(bootstrap, topic, ends, max_executors, recorder, db_dir))
    result.record_us, result.write_us = event_costs()
    return result


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=MESSAGES, help="messages (= tasks) per run")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="pairs of runs (one off, one on)")
    parser.add_argument("--max-executors", type=int, default=2 * (os.cpu_count() or 1))
    parser.add_argument("--bootstrap", default="", help="Kafka bootstrap; default: start or reuse the local broker")
    add_json_option(parser)
    args = parser.parse_args()
    result = await measure_recorder_overhead(args.bootstrap or None, args.messages, args.rounds, args.max_executors)
    print(result.report())
    write_results(args.json, result.data())
    return 0  # a MISS is a finding to read, not a crash


if __name__ == "__main__":
    sys.exit(event_loop.run(main()))  # the loop `knarr run` gives a worker
