"""knarr against Drakkar on the same broker, the same messages and the same handler logic.

    make bench-compare [BENCH_ARGS="--messages 5000 --rows w1-bounded,w2-bounded"]
    .venv/bin/python bench/compare/race.py --drakkar-python PY [--engines knarr,drakkar] ...

Workloads (the handlers beside this file, one per engine per workload):
  W1  one /bin/echo task per message, its stdout to a Kafka sink            (--messages, 20,000)
  W2  ten `grep -c` tasks per message (fan-out), one aggregate per message   (--w2-messages, 2,000)
Each runs with the engine's defaults and with the same limits in both (rows.Limits), and W1
once more on knarr with a persistent task program (echo_task.py, executor.persistent).

Before the rows, untimed runs of knarr's engine in this process warm the broker (one just started
is still compiling its hot paths, which the first row would pay; --warm-up-messages, 0: none).
Every run: fresh topics; the worker is a process of its own (knarr run / drakkar_run.py); once a
warm-up message has made it through, the harness produces all messages at once and reads the
output topic back. Measured from outside:
  msgs/s, tasks/s   messages / (last output record time - first input record time)
  CPU/task          utime + stime of the worker process (/proc/PID/stat; children excluded)
  peak RSS          VmHWM of the worker process
  p50/p99 latency   output record time - input record time, per message (with all messages
                    produced at once this is mostly time spent queued: a saturation latency)
A run counts only when its output holds exactly one correct record per message (rows.check_outputs).
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
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
sys.path.insert(0, str(REPO_ROOT))  # tests.services.kafka: the broker and topic helpers
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))  # bench/clocks.py and bench/workload.py: make bench's CPU clocks and warm-up

from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition  # noqa: E402
from knarr.kafka.clients import close_consumer, close_producer, open_consumer, open_producer, shared_admin  # noqa: E402

import report  # noqa: E402
from clocks import stat_cpu_seconds  # noqa: E402
from rows import (ENGINES, ROWS, Figure, Limits, Row, Topics, WrongOutput, check_outputs, drakkar_config,  # noqa: E402
                  figure, handler_spec, knarr_config, message)
from workload import WARM_UP_HELP, warm_up  # noqa: E402

from tests.services.kafka import create_topic, ensure_kafka, unique_name  # noqa: E402
from tests.worker.procs import status_kb  # noqa: E402

PARTITIONS = 4
WARMUP = -1  # the warm-up message's number: its output says the worker is consuming
START_TIMEOUT = 180.0  # worker start to warm-up output (the machine may be busy)
STALL_TIMEOUT = 180.0  # longest wait for the next output record before the run is called stuck
STOP_TIMEOUT = 60.0
PROGRESS_SECONDS = 30.0


class RunFailed(RuntimeError):
    """A run that gives no figure: the worker died, stalled, or produced wrong output."""


# --- the worker process, seen from outside ----------------------------------------------------
def process_cpu_seconds(pid: int) -> float:
    """utime + stime of the process (all its threads); its children are not in these fields."""
    return stat_cpu_seconds(Path(f"/proc/{pid}/stat"))


def peak_rss_bytes(pid: int) -> int:
    peak_kb = status_kb(pid, "VmHWM")
    if peak_kb is None:
        raise RunFailed(f"no VmHWM in /proc/{pid}/status")
    return peak_kb * 1024


@dataclass
class Worker:
    engine: str
    proc: subprocess.Popen
    log_path: Path

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError as exc:
            return f"(no log: {exc})"

    def stop(self) -> int:
        """SIGTERM, then SIGKILL after STOP_TIMEOUT; the exit code."""
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        return self.proc.wait()


def start_worker(engine: str, row: Row, config: dict, workdir: Path, args: argparse.Namespace) -> Worker:
    config_path = workdir / "config.yaml"
    config_path.write_text(json.dumps(config, indent=1))  # JSON is YAML
    spec = handler_spec(engine, row.workload)
    if engine == "knarr":
        knarr = Path(args.knarr_python).parent / "knarr"  # the CLI of the venv that python is in
        argv = [str(knarr), "run", "--config", str(config_path), "--handler", spec, "--no-progress"]
    else:
        argv = [args.drakkar_python, str(HERE / "drakkar_run.py"), str(config_path), spec]
    # The config file is the whole configuration: no override from this shell's KNARR_* or DK_* variables.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KNARR_", "DK_"))}
    log_path = workdir / "worker.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=workdir,
                                env=env)
    return Worker(engine, proc, log_path)


# --- Kafka, from outside ----------------------------------------------------------------------
class Producer:
    """Produces a run's messages and keeps each one's record time (CreateTime, set at produce())."""

    def __init__(self, bootstrap: str) -> None:
        self.producer = open_producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
        self.times_ms: dict[int, int] = {}
        self.errors: list[str] = []

    def send(self, topic: str, workload: str, numbers: range | list[int]) -> None:
        times, errors = self.times_ms, self.errors  # plain values for the callbacks, never self

        def delivered(err, msg) -> None:
            if err is not None:
                errors.append(str(err))
            else:
                times[json.loads(msg.value())["i"]] = msg.timestamp()[1]

        for i in numbers:
            value = json.dumps(message(workload, i), separators=(",", ":")).encode()
            while True:
                try:
                    self.producer.produce(topic, value=value, key=str(i).encode(), on_delivery=delivered)
                    break
                except BufferError:
                    self.producer.poll(0.05)  # local queue full: serve delivery reports, then retry
            self.producer.poll(0)
        if self.producer.flush(60) or self.errors:
            raise RunFailed(f"could not produce the messages to {topic}: {self.errors[:3] or 'flush timed out'}")

    def close(self) -> None:
        close_producer(self.producer)


class OutputReader:
    """Reads the output topic from its beginning: (record, record time) pairs."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.consumer = open_consumer({"bootstrap.servers": bootstrap, "group.id": unique_name("bench-compare-read"),
                                       "enable.auto.commit": False, "auto.offset.reset": "earliest"})
        self.consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        self.records: list[tuple[dict, int]] = []
        self.numbers: set[int] = set()

    def read(self, timeout: float) -> int:
        """Whatever arrives within ``timeout``; how many records that was."""
        batch = self.consumer.consume(num_messages=2000, timeout=timeout)
        for msg in batch:
            if msg.error() is not None:
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    continue
                raise RunFailed(f"reading the output topic: {msg.error()}")
            record = json.loads(msg.value())
            self.records.append((record, msg.timestamp()[1]))
            self.numbers.add(record.get("i"))
        return len(batch)

    def close(self) -> None:
        close_consumer(self.consumer)


def wait_for(worker: Worker, reader: OutputReader, done, timeout: float, what: str, total: int = 0) -> None:
    """Read outputs until ``done()``; RunFailed if the worker dies or nothing arrives for ``timeout``."""
    last_progress = last_said = time.monotonic()
    while not done():
        if not worker.alive():
            raise RunFailed(f"{worker.engine} worker exited ({worker.proc.returncode}) {what}:\n{worker.log_tail()}")
        if reader.read(0.2):
            last_progress = time.monotonic()
            if total and last_progress - last_said >= PROGRESS_SECONDS:
                print(f"  ... {len(reader.numbers)} of {total} messages answered", file=sys.stderr, flush=True)
                last_said = last_progress
        elif time.monotonic() - last_progress > timeout:
            raise RunFailed(f"{worker.engine} worker produced no output for {timeout:.0f}s {what} "
                            f"({len(reader.numbers)} messages answered):\n{worker.log_tail()}")


def delete_topics(bootstrap: str, topics: Topics) -> None:
    """A run's topics go when it is over (the broker is shared); a failure to delete is only said."""
    names = [topics.source, topics.output, topics.dlq]
    futures = shared_admin({"bootstrap.servers": bootstrap}).delete_topics(names, request_timeout=30)
    for name, future in futures.items():
        try:
            future.result(timeout=30)
        except Exception as exc:  # noqa: BLE001 - cleanup only; the run's figures stand
            print(f"  note: topic {name} not deleted: {exc}", file=sys.stderr)


# --- one run -----------------------------------------------------------------------------------
def run(engine: str, row: Row, count: int, args: argparse.Namespace, bootstrap: str) -> Figure:
    prefix = f"bench-compare-{row.name}-{engine}"
    topics = Topics(unique_name(prefix), unique_name(prefix + "-out"), unique_name(prefix + "-dlq"),
                    unique_name(prefix + "-g"))
    create_topic(bootstrap, topics.source, PARTITIONS)
    create_topic(bootstrap, topics.output, 1)
    create_topic(bootstrap, topics.dlq, 1)
    binary = args.echo if row.workload == "w1" else args.grep
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench-compare-") as tmp:
        workdir = Path(tmp)
        if engine == "knarr":
            persistent = [args.knarr_python, str(HERE / "echo_task.py")] if row.persistent else None
            config = knarr_config(row, bootstrap, topics, binary, args.limits, persistent)
        else:
            config = drakkar_config(row, bootstrap, topics, binary, args.limits, str(workdir / "storage"))
        producer = Producer(bootstrap)
        reader = OutputReader(bootstrap, topics.output)
        worker = start_worker(engine, row, config, workdir, args)
        try:
            producer.send(topics.source, row.workload, [WARMUP])
            wait_for(worker, reader, lambda: WARMUP in reader.numbers, START_TIMEOUT, "before the warm-up message's output")
            reader.records.clear()
            reader.numbers.clear()
            producer.times_ms.clear()
            cpu_before = process_cpu_seconds(worker.proc.pid)
            producer.send(topics.source, row.workload, range(count))
            wait_for(worker, reader, lambda: len(reader.numbers) >= count, STALL_TIMEOUT,
                     f"after {count} messages were produced", total=count)
            cpu = process_cpu_seconds(worker.proc.pid) - cpu_before
            rss = peak_rss_bytes(worker.proc.pid)
            while reader.read(1.0):  # anything written after the last new message: duplicates, strays
                pass
        finally:
            code = worker.stop()
            reader.close()
            producer.close()
            delete_topics(bootstrap, topics)
        try:
            check_outputs(row.workload, count, [record for record, _ in reader.records])
        except WrongOutput as exc:
            raise RunFailed(f"{engine} gave wrong output on {row.name}: {exc}\n{worker.log_tail()}") from None
        if code not in (0, -signal.SIGTERM):
            print(f"  note: the {engine} worker exited {code} after the run (outputs were complete)", file=sys.stderr)
    return figure(engine, row, dict(producer.times_ms), reader.records, cpu, rss, load)


# --- the command line ----------------------------------------------------------------------------
def csv(choices):
    def parse(text: str) -> list[str]:
        items = [item.strip() for item in text.split(",") if item.strip()]
        unknown = [item for item in items if item not in choices]
        if unknown or not items:
            raise argparse.ArgumentTypeError(f"{text!r}: expected a comma-separated list of {', '.join(choices)}")
        return items
    return parse


def whole_number(least: int, name: str):
    """An argument type: a whole number from ``least`` to 1,000,000 (``name``: what argparse calls it
    when the text is no number at all)."""
    def parse(text: str) -> int:
        value = int(text)
        if not least <= value <= 1_000_000:
            raise argparse.ArgumentTypeError(f"{text}: expected a whole number from {least} to 1,000,000")
        return value
    parse.__name__ = name
    return parse


positive, nonnegative = whole_number(1, "positive"), whole_number(0, "nonnegative")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engines", type=csv(ENGINES), default=list(ENGINES), help="default: knarr,drakkar")
    parser.add_argument("--rows", type=csv(tuple(ROWS)), default=list(ROWS), help=f"default: {','.join(ROWS)}")
    parser.add_argument("--messages", type=positive, default=20_000, help="W1 messages (default 20000)")
    parser.add_argument("--w2-messages", type=positive, default=2_000, help="W2 messages (default 2000; 10 tasks each)")
    parser.add_argument("--max-executors", type=positive, default=Limits.max_executors,
                        help=f"pool slots in the same-limits rows (default {Limits.max_executors})")
    parser.add_argument("--drakkar-python", default="", help="Python of the Drakkar venv (bench/compare/drakkar_venv.sh)")
    parser.add_argument("--knarr-python", default=sys.executable,
                        help="Python of a venv with knarr installed (default: this one's); make bench-compare passes "
                             "one on Drakkar's interpreter (bench/compare/knarr_venv.sh)")
    parser.add_argument("--bootstrap", default="", help="Kafka bootstrap; default: start or reuse the local broker")
    parser.add_argument("--echo", default="/bin/echo")
    parser.add_argument("--grep", default="/usr/bin/grep" if Path("/usr/bin/grep").exists() else "/bin/grep")
    parser.add_argument("--warm-up-messages", type=nonnegative, default=4_000,
                        help=WARM_UP_HELP + "; knarr's engine in this process, on the same broker as the rows")
    parser.add_argument("--markdown", default="", help="also write the table and machine description to this file")
    args = parser.parse_args(argv)
    if "drakkar" in args.engines and not args.drakkar_python:
        parser.error("--drakkar-python is needed to run Drakkar (make bench-compare finds it; "
                     "or pass --engines knarr)")
    args.limits = Limits(max_executors=args.max_executors)
    return args


def interpreter(args: argparse.Namespace, engine: str) -> str:
    """The version and path of the interpreter ``engine`` runs on (its venv's base Python)."""
    python = args.knarr_python if engine == "knarr" else args.drakkar_python
    found = subprocess.run([python, "-c", "import platform, sys; print(platform.python_version(), sys._base_executable)"],
                           capture_output=True, text=True, check=True).stdout.split()
    return f"Python {found[0]} ({found[1]})"


def planned(args: argparse.Namespace) -> list[tuple[Row, str]]:
    """(row, engine) in the order they run; the persistent row is knarr's alone."""
    return [(ROWS[name], engine) for name in args.rows for engine in args.engines
            if not (ROWS[name].persistent and engine != "knarr")]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # Stopped from outside, still stop the worker of the run in progress (the `finally` in run()).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    plan = planned(args)
    if not plan:
        print("bench-compare: nothing to run (the persistent row is knarr's alone)", file=sys.stderr)
        return 2
    bootstrap = args.bootstrap or ensure_kafka()
    # The first row would otherwise run on a broker still compiling its hot paths.
    warmed = asyncio.run(warm_up(bootstrap, args.warm_up_messages, args.limits.max_executors))
    machine = report.Machine.now()
    figures: list[Figure] = []
    failures: list[str] = []
    started = time.monotonic()
    for row, engine in plan:
        count = args.messages if row.workload == "w1" else args.w2_messages
        print(f"bench-compare: {row.name} on {engine}, {count} messages ...", file=sys.stderr, flush=True)
        try:
            result = run(engine, row, count, args, bootstrap)
        except RunFailed as exc:
            failures.append(f"{row.name} on {engine}: {exc}")
            print(f"bench-compare: FAILED: {exc}", file=sys.stderr, flush=True)
            continue
        figures.append(result)
        print(f"  {result.msgs_per_s:.0f} msg/s, {result.cpu_us_per_task:.0f} µs CPU/task", file=sys.stderr, flush=True)
    text = report.render(figures, machine.finish(), args, time.monotonic() - started,
                         {engine: interpreter(args, engine) for engine in args.engines}, warmed)
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text)
    for failure in failures:
        print(f"\nbench-compare: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
