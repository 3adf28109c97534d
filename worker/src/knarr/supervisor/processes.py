"""The supervisor's I/O: starting the worker processes, watching them, stopping them, and the pod's probes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import httpx
from prometheus_client import CollectorRegistry, Counter, Gauge, ProcessCollector, generate_latest

from knarr.config.root import KnarrConfig
from knarr.errors import ExitCode, UnavailableError
from knarr.observability.health import STALE_AFTER_SECONDS, HealthServer
from knarr.observability.logging import configure_logging, get_logger
from knarr.observability.termination import Reason, write_termination_message
from knarr.runtime.backoff import retry_delay
from knarr.supervisor.exposition import merged
from knarr.supervisor.machine import free_port
from knarr.supervisor.outcome import Ended, ended_by_itself, signal_name, stopped
from knarr.supervisor.plan import LOOPBACK, Member
from knarr.supervisor.scratch import ScratchDir

POLL_SECONDS = 1.0  # how often each process's /readyz and /healthz are asked
ASK_TIMEOUT_SECONDS = 2.0  # one answer of a process's probe server
RESTART_BASE_SECONDS = 0.5  # a process a signal killed starts again after this, doubling (with jitter)...
RESTART_MAX_SECONDS = 30.0  # ...up to this,
STEADY_SECONDS = 60.0  # and from the base again once it ran this long

log = get_logger(component="supervisor")


@dataclass(slots=True)
class WorkerProcess:
    """One worker process as the supervisor knows it: the current one of its line of restarts."""

    member: Member
    termination_log: str
    proc: asyncio.subprocess.Process | None = None
    port: int = 0
    started: float = 0.0
    restarts: int = 0
    failures_in_row: int = 0
    exit_code: int | None = None
    ready: tuple[bool, str] = (False, "starting")
    unhealthy: str | None = None  # why its /healthz says it cannot go on, if it does
    answered: float | None = None  # when its /healthz last answered
    up: bool = False  # its /metrics answered the last scrape

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.returncode is None


class Supervisor:
    """Runs ``members`` as worker processes (``command`` each, with its environment) until stopped."""

    def __init__(self, config: KnarrConfig, members: Sequence[Member], command: Sequence[str],
                 config_path: str | None, env: Mapping[str, str] | None = None) -> None:
        self.config = config
        self.command = list(command)
        self.config_path = config_path
        self.base_env = dict(os.environ if env is None else env)
        try:  # each process's termination message is written here, for the pod's own
            self._scratch = ScratchDir()
        except OSError as exc:
            raise UnavailableError(f"cannot make a directory for the worker processes' exit reasons under "
                                   f"{tempfile.gettempdir()}: {exc.strerror or exc}; point TMPDIR at a writable "
                                   "directory (the operator's pods have /tmp)") from None
        self.processes = [WorkerProcess(m, os.path.join(self._scratch.path, f"process-{m.index}.termination"))
                          for m in members]
        self._stopping = False
        self._stop = asyncio.Event()
        self._cause: tuple[WorkerProcess, int, str] | None = None  # the process whose own exit stopped the rest
        self.registry = CollectorRegistry(auto_describe=True)
        ProcessCollector(registry=self.registry)
        Gauge("knarr_worker_processes", "Worker processes this supervisor runs (the processes setting)",
              registry=self.registry).set(len(members))
        self._up = Gauge("knarr_worker_process_up", "1 when the worker process answered this scrape of /metrics",
                         ["process"], registry=self.registry)
        self._restarts = Counter("knarr_worker_process_restarts_total",
                                 "Worker processes started again after a signal killed them", ["process"],
                                 registry=self.registry)
        for p in self.processes:
            self._up.labels(str(p.member.index)).set(0)
            self._restarts.labels(str(p.member.index))

    # --- the run -------------------------------------------------------------------------------
    async def run(self) -> int:
        try:
            return await self._run()
        finally:
            self._scratch.release()  # after _exit() has read the processes' termination messages

    async def _run(self) -> int:
        configure_logging(self.config.logging.level, self.config.logging.format)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop, sig.name)
        server = None
        if self.config.metrics.enabled:
            server = HealthServer(self.config.metrics.port, self.readiness, host=self.config.metrics.host,
                                  failure=self.failure, exposition=self.exposition)
            await server.start()
            log.info("probes listening", host=self.config.metrics.host, port=server.port)
        if self._scratch.swept:
            log.info("removed scratch directories that killed supervisors left", paths=self._scratch.swept)
        log.info("starting worker processes", processes=len(self.processes),
                 max_executors=[p.member.max_executors for p in self.processes])
        async with httpx.AsyncClient(timeout=ASK_TIMEOUT_SECONDS) as self._client:
            poller = asyncio.create_task(self._poll())
            try:
                await asyncio.gather(*(self._keep(p) for p in self.processes))
            finally:
                poller.cancel()
                if server is not None:
                    await server.stop()
        return self._exit()

    def stop(self, why: str = "") -> None:
        """Stop every process (SIGTERM: each drains and commits). Asked again (a second signal), each is asked again."""
        if why:
            log.info("stop requested; passing it to the worker processes", signal=why)
        self._stopping = True
        self._stop.set()
        for p in self.processes:
            if p.running:
                with contextlib.suppress(ProcessLookupError):
                    p.proc.send_signal(signal.SIGTERM)

    async def _keep(self, p: WorkerProcess) -> None:
        """Run one worker process, and again after a signal killed it, until the supervisor stops."""
        while not self._stopping:
            if not await self._start(p):
                return
            code = await p.proc.wait()
            p.exit_code, p.ready, p.answered, p.unhealthy, p.up = code, (False, "exited"), None, None, False
            if self._stopping:
                log.info("worker process stopped", process=p.member.index, pid=p.proc.pid, exit_code=code)
                return
            if code >= 0:
                self._exited_by_itself(p, code, _termination_line(p.termination_log))
                return
            ran = time.monotonic() - p.started
            p.failures_in_row = 1 if ran >= STEADY_SECONDS else p.failures_in_row + 1
            delay = retry_delay(p.failures_in_row, RESTART_BASE_SECONDS, RESTART_MAX_SECONDS)
            p.restarts += 1
            self._restarts.labels(str(p.member.index)).inc()
            name = signal_name(-code)
            log.warning("worker process killed by a signal; starting it again (its partitions go to the others "
                        "meanwhile, its uncommitted messages are replayed)", process=p.member.index,
                        pid=p.proc.pid, signal=name, ran_seconds=round(ran, 1), restart_in_seconds=round(delay, 2),
                        restarts=p.restarts)
            p.ready = (False, f"restarting after {name} ({p.restarts} restart(s))")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), delay)

    async def _start(self, p: WorkerProcess) -> bool:
        p.port = free_port(LOOPBACK)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(p.termination_log)
        env = {**self.base_env, **p.member.env(self.config, p.port, os.getpid(), p.termination_log, self.config_path)}
        try:
            # A session of its own: a terminal's Ctrl-C or tini -g reaches the supervisor, which passes it on once.
            p.proc = await asyncio.create_subprocess_exec(*self.command, env=env, stdin=asyncio.subprocess.DEVNULL,
                                                          start_new_session=True)
        except OSError as exc:
            self._exited_by_itself(p, ExitCode.FATAL, f"{Reason.FATAL}: cannot start {self.command[0]}: {exc}")
            return False
        p.started, p.exit_code, p.ready = time.monotonic(), None, (False, "starting")
        log.info("worker process started", process=p.member.index, pid=p.proc.pid, name=p.member.name,
                 max_executors=p.member.max_executors, probe_port=p.port)
        if self._stopping:  # a stop came while it was being started
            with contextlib.suppress(ProcessLookupError):
                p.proc.send_signal(signal.SIGTERM)
        return True

    def _exited_by_itself(self, p: WorkerProcess, code: int, line: str) -> None:
        log.error("worker process exited by itself; stopping the others", process=p.member.index,
                  exit_code=code, reason=line or "(none given)")
        if self._cause is None:
            self._cause = (p, code, line)
        self.stop()

    def _exit(self) -> int:
        """The pod's exit code, with its termination message."""
        if self._cause is not None:
            p, code, line = self._cause
            end = ended_by_itself(Ended(p.member.index, code, line))
        else:
            end = stopped([Ended(p.member.index, p.exit_code, _termination_line(p.termination_log))
                           for p in self.processes if p.exit_code is not None])
        if end.reason is not None:
            write_termination_message(end.reason, end.detail)
        return end.code

    # --- the pod's probes ---------------------------------------------------------------------
    def readiness(self) -> tuple[bool, str]:
        if self._stopping:
            return False, "shutting down"
        waiting = [f"process {p.member.index}: {p.ready[1]}" for p in self.processes if not p.ready[0]]
        if waiting:
            return False, "; ".join(waiting)
        return True, f"{len(self.processes)} worker processes: " + "; ".join(
            f"{p.member.index}: {p.ready[1]}" for p in self.processes)

    def failure(self) -> str | None:
        for p in self.processes:
            if p.running and p.unhealthy is not None:
                return f"worker process {p.member.index} (pid {p.proc.pid}): {p.unhealthy}"
        return None

    async def exposition(self) -> bytes:
        running = [p for p in self.processes if p.running]
        texts = await asyncio.gather(*(self._ask(p, "/metrics") for p in running))
        for p, answer in zip(running, texts):
            p.up = answer is not None and answer[0] == 200
            self._up.labels(str(p.member.index)).set(1 if p.up else 0)
        for p in self.processes:
            if not p.running:
                self._up.labels(str(p.member.index)).set(0)
        own = generate_latest(self.registry).decode()
        return merged([("supervisor", own)] + [(str(p.member.index), answer[1]) for p, answer in zip(running, texts)
                                               if answer is not None and answer[0] == 200])

    async def _poll(self) -> None:
        while True:
            await asyncio.gather(*(self._probe(p) for p in self.processes if p.running))
            await asyncio.sleep(POLL_SECONDS)

    async def _probe(self, p: WorkerProcess) -> None:
        ready, alive = await asyncio.gather(self._ask(p, "/readyz"), self._ask(p, "/healthz"))
        if not p.running:
            return
        if ready is not None:
            p.ready = (ready[0] == 200, _field(ready[1], "reason") or f"/readyz answered {ready[0]}")
        now = time.monotonic()
        if alive is not None:
            p.answered = now
            p.unhealthy = None if alive[0] == 200 else (_field(alive[1], "failed") or "its event loop stopped beating")
        elif p.answered is not None and now - p.answered > STALE_AFTER_SECONDS:
            p.unhealthy = f"its probe server has not answered for {now - p.answered:.0f} s (event loop blocked?)"

    async def _ask(self, p: WorkerProcess, path: str) -> tuple[int, str] | None:
        try:
            answer = await self._client.get(f"http://{LOOPBACK}:{p.port}{path}")
        except httpx.HTTPError:
            return None
        return answer.status_code, answer.text


def run_supervised(config: KnarrConfig, members: Sequence[Member], handler_spec: str, config_path: str | None) -> int:
    """``knarr run`` as the supervisor of ``members``: each a ``knarr run`` of the same config and handler."""
    command = [sys.executable, "-m", "knarr.cli", "run", "--no-progress", "--handler", handler_spec]
    path = os.path.abspath(config_path) if config_path else None
    return asyncio.run(Supervisor(config, members, command, path).run())


def _termination_line(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def _field(body: str, key: str) -> str:
    try:
        value = json.loads(body).get(key)
    except (ValueError, AttributeError):
        return ""
    return str(value) if value is not None else ""
