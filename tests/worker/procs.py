"""Running `knarr run` as real OS processes: config files, start, readiness, faults, logs.

A test opens a ``WorkerFleet`` (a context manager). Every worker it starts gets its own
YAML config and log file under the test's tmp_path; on the way out every worker still
running is killed, and if the test failed the tail of every worker's log is printed, so the
failure report shows what the workers said.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from knarr.supervisor import machine

REPO_ROOT = Path(__file__).resolve().parents[2]
BEHAVE = REPO_ROOT / "tests" / "programs" / "behave"
HANDLERS = REPO_ROOT / "tests" / "programs" / "handlers.py"
TAGGED_HANDLER = f"{HANDLERS}:TaggedHandler"
SCRIPT_HANDLER = f"{HANDLERS}:ScriptHandler"
MARKER_ENV = "HANDLER_TEST_MARKER"  # tests/programs/handlers.py reads it
KNARR = Path(sys.executable).parent / "knarr"  # the console script of this environment


def free_port() -> int:
    """A port free now on every interface for a worker to listen on, below the kernel's ephemeral range
    (knarr.supervisor.machine.free_port says why)."""
    return machine.free_port("0.0.0.0")


def status_kb(pid: int, field: str) -> int | None:
    """A kB field of /proc/<pid>/status (VmRSS, VmHWM, ...), None once the process is gone (or has no such field)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError):
        return None
    return None


def signal_set(status: str, field: str) -> set[int]:
    """The signals a /proc/<pid>/status text lists in a mask field (SigIgn, SigCgt, SigBlk, ...), by number."""
    mask = int(next(line for line in status.splitlines() if line.startswith(f"{field}:")).split()[1], 16)
    return {number for number in range(1, 65) if mask >> (number - 1) & 1}


def wait_until(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.1) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail with ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)  # pacing between polls, bounded by the deadline


@dataclass
class WorkerSpec:
    """The parts of a worker's config the process tests vary."""

    brokers: str
    topic: str
    group: str
    output_topic: str
    max_executors: int = 4
    window_size: int = 100
    max_poll_records: int = 100
    backpressure_high_multiplier: int = 32
    backpressure_low_multiplier: int = 4
    backpressure_delivery_multiplier: int = 64
    drain_timeout_seconds: float = 30
    session_timeout_ms: int = 10_000
    heartbeat_interval_ms: int = 1_000
    log_level: str = "WARNING"
    kafka_extra: dict[str, Any] = field(default_factory=dict)
    kafka_settings: dict[str, Any] = field(default_factory=dict)  # more keys of the kafka section
    executor_extra: dict[str, Any] = field(default_factory=dict)

    @property
    def backpressure_high(self) -> int:
        return self.max_executors * self.backpressure_high_multiplier

    @property
    def backpressure_low(self) -> int:
        return max(1, self.max_executors * self.backpressure_low_multiplier)

    @property
    def delivery_high(self) -> int:
        return self.max_executors * self.backpressure_delivery_multiplier

    def config(self, metrics_port: int) -> dict[str, Any]:
        return {
            "kafka": {
                "brokers": self.brokers, "source_topic": self.topic, "consumer_group": self.group,
                "max_poll_records": self.max_poll_records, "session_timeout_ms": self.session_timeout_ms,
                "heartbeat_interval_ms": self.heartbeat_interval_ms, "extra": self.kafka_extra,
                **self.kafka_settings,
            },
            "executor": {
                "binary_path": str(BEHAVE), "max_executors": self.max_executors, "window_size": self.window_size,
                "backpressure_high_multiplier": self.backpressure_high_multiplier,
                "backpressure_low_multiplier": self.backpressure_low_multiplier,
                "backpressure_delivery_multiplier": self.backpressure_delivery_multiplier,
                "drain_timeout_seconds": self.drain_timeout_seconds, "task_timeout_seconds": 30,
                **self.executor_extra,
            },
            "sinks": {"kafka": {"out": {"topic": self.output_topic}}},
            "metrics": {"enabled": True, "port": metrics_port},
            "logging": {"level": self.log_level, "format": "json"},
        }


class WorkerProcess:
    """One `knarr run` process, its probes port and its log file."""

    def __init__(self, name: str, spec: WorkerSpec, workdir: Path, marker: str, handler: str = TAGGED_HANDLER,
                 args: tuple[str, ...] = ()) -> None:
        self.name = name
        self.port = free_port()
        # The marker is in the config path, so the worker's own command line carries it too.
        self.config_path = workdir / f"{marker}-{name}.yaml"
        self.log_path = workdir / f"{marker}-{name}.log"
        self.config_path.write_text(yaml.safe_dump(spec.config(self.port), sort_keys=False))
        self.argv = [str(KNARR), "run", "--config", str(self.config_path), "--handler", handler, *args]
        self.env = {**os.environ, MARKER_ENV: marker, "WORKER_ID": f"{marker}-{name}", "PYTHONUNBUFFERED": "1",
                    "TMPDIR": str(workdir)}  # what a killed worker leaves there goes with the test's directory
        self.proc: subprocess.Popen | None = None

    def start(self) -> WorkerProcess:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=self.env
            )
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _assert_alive(self) -> None:
        if not self.alive():
            code = self.proc.returncode if self.proc else None
            raise AssertionError(f"worker {self.name} exited with {code}:\n{self.log_tail()}")

    # --- probes ----------------------------------------------------------------------------
    def _get(self, path: str) -> tuple[int, bytes] | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=2) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            return None

    def readiness(self) -> str | None:
        """The /readyz reason when ready, else None."""
        answer = self._get("/readyz")
        if answer is None or answer[0] != 200:
            return None
        return json.loads(answer[1])["reason"]

    def wait_consuming(self, timeout: float = 60) -> str:
        """Wait until the worker has partitions assigned (readiness says 'consuming N partition(s)')."""

        def consuming() -> str | None:
            self._assert_alive()
            reason = self.readiness()
            return reason if reason and reason.startswith("consuming") else None

        return wait_until(consuming, timeout, f"worker {self.name} to consume partitions")

    def metrics(self) -> dict[str, float]:
        """/metrics as {'name{labels}': value} (empty when the worker does not answer)."""
        answer = self._get("/metrics")
        if answer is None or answer[0] != 200:
            return {}
        out = {}
        for line in answer[1].decode().splitlines():
            if line and not line.startswith("#"):
                key, _, value = line.rpartition(" ")
                out[key] = float(value)
        return out

    def rss_kb(self, field: str = "VmRSS") -> int | None:
        """Resident set size (VmRSS; VmHWM for the peak so far), None once the process is gone."""
        return status_kb(self.pid, field)

    # --- faults and shutdown ---------------------------------------------------------------
    def kill(self) -> None:
        """SIGKILL: no drain, no final commit, nothing cleaned up by the worker."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def terminate(self, timeout: float = 90) -> int:
        """SIGTERM (graceful drain); returns the exit code."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"worker {self.name} did not exit within {timeout}s of SIGTERM:\n{self.log_tail()}") from None

    def log_lines(self) -> list[str]:
        try:
            return self.log_path.read_text(errors="replace").splitlines()
        except FileNotFoundError:
            return []

    def log_events(self) -> list[dict[str, Any]]:
        """The worker's JSON log records (lines that are not JSON are skipped)."""
        events = []
        for line in self.log_lines():
            try:
                events.append(json.loads(line))
            except ValueError:
                continue
        return events

    def rejoins(self) -> list[dict[str, Any]]:
        """The worker's warnings that it rejoined its group to hand out partitions no member owned."""
        return [e for e in self.log_events() if "rejoining the group" in e.get("event", "")]

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_lines()[-lines:])


class WorkerFleet:
    """Starts workers for one test and cleans up after it (kill leftovers, print logs on failure)."""

    def __init__(self, spec: WorkerSpec, workdir: Path, marker: str) -> None:
        self.spec = spec
        self.workdir = workdir
        self.marker = marker
        self.workers: list[WorkerProcess] = []

    def start(self, name: str, spec: WorkerSpec | None = None, handler: str = TAGGED_HANDLER,
              args: tuple[str, ...] = ()) -> WorkerProcess:
        worker = WorkerProcess(name, spec or self.spec, self.workdir, self.marker, handler, args)
        self.workers.append(worker.start())
        return worker

    def __enter__(self) -> WorkerFleet:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        for worker in self.workers:
            if worker.alive():
                worker.kill()
        if exc_type is not None:
            for worker in self.workers[-6:]:
                print(f"--- {worker.name} (pid {worker.pid}, exit {worker.proc.returncode}) log tail ---")
                print(worker.log_tail())


def processes_with(marker: str) -> list[tuple[int, str]]:
    """Live processes (other than this one) whose command line contains ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        if marker in cmdline:
            found.append((int(entry.name), cmdline.strip()))
    return found


def alive(pid: int) -> bool:
    """The process runs (a zombie, or a pid that is gone, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as st:
            return st.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def alive_with(marker: str) -> list[int]:
    """Pids of the processes whose command line contains ``marker`` and that still run (zombies left out)."""
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                if marker.encode() in fh.read() and alive(int(pid)):
                    pids.append(int(pid))
        except OSError:
            pass
    return pids


def stdout_memfd_sizes() -> list[int]:
    """Sizes of this process's task stdout memfds (the spawner thread's and the native runner's)."""
    sizes = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith("/memfd:knarr-stdout"):
                sizes.append(os.stat(f"/proc/self/fd/{fd}").st_size)
        except OSError:  # closed meanwhile
            pass
    return sizes


def processes_gone(marker: str, timeout: float) -> list[tuple[int, str]]:
    """Wait up to ``timeout`` for every process tagged ``marker`` to exit; return those still there."""
    deadline = time.monotonic() + timeout
    while (left := processes_with(marker)) and time.monotonic() < deadline:
        time.sleep(0.1)  # pacing between /proc scans, bounded by the deadline
    return left


def outputs_by_kind(messages: list, kind: str) -> list[dict[str, Any]]:
    """The decoded outputs of one kind ('message' summaries or fan-out 'task' outputs)."""
    return [m for m in (msg.json() for msg in messages) if m.get("kind") == kind]


def total_committed(committed: dict[int, int]) -> int:
    return sum(committed.values())


def caught_up(committed: dict[int, int], ends: dict[int, int]) -> bool:
    """Every partition's committed offset has reached its end offset."""
    return all(committed.get(p, 0) >= end for p, end in ends.items())
