"""What the race runs and how it is judged (pure: no Kafka, no processes).

A *row* is one workload on one engine under one set of limits. Both engines get the same
messages, the same handler logic (the handler files beside this one) and, in the bounded rows,
the same in-flight limits. Every run's output is checked against what the messages must give
before any figure of it counts: a fast wrong run is not a result.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ENGINES = ("knarr", "drakkar")
W2_PATTERNS = 10  # grep tasks per W2 message (the handlers' PATTERNS)
W2_LINES = 20  # lines per W2 document; each pattern matches W2_LINES / W2_PATTERNS of them


@dataclass(frozen=True)
class Row:
    name: str
    workload: str  # w1 | w2
    title: str
    bounded: bool  # the comparable limits (Limits) instead of each engine's defaults
    persistent: bool = False  # knarr only: tasks run in a long-lived program (executor.persistent)


ROWS = {row.name: row for row in (
    Row("w1-defaults", "w1", "W1 echo, defaults", bounded=False),
    Row("w1-bounded", "w1", "W1 echo, same limits", bounded=True),
    Row("w2-defaults", "w2", "W2 grep ×10 fan-out, defaults", bounded=False),
    Row("w2-bounded", "w2", "W2 grep ×10 fan-out, same limits", bounded=True),
    Row("w1-persistent", "w1", "W1 echo, knarr persistent program, same limits", bounded=True, persistent=True),
)}


@dataclass(frozen=True)
class Limits:
    """The in-flight bounds both engines get in the bounded rows (same keys, same meaning in both).

    The pause threshold is max_executors × backpressure_high_multiplier queued messages; with 1000
    and 4 slots W2 (2,000 messages) never pauses and W1 (20,000) pauses at 4,000 queued — in both
    engines alike (the README's table was measured with these).
    """

    max_executors: int = 4
    window_size: int = 100
    max_poll_records: int = 100
    backpressure_high_multiplier: int = 1000
    backpressure_low_multiplier: int = 4


# --- the messages and what each must give -----------------------------------------------------
def document(i: int) -> str:
    """W2's text: W2_LINES lines, each carrying exactly one of the patterns key0..key9."""
    return "\n".join(f"line {j} of {i} key{j % W2_PATTERNS}" for j in range(W2_LINES)) + "\n"


def message(workload: str, i: int) -> dict:
    return {"i": i, "text": f"hello {i}" if workload == "w1" else document(i)}


def expected(workload: str, i: int) -> dict:
    if workload == "w1":
        return {"i": i, "out": f"hello {i}"}
    return {"i": i, "tasks": W2_PATTERNS, "matches": W2_LINES}


def tasks_per_message(workload: str) -> int:
    return 1 if workload == "w1" else W2_PATTERNS


class WrongOutput(AssertionError):
    """An engine's output does not account for every input exactly once, correctly."""


def check_outputs(workload: str, count: int, outputs: list[dict]) -> None:
    """Raise WrongOutput unless ``outputs`` is exactly one correct record per message 0..count-1."""
    seen: dict[int, int] = {}
    wrong: list[str] = []
    unknown: list[str] = []
    for record in outputs:
        i = record.get("i")
        if not isinstance(i, int) or not 0 <= i < count:
            unknown.append(repr(record)[:120])
            continue
        seen[i] = seen.get(i, 0) + 1
        if record != expected(workload, i):
            wrong.append(f"message {i}: got {record}, expected {expected(workload, i)}")
    missing = [i for i in range(count) if i not in seen]
    duplicated = sorted(i for i, n in seen.items() if n > 1)
    problems = []
    if missing:
        problems.append(f"{len(missing)} of {count} messages have no output (first: {missing[:5]})")
    if duplicated:
        problems.append(f"{len(duplicated)} messages have more than one output (first: {duplicated[:5]})")
    if wrong:
        problems.append(f"{len(wrong)} outputs are wrong ({'; '.join(wrong[:3])})")
    if unknown:
        problems.append(f"{len(unknown)} outputs name no message of this run ({'; '.join(unknown[:3])})")
    if problems:
        raise WrongOutput(f"{len(outputs)} output records for {count} messages: " + "; ".join(problems))


# --- the figures of one run ---------------------------------------------------------------------
@dataclass(frozen=True)
class Figure:
    engine: str
    row: Row
    messages: int
    tasks: int
    seconds: float  # first input produced -> last output produced (Kafka record timestamps)
    cpu_seconds: float  # the worker process's utime + stime over the run, children excluded
    peak_rss_bytes: int  # VmHWM of the worker process
    latencies_ms: list[float] = field(repr=False)  # per message: output record time - input record time
    load: float = 0.0  # the machine's 1-minute load average when the run began (a shared machine)

    @property
    def msgs_per_s(self) -> float:
        return self.messages / self.seconds

    @property
    def tasks_per_s(self) -> float:
        return self.tasks / self.seconds

    @property
    def cpu_us_per_task(self) -> float:
        return self.cpu_seconds / self.tasks * 1e6

    @property
    def rss_mib(self) -> float:
        return self.peak_rss_bytes / 2**20

    def latency_ms(self, quantile: float) -> float:
        return percentile(self.latencies_ms, quantile)


def percentile(values: list[float], quantile: float) -> float:
    """Nearest-rank percentile (quantile in 0..1)."""
    ordered = sorted(values)
    rank = max(1, math.ceil(quantile * len(ordered)))
    return ordered[rank - 1]


def figure(engine: str, row: Row, produced_ms: dict[int, int], outputs: list[tuple[dict, int]],
           cpu_seconds: float, peak_rss_bytes: int, load: float = 0.0) -> Figure:
    """The figures of a checked run: ``produced_ms`` input record times by message, ``outputs``
    (record, output record time) pairs."""
    out_ms = {record["i"]: ts for record, ts in outputs}
    seconds = max(1, max(out_ms.values()) - min(produced_ms.values())) / 1000
    latencies = [out_ms[i] - produced_ms[i] for i in produced_ms]
    count = len(produced_ms)
    return Figure(engine, row, count, count * tasks_per_message(row.workload), seconds, cpu_seconds,
                  peak_rss_bytes, latencies, load)


# --- the configurations -------------------------------------------------------------------------
@dataclass(frozen=True)
class Topics:
    source: str
    output: str
    dlq: str
    group: str


def knarr_config(row: Row, bootstrap: str, topics: Topics, binary: str, limits: Limits,
                 persistent_command: list[str] | None = None) -> dict:
    kafka: dict = {"brokers": bootstrap, "source_topic": topics.source, "consumer_group": topics.group}
    executor: dict = {"binary_path": binary}
    if row.bounded:
        kafka["max_poll_records"] = limits.max_poll_records
        executor |= {"max_executors": limits.max_executors, "window_size": limits.window_size,
                     "backpressure_high_multiplier": limits.backpressure_high_multiplier,
                     "backpressure_low_multiplier": limits.backpressure_low_multiplier}
    if row.persistent:
        if not persistent_command:
            raise ValueError(f"row {row.name} needs the persistent program's command")
        del executor["binary_path"]
        executor["persistent"] = {"command": persistent_command}
    return {
        "kafka": kafka,
        "executor": executor,
        "sinks": {"kafka": {"out": {"topic": topics.output}}},
        "dlq": {"topic": topics.dlq},
        # Observability servers off in both engines: they would bind fixed ports, and neither is
        # what is being compared.
        "metrics": {"enabled": False},
        "logging": {"level": "WARNING", "format": "json"},
    }


def drakkar_config(row: Row, bootstrap: str, topics: Topics, binary: str, limits: Limits, storage: str) -> dict:
    source = {"enabled": True, "topic": topics.source, "consumer_group": topics.group,
              # a fleet-rollout feature (wait for a wall-clock boundary before joining); it only
              # delays the start, which the harness does not time anyway
              "startup_align_enabled": False}
    executor: dict = {"binary_path": binary}
    if row.bounded:
        source["max_poll_records"] = limits.max_poll_records
        executor |= {"max_executors": limits.max_executors, "window_size": limits.window_size,
                     "backpressure_high_multiplier": limits.backpressure_high_multiplier,
                     "backpressure_low_multiplier": limits.backpressure_low_multiplier}
    return {
        "kafka": {"brokers": bootstrap},
        "sources": {"kafka": source},
        "executor": executor,
        "sinks": {"kafka": {"out": {"topic": topics.output}}},
        "dlq": {"topic": topics.dlq},
        "metrics": {"enabled": False},
        "ui": {"enabled": False},  # the debug UI and its flight recorder (a server on a fixed port)
        "storage": {"dir": storage},
        "logging": {"level": "WARNING", "format": "json"},
    }


def handler_spec(engine: str, workload: str) -> str:
    name = "EchoHandler" if workload == "w1" else "GrepHandler"
    return f"{HERE / f'{engine}_{workload}.py'}:{name}"
