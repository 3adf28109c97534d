"""A pod's cores: `knarr run` as people start it, in spawn mode and in persistent mode, each with one
worker process and with ``--processes N``, on the same tiny-task workload and broker, in one run.

make bench and make bench-persistent run the engine inside the bench's own process. Here each row is
the command itself (a config file, bench/echo_handler.py:EchoHandler, the workload of
bench/persistent.py: one echo task per message on 4 partitions, one Kafka output each), so the
supervisor, its worker processes and Kafka's sharing of the partitions among them are all in the
figure. Each pod starts on an empty topic and gets its messages once its /readyz says every worker
process consumes (the group has settled, its partitions shared: a rebalance costs seconds). Its rate
is read in steady state from the group's committed offsets: from the first look that sees RATE_FROM
of the messages committed to the first that sees RATE_TO (the offsets are looked at every
POLL_SECONDS), so neither start-up nor the tail weighs in. Its CPU per task is the
knarr processes' own over that interval (the supervisor and its worker processes, read from
/proc); beside it, over the same interval, what the tasks ran in (spawn mode's task processes, reaped
by the worker processes; persistent mode's programs) and the local broker, so each row says how busy
it kept the cores and each ratio to spawn mode is bounded and taken apart (bench/ceilings.py) as make
bench's are: which share of a miss is CPU per task and which is idle cores. Persistent rows run
PERSISTENT_RUN_FACTOR times spawn mode's messages, so that the intervals last about as long.
Persistent mode runs two programs: bench/echo_task.py (Python, on knarr.task, as make bench runs it) and tests/programs/echo_task.c (the
protocol in C, a program as small as spawn mode's /bin/echo; left out without a C compiler), to
tell what the engine costs a task from what a Python program adds. Spawn mode with ``--processes N`` has no
target: it says whether a second interpreter helps a mode whose task processes fill the cores.

Rounds (``--rounds``) run every row once, back to back, the order alternating; each ratio is the
median of the rounds' (bench/rounds.py), the ``--processes`` one judged against the persistent
target (10x spawn mode's tasks/s on the same machine).

    python bench/processes.py [--messages 20000] [--max-executors 4] [--processes N] [--rounds 3] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import NamedTuple

import yaml

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent))

from ceilings import busy_cores, print_ceilings, taken_apart  # noqa: E402
from clocks import broker_between, broker_cpu_seconds, stat_cpu_and_reaped  # noqa: E402
from confluent_kafka import TopicPartition  # noqa: E402
from persistent import ECHO_PROGRAM, PERSISTENT_RUN_FACTOR, SPAWN_BINARY, TARGET_RATIO  # noqa: E402
from results import add_option as add_json_option  # noqa: E402
from results import write as write_results  # noqa: E402
from rounds import host_pace, judged, nearest_median, pace_text  # noqa: E402
from spawn_floor import build_c  # noqa: E402
from workload import PARTITIONS, WARM_UP_HELP, Figure, warm_up  # noqa: E402

from knarr.kafka import settings  # noqa: E402
from knarr.kafka.clients import close_consumer, open_consumer  # noqa: E402

from tests.services.kafka import create_topic, ensure_kafka, produce_json, unique_name  # noqa: E402
from tests.worker.procs import free_port  # noqa: E402

KNARR = Path(sys.executable).parent / "knarr"  # this environment's console script
HANDLER = f"{BENCH / 'echo_handler.py'}:EchoHandler"
C_ECHO = BENCH.parent / "tests" / "programs" / "echo_task.c"  # the protocol in C: answers "<id>:" and its stdin
RATE_FROM, RATE_TO = 0.1, 0.9  # the steady state: between these shares of the messages committed
POLL_SECONDS = 0.05
RUN_TIMEOUT_SECONDS = 900


C_PROGRAM = "persistent, C program"  # the mode of the rows whose program is tests/programs/echo_task.c


@dataclass(frozen=True)
class Row:
    """One `knarr run` of the workload: its mode and process count, and what its steady state measured."""

    mode: str  # "spawn", "persistent" (bench/echo_task.py, Python on knarr.task) or C_PROGRAM
    processes: int
    tasks: int  # committed between the two looks
    seconds: float
    cpu_seconds: float  # the knarr processes', over the same interval
    tasks_cpu_seconds: float  # what the tasks ran in (task processes or programs), over the same interval
    broker_cpu_seconds: float | None  # the local broker's, over the same interval (None: not this checkout's)

    @property
    def label(self) -> str:
        return f"{self.mode}, " + ("one process" if self.processes == 1 else f"--processes {self.processes}")

    @property
    def rate(self) -> float:
        return self.tasks / self.seconds

    @property
    def cpu_us_per_task(self) -> float:
        return self.cpu_seconds / self.tasks * 1e6

    def figure(self) -> Figure:
        """The row as make bench's figures are, for the ceilings and the taking apart (bench/ceilings.py)."""
        return Figure(self.tasks, self.seconds, self.cpu_seconds, children_cpu_seconds=self.tasks_cpu_seconds,
                      broker_cpu_seconds=self.broker_cpu_seconds)


def pod_config(bootstrap: str, topic: str, group: str, output: str, program: list[str] | None, max_executors: int,
               port: int) -> dict:
    """A pod's config: spawn mode (``program`` None) or persistent mode running ``program``."""
    executor: dict = {"max_executors": max_executors, "task_timeout_seconds": 30}
    if program is None:
        executor["binary_path"] = SPAWN_BINARY
    else:
        executor["persistent"] = {"command": program}
    return {
        "kafka": {"brokers": bootstrap, "source_topic": topic, "consumer_group": group,
                  "session_timeout_ms": 6000, "heartbeat_interval_ms": 500},
        "executor": executor,
        "sinks": {"kafka": {"out": {"topic": output}}},
        "metrics": {"enabled": True, "host": "127.0.0.1", "port": port},
        "logging": {"level": "WARNING", "format": "json"},
    }


class _Look(NamedTuple):
    """What one look at a running pod saw: the time, the messages committed, and CPU seconds so far."""

    at: float
    committed: int
    knarr_cpu: float  # the supervisor's and its worker processes'
    tasks_cpu: float  # what the tasks ran in (pod_cpu_seconds)
    broker_cpu: float | None  # the local broker's (None: not this checkout's)


def _stat(pid: int | str) -> tuple[float, float]:
    return stat_cpu_and_reaped(Path(f"/proc/{pid}/stat"))


def _children(pid: int | str) -> list[str]:
    found = []
    for thread in Path(f"/proc/{pid}/task").iterdir():
        try:
            found += (thread / "children").read_text().split()
        except OSError:
            continue
    return found


def pod_cpu_seconds(pid: int) -> tuple[float, float]:
    """CPU seconds so far of a pod's knarr processes (``pid`` and its children that are knarr worker
    processes), and of what they ran tasks in: the children they reaped (spawn mode's task processes,
    a program replaced) and their live children that are not knarr (the programs, task processes
    running at the look)."""
    own, reaped = _stat(pid)
    knarr, tasks = own, reaped
    workers, others = [], []
    for child in _children(pid):
        try:
            (workers if b"knarr.cli" in Path(f"/proc/{child}/cmdline").read_bytes() else others).append(child)
        except OSError:
            continue
    for worker in workers:
        try:
            own, reaped = _stat(worker)
            others += _children(worker)
        except OSError:
            continue
        knarr, tasks = knarr + own, tasks + reaped
    for other in others:
        try:
            own, reaped = _stat(other)
        except OSError:
            continue  # a task process reaped meanwhile: its CPU is its worker's reaped children's at the next look
        tasks += own + reaped
    return knarr, tasks


def settled(port: int) -> bool:
    """The pod's /readyz says every worker process consumes partitions (one process: "consuming N
    partition(s)"; several: "N worker processes: 0: consuming ...; 1: consuming ...")."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as answer:
            reason = json.loads(answer.read())["reason"]
    except (urllib.error.URLError, OSError, ValueError, KeyError):
        return False
    parts = reason.split(": ", 1)[1].split("; ") if reason.endswith(")") and "worker processes" in reason else [reason]
    return all("consuming" in part for part in parts)


def run_pod(bootstrap: str, mode: str, program: list[str] | None, messages: int, max_executors: int,
            processes: int) -> Row:
    """One `knarr run` on a fresh topic: started, settled (every process consuming), then given the messages;
    measured until RATE_TO of them are committed; then SIGTERM."""
    topic, group, output = unique_name("bench-pod"), unique_name("bench-pod-g"), unique_name("bench-pod-out")
    create_topic(bootstrap, topic, PARTITIONS)
    create_topic(bootstrap, output, 1)
    partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    watcher = open_consumer({**settings.connection(bootstrap), "group.id": group, "enable.auto.commit": False})
    with tempfile.TemporaryDirectory(prefix="knarr-bench-pod-") as tmp:
        config, log = Path(tmp) / "pod.yaml", Path(tmp) / "pod.log"
        port = free_port()
        config.write_text(yaml.safe_dump(pod_config(bootstrap, topic, group, output, program, max_executors, port)))
        argv = [str(KNARR), "run", "--config", str(config), "--handler", HANDLER, "--processes", str(processes)]
        with open(log, "wb") as out:
            pod = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                   env={**os.environ, "WORKER_ID": unique_name("bench-pod")})
        deadline = time.monotonic() + RUN_TIMEOUT_SECONDS

        def check(what: str) -> None:
            if pod.poll() is not None or time.monotonic() > deadline:
                tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
                ended = f"exited {pod.returncode}" if pod.returncode is not None else "timed out"
                raise RuntimeError(f"the {mode} pod (--processes {processes}) {ended} {what}; its log:\n{tail}")

        try:
            while not settled(port):
                check("before every worker process consumed")
                time.sleep(POLL_SECONDS)
            # The messages go in once the group has settled: no rebalance inside the measured interval.
            produce_json(bootstrap, topic, ({"i": i} for i in range(messages)), key_fn=lambda r: str(r["i"]))
            first = last = None
            while last is None:
                check(f"before {RATE_TO:.0%} of {messages} messages were committed")
                committed = sum(max(0, tp.offset) for tp in watcher.committed(partitions, timeout=10))
                look = _Look(time.perf_counter(), committed, *pod_cpu_seconds(pod.pid), broker_cpu_seconds())
                if first is None and committed >= RATE_FROM * messages:
                    first = look
                    if committed >= RATE_TO * messages:
                        raise RuntimeError(f"the {mode} pod had committed {committed} of {messages} messages at the "
                                           "first look: no steady state to measure; give it more (--messages)")
                elif first is not None and committed >= RATE_TO * messages:
                    last = look
                time.sleep(POLL_SECONDS)
        finally:
            close_consumer(watcher)
            if pod.poll() is None:
                pod.send_signal(signal.SIGTERM)
                try:
                    pod.wait(timeout=120)
                except subprocess.TimeoutExpired:
                    pod.kill()
                    pod.wait()
    broker = broker_between(first.broker_cpu, last.broker_cpu)
    return Row(mode, processes, tasks=last.committed - first.committed, seconds=last.at - first.at,
               cpu_seconds=last.knarr_cpu - first.knarr_cpu, tasks_cpu_seconds=last.tasks_cpu - first.tasks_cpu,
               broker_cpu_seconds=broker)


def one_round(bootstrap: str, messages: int, max_executors: int, processes: int, c_program: Path | None,
              reverse: bool) -> dict[str, Row]:
    """Every row once: spawn mode, then persistent mode with the Python program and with the C one (when
    built), each with one process and with ``processes``."""
    programs: list[tuple[str, list[str] | None, int]] = [("spawn", None, messages),
                                                         ("persistent", ECHO_PROGRAM, PERSISTENT_RUN_FACTOR * messages)]
    if c_program is not None:
        programs.append((C_PROGRAM, [str(c_program)], PERSISTENT_RUN_FACTOR * messages))
    plan = [(mode, program, count, n) for mode, program, count in programs for n in (1, processes)]
    rows = [run_pod(bootstrap, mode, program, count, max_executors, n)
            for mode, program, count, n in (plan[::-1] if reverse else plan)]
    return {row.label: row for row in rows}


def row_figures(row: Row) -> dict:
    """One row of one round as data: what was measured, and the per-task figures the table shows."""
    figure = row.figure()
    return {**asdict(row), "label": row.label, "rate": row.rate, "knarr_us": row.cpu_us_per_task,
            "tasks_us": figure.children_us, "broker_us": figure.broker_us,
            "busy_cores": busy_cores(figure)}


def report(rounds: list[dict[str, Row]], processes: int) -> dict:
    """The table, printed; returns its figures: every round's rows, and each ratio's verdict with its bound."""
    labels = list(rounds[0])
    order = ("spawn", "persistent,", C_PROGRAM)
    labels.sort(key=lambda label: (max(i for i, mode in enumerate(order) if label.startswith(mode)),
                                   "--processes" in label))
    cores = os.cpu_count() or 1
    headings = {"tasks/s": 10, "knarr CPU/task": 16, "tasks*": 8, "broker": 8, "busy cores": 12}  # and widths

    def columns(cells: Sequence[str]) -> str:
        """Each cell right-aligned under its heading, always a space before it: a wide figure (a slow
        machine's thousands of microseconds) pushes the row right instead of running into its neighbour."""
        return "".join(" " + cell.rjust(width - 1) for cell, width in zip(cells, headings.values(), strict=True))

    print(f"\n  {'':40}{columns(list(headings))}   (each round: tasks/s)")
    for label in labels:
        rows = [r[label] for r in rounds]
        middle = sorted(rows, key=lambda row: row.rate)[len(rows) // 2]
        each = ", ".join(f"{row.rate:,.0f}" for row in rows)
        shown = row_figures(middle)
        broker = "" if shown["broker_us"] is None else f"{shown['broker_us']:,.0f} us"
        cells = (f"{shown['rate']:,.0f}", f"{shown['knarr_us']:,.0f} us", f"{shown['tasks_us']:,.0f} us", broker,
                 f"{shown['busy_cores']:.2f} of {cores}")
        print(f"  {label:40}{columns(cells)}   ({each})")
    print("  (the round of the median rate; tasks*: CPU per task of what the tasks ran in, spawn mode's task processes "
          "or persistent mode's programs; broker: the local broker's; busy cores: the three together)")
    spawn = "spawn, one process"
    figures: dict = {"rounds": [{label: row_figures(row) for label, row in r.items()} for r in rounds], "ratios": {}}
    print()
    for mode in ("persistent", C_PROGRAM):
        for label in (f"{mode}, one process", f"{mode}, --processes {processes}"):
            if label in rounds[0]:
                ratios = [r[label].rate / r[spawn].rate for r in rounds]
                name = f"{label} / {spawn}"
                figures["ratios"][name] = judged(name, ratios, TARGET_RATIO, 1, "x", f"{TARGET_RATIO:g}x")
                nearest = nearest_median(ratios)
                figures["ratios"][name]["bound"] = {"round": nearest, **bounded(rounds[nearest], label, spawn)}
    spawn_n = f"spawn, --processes {processes}"
    ratios = sorted(r[spawn_n].rate / r[spawn].rate for r in rounds)
    figures["ratios"][f"{spawn_n} / {spawn}"] = {"values": ratios}
    print(f"  {spawn_n} / spawn, one process: {', '.join(f'{x:.2f}x' for x in ratios)} (the rounds, sorted; no target: "
          "spawn mode's task processes use every core already, one interpreter bounds persistent mode)")
    return figures


def bounded(round_: dict[str, Row], label: str, spawn: str) -> dict:
    """Under a ratio's verdict, for the round nearest its median: what the cores allowed the pod, from the
    CPU its tasks cost (knarr's, the program's, the broker's), and the ratio taken apart into CPU per task
    and busy cores (bench/ceilings.py; make bench prints the same for one worker). Returns the round's
    ratio, its ceilings and the taking apart (these two empty when the broker's CPU is not known)."""
    pod, spawned = round_[label].figure(), round_[spawn].figure()
    found: dict = {"ratio": pod.rate / spawned.rate, "ceilings": {}, "apart": {}}
    if pod.broker_cpu_seconds is None or spawned.broker_cpu_seconds is None:
        print("      (no bound: the broker's CPU is not known, not this checkout's broker)")
        return found
    assert pod.broker_us is not None
    print(f"  {'    its median round, CPU per task: knarr, program, broker':58}"
          f"{pod.cpu_us:>5.0f}, {pod.children_us:.0f}, {pod.broker_us:.0f} us")
    found["ceilings"] = print_ceilings("program", pod.children_us, pod.cpu_us, pod.broker_us, spawned.rate,
                                       "{:.1f} x spawn mode")
    found["apart"] = taken_apart(pod, spawned, "the pod", "spawn mode")
    return found


async def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--messages", type=int, default=20_000, help="spawn mode's messages per run (persistent: x5)")
    p.add_argument("--max-executors", type=int, default=2 * (os.cpu_count() or 1))
    p.add_argument("--processes", type=int, default=os.cpu_count() or 2, help="the --processes row's N")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--warm-up-messages", type=int, default=4_000, help=WARM_UP_HELP)
    p.add_argument("--bootstrap", default=None, help="a running broker (default: the local one, started if needed)")
    add_json_option(p)
    args = p.parse_args()
    bootstrap = args.bootstrap or ensure_kafka()
    header = await warm_up(bootstrap, args.warm_up_messages, args.max_executors)
    if header:
        print(header)
    paces = host_pace()
    print(f"`knarr run` pods on {os.cpu_count()} CPU(s), max_executors {args.max_executors}: spawn mode over "
          f"{args.messages} messages, persistent over {PERSISTENT_RUN_FACTOR * args.messages}; rates between "
          f"{RATE_FROM:.0%} and {RATE_TO:.0%} committed; {args.rounds} round(s); {pace_text(paces)}", flush=True)
    with tempfile.TemporaryDirectory(prefix="knarr-bench-pod-c-") as built:
        c_program = build_c(C_ECHO, Path(built) / "echo_task")
        if c_program is None:
            print("  no C compiler (cc or gcc): the C program's rows are left out", flush=True)
        rounds = []
        for number in range(args.rounds):
            print(f"round {number + 1} of {args.rounds} ...", flush=True)
            rounds.append(one_round(bootstrap, args.messages, args.max_executors, args.processes, c_program,
                                    reverse=number % 2 == 1))
    figures = report(rounds, args.processes)
    after = host_pace()
    print(f"  after the rounds: {pace_text(after)}")
    write_results(args.json, {"cpus": os.cpu_count(), "pace_ns": {"before": paces, "after": after}, **figures})
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
