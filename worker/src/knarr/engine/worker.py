"""The worker: wires source, processors, pool, sinks and probes together, and shuts down cleanly.

Read top to bottom: startup, the poll loop (backpressure, commits, dispatch), partition
assignment and revocation, then shutdown.
"""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import sys
import threading
import time
from typing import Any

from knarr.api.handler import BaseHandler, periodic_methods, ready_arguments
from knarr.api.messages import by_partition
from knarr.cache.handler_cache import HandlerCache, attach_cache
from knarr.config.librdkafka import ConsumerSettingsError, check_consumer_settings
from knarr.config.loading import ConfigError
from knarr.config.root import KnarrConfig
from knarr.engine.backpressure import Flow, Watermarks, decide_flow, held_load, hold_ends
from knarr.engine.containment import seal_inherited_fds
from knarr.engine.execution import TaskExecutor
from knarr.engine.periodic import run_periodic
from knarr.engine.processor import PartitionProcessor
from knarr.engine.scheduling import SlotScheduler
from knarr.errors import ExitCode
from knarr.kafka import settings
from knarr.observability import metrics
from knarr.observability.health import HealthServer
from knarr.observability.logging import configure_logging, get_logger
from knarr.observability.loop_lag import LoopLagProbe
from knarr.observability.ratelimit import Deduplicator
from knarr.observability.termination import describe_error, record_exit
from knarr.runtime.hooks import call_hook
from knarr.runtime.stats import RunStats
from knarr.runtime.stopping import cancel_and_wait, wait_event
from knarr.sinks import build_sinks
from knarr.sinks.delivery import SinkManager
from knarr.sinks.dlq import DeadLetterQueue, FileDeadLetterQueue
from knarr.sources.base import Source

VERSION = "0.1.0"
HOLD_RECHECK_SECONDS = 0.05  # while holding: re-decide and commit at least this often
HOLD_LIMIT_SECONDS = 5.0  # longest hold before the client pauses every partition and polls again
# After the drain: the final commit, closing the sinks and closing the consumer get this long each
# (they talk to servers that may be down), and the whole shutdown this long past the drain timeout.
SHUTDOWN_STEP_SECONDS = 3.0
SHUTDOWN_GRACE_SECONDS = 10.0
FLOW_LOG_SECONDS = 30.0  # backpressure changes: at most one INFO line per kind in this long


class Worker:
    def __init__(self, config: KnarrConfig, handler: BaseHandler, source: Source | None = None) -> None:
        self.config = config
        self.handler = handler
        self.source = source
        self.processors: dict[int, PartitionProcessor] = {}
        self.worker_id = os.environ.get(config.worker_name_env) or f"knarr-{os.getpid():x}"
        self.log = get_logger()
        self._running = False
        self._flow = Flow()
        executor = config.executor
        self._work_marks = Watermarks(executor.backpressure_high, executor.backpressure_low)
        self._delivery_marks = Watermarks(executor.delivery_high, executor.delivery_low)
        self._flow_changes = Deduplicator(window_seconds=FLOW_LOG_SECONDS)
        self._held_since: float | None = None
        self._client_paused: set[int] = set()
        self._progress = asyncio.Event()  # a task or message finished while the worker holds
        self._progress_due = False  # a check whether the hold is over is scheduled (_on_progress)
        self._fatal: BaseException | None = None
        self._stop = asyncio.Event()
        self._ready = False
        self._background: set[asyncio.Task] = set()
        self.health: HealthServer | None = None
        self.sinks: SinkManager | None = None
        self.cache: HandlerCache | None = None
        self.executor: TaskExecutor | None = None  # built in run()
        self.stats = RunStats()
        self.loop_lag = LoopLagProbe()
        # Set by the CLI (a process of its own): a shutdown that overruns its deadline (a client stuck
        # on an unreachable broker) ends the process instead of hanging until Kubernetes kills it.
        self.hard_deadline = False
        self._deadline_timer: threading.Timer | None = None
        self._exit_code: int | None = None  # known once the shutdown finished
        self._stuck: list[str] = []  # shutdown steps left unfinished (a thread may still be inside a client)
        self.cluster = ""
        self.started_at = time.monotonic()
        self.recorder: Any = None  # the flight recorder (debug.enabled), else None
        self.debug_server: Any = None

    # --- startup ---------------------------------------------------------------------------
    async def run(self) -> int:
        """Run until stopped (signal, stop(), a bounded source running dry, or a fatal error). Returns the exit code."""
        seal_inherited_fds()
        cluster = os.environ.get(self.config.cluster_name_env, "") if self.config.cluster_name_env else ""
        configure_logging(
            self.config.logging.level, self.config.logging.format,
            worker_id=self.worker_id,
            consumer_group=self.config.kafka.consumer_group if self.config.source.type == "kafka" else "",
            cluster=cluster or self.config.cluster_name, version=VERSION,
        )
        self.cluster = cluster or self.config.cluster_name
        self.log = get_logger()
        updated = await self.handler.on_startup(self.config)
        if isinstance(updated, KnarrConfig):
            self.config = updated
        cfg = self.config

        if self.source is None:
            self.source = self._build_source()  # no I/O yet: settings are judged, the client opens in start()

        metrics.worker_info.info({"worker_id": self.worker_id, "version": VERSION, "consumer_group": cfg.kafka.consumer_group})
        # Read at scrape time: a gauge set twice per task cost more than every scrape together.
        metrics.tasks_in_flight.set_function(lambda: sum(p.inflight_tasks for p in list(self.processors.values())))
        metrics.tasks_delivering.set_function(lambda: sum(p.delivering for p in list(self.processors.values())))
        if cfg.metrics.enabled:
            self.health = HealthServer(cfg.metrics.port, self._readiness, host=cfg.metrics.host,
                                       max_connections=cfg.metrics.max_connections, failure=self._failure)
            await self.health.start()
            self.log.info("probes listening", host=cfg.metrics.host, port=self.health.port)

        self.scheduler = SlotScheduler(cfg.executor.max_executors, cfg.executor.max_per_partition, cfg.executor.held_tasks)
        self.sinks = SinkManager(
            build_sinks(cfg), self._build_dlq(), self.handler, cfg.executor.max_retries,
            cfg.executor.retry_backoff_base_seconds, cfg.executor.retry_backoff_max_seconds, stats=self.stats,
            on_send_failure=cfg.dlq.on_send_failure,
        )
        self.scheduler.on_free_slot = self._on_progress
        self.executor = TaskExecutor(self.handler, self.scheduler, cfg.executor)
        try:
            self.cache = await attach_cache(cfg, self.handler, cluster or cfg.cluster_name)
            if cfg.debug.enabled:
                await self._start_debug()
            await self.sinks.connect_all()
            await self.executor.start()
            await self.handler.on_ready(*ready_arguments(self.handler.on_ready, cfg, self._postgres_pool()))
            self._start_periodic()
            self._spawn(self.loop_lag.run())
            self._install_signals()
            await self.source.start(self._assign, self._revoke)
        except Exception:
            await self._stop_background()
            await self._stop_debug()
            await self.executor.close()  # the programs started ahead, if any
            await self._close_outputs()
            raise
        self._ready = True
        # Everything built so far (modules, config, clients) lives as long as the worker: keep
        # it out of the garbage collector's scans, which otherwise cost ~10 us per task.
        gc.freeze()
        self.log.info("worker started", topic=self.source.topic, max_executors=cfg.executor.max_executors)
        try:
            await self._poll_loop()
        except Exception as exc:  # a bug or a client failure: stop, but still close every client in order
            self.fail(exc)
        return await self._shutdown()

    async def _start_debug(self) -> None:
        """The flight recorder, then the debug UI serving it; the engine's parts report to the recorder."""
        from knarr.debug.service import start_debug

        self.recorder, self.debug_server = await start_debug(self)
        self.executor.recorder = self.recorder
        assert self.sinks is not None
        self.sinks.recorder = self.recorder

    async def _stop_debug(self) -> None:
        """Spec order: the recorder first (its last events written), then the server."""
        recorder, server, self.recorder, self.debug_server = self.recorder, self.debug_server, None, None
        if recorder is not None:
            try:
                await recorder.stop()
            except Exception as exc:  # the recorder's disk must not keep the sinks and the consumer open
                self.log.warning("flight recorder did not stop cleanly", error=f"{type(exc).__name__}: {exc}")
        if server is not None:
            await server.stop()

    def _postgres_pool(self) -> Any:
        """The first PostgreSQL sink's connection pool, for ``on_ready(config, pool)``; None without one."""
        for (sink_type, _name), sink in sorted(self.sinks.sinks.items()):
            if sink_type == "postgres":
                return getattr(sink, "pool", None)
        return None

    def _build_dlq(self) -> Any:
        cfg = self.config
        if cfg.dlq.path:
            source_name = cfg.source.local.path if cfg.source.type == "local" and cfg.source.local else cfg.kafka.source_topic
            return FileDeadLetterQueue(cfg.dlq.path, source_name, cfg.dlq.max_record_bytes)
        return DeadLetterQueue(cfg.dlq_topic, settings.producer(cfg.kafka, cfg.dlq.brokers, cfg.dlq.extra),
                               cfg.kafka.source_topic, cfg.dlq.max_record_bytes,
                               startup_timeout=cfg.kafka.startup_timeout_seconds)

    def _build_source(self) -> Source:
        cfg = self.config
        if cfg.source.type == "local":
            from knarr.sources.local import LocalSource

            assert cfg.source.local is not None
            return LocalSource(cfg.source.local)
        from knarr.sources.kafka import KafkaSource

        source = KafkaSource(cfg.kafka, cfg.executor, client_id=self.worker_id)
        # The source's own final settings, so the check and the client cannot disagree.
        try:
            check_consumer_settings(settings.source_consumer(cfg.kafka, self.worker_id), cfg.kafka.max_poll_records)
        except ConsumerSettingsError as exc:
            raise ConfigError(f"invalid configuration:\n  {exc}") from None
        return source

    def _failure(self) -> str | None:
        """A partition that failed for good: only a restart (the liveness probe) brings it back."""
        failed = [p.failure for p in self.processors.values() if p.failure]
        return "; ".join(failed) if failed else None

    def _readiness(self) -> tuple[bool, str]:
        if self._fatal is not None:
            return False, f"failed: {self._fatal}"
        failed = [p.failure or p.stall for p in self.processors.values() if p.failure or p.stall]
        if failed:
            return False, "; ".join(failed)
        if self.executor is not None and self.executor.programs.stall:
            return False, self.executor.programs.stall
        if self.sinks is not None and self.sinks.stalled:
            return False, "stalled: " + "; ".join(f"partition {p}: {why}" for p, why in sorted(self.sinks.stalled.items(), key=str))
        if not (self.sinks and self.sinks.connected):
            return False, "sinks not connected"
        if not self._ready:
            return False, "starting"
        if not self._running:
            return False, "shutting down"
        return True, f"consuming {len(self.processors)} partition(s)" if self.processors else "idle, waiting for partitions"

    def _install_signals(self) -> None:
        loop = asyncio.get_running_loop()
        # SIGHUP: the supervisor of `knarr run --processes` is gone (the kernel's parent-death signal, which
        # comes once per thread the supervisor had): a stop however often it comes, never a second signal's exit.
        for sig, handler in ((signal.SIGTERM, self._signalled), (signal.SIGINT, self._signalled),
                             (signal.SIGHUP, self.stop)):
            try:
                loop.add_signal_handler(sig, handler)
            except (NotImplementedError, RuntimeError):
                pass  # not the main thread (tests): stop() is called directly

    def _start_periodic(self) -> None:
        for name, spec, fn in periodic_methods(self.handler):
            self._spawn(run_periodic(name, spec, fn, self.log))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # --- the poll loop ---------------------------------------------------------------------
    def stop(self) -> None:
        """Ask for a graceful shutdown (SIGTERM/SIGINT do this)."""
        if self._running:
            self.log.info("shutdown requested")
        self._running = False
        self._stop.set()
        self._progress.set()
        self._arm_deadline()

    def _signalled(self) -> None:
        if self._stop.is_set() and self.hard_deadline:
            self.log.warning("second stop signal: exiting now; uncommitted work will be replayed")
            _exit_now(ExitCode.DRAIN_INCOMPLETE, "a second stop signal ended the drain; uncommitted work will be replayed")
        self.stop()

    def _arm_deadline(self) -> None:
        if not self.hard_deadline or self._deadline_timer is not None:
            return
        seconds = self.config.executor.drain_timeout_seconds + SHUTDOWN_GRACE_SECONDS

        def overrun() -> None:
            self.log.error("shutdown overran its deadline (a client is stuck on an unreachable server); exiting now, "
                           "uncommitted work will be replayed", seconds=seconds)
            if self._exit_code is None:
                _exit_now(ExitCode.FATAL if self._fatal is not None else ExitCode.DRAIN_INCOMPLETE, self._exit_detail(
                    f"the shutdown overran its deadline ({seconds:g}s): a client is stuck on an unreachable server"))
            _exit_now(self._exit_code)  # the shutdown was done; the interpreter's exit hung on a stuck thread

        self._deadline_timer = threading.Timer(seconds, overrun)
        self._deadline_timer.daemon = True
        self._deadline_timer.start()

    @property
    def fatal(self) -> BaseException | None:
        """What stopped the worker for good, if anything did."""
        return self._fatal

    def _exit_detail(self, otherwise: str) -> str:
        return describe_error(self._fatal) if self._fatal is not None else otherwise

    def fail(self, exc: BaseException) -> None:
        """Something cannot be handled without losing data: stop now, commit nothing more."""
        if self._fatal is None:
            self._fatal = exc
            self.log.error("fatal error; stopping without further commits", error=f"{type(exc).__name__}: {exc}")
        self.stop()

    async def _poll_loop(self) -> None:
        assert self.source is not None
        self._running = True
        batch = self.config.kafka.max_poll_records
        self._stopping = asyncio.ensure_future(self._stop.wait())
        while self._running:
            if self._update_flow():
                await self._hold()
                continue
            polled = await self._unless_stopped(self.source.poll(batch, self._committable()))
            if polled is None:
                break  # what that poll took was never started: it is replayed
            messages, committed = polled
            self._acknowledge(committed)
            if not self._running:
                break  # polled after stop: these messages are not started, so they replay
            for partition, part in by_partition(messages).items():
                processor = self.processors.get(partition)
                if processor is not None:  # else revoked meanwhile: not started, so replayed by the new owner
                    processor.enqueue(part)
            if self.source.finished:
                self.log.info("source exhausted; stopping")
                self.stop()

    # --- flow control (backpressure) -----------------------------------------------------
    def _loads(self) -> dict[int, int]:
        return {p: proc.load for p, proc in self.processors.items()}

    def _delivering(self) -> int:
        return sum(proc.delivering for proc in self.processors.values())

    def _update_flow(self) -> bool:
        """Decide the flow state; True while the worker should hold (take no messages)."""
        assert self.source is not None
        loads, delivering = self._loads(), self._delivering()
        idle = self._pool_idle()
        flow = decide_flow(loads, self._flow, self._work_marks, self.config.kafka.max_poll_records, idle,
                           delivering, self._delivery_marks)
        if flow.hold and idle and self.sinks is not None:
            self.sinks.hurry()  # held with a slot idle: what holds waits on the sinks' confirmations
        if flow != self._flow:
            self._log_flow(flow, loads, delivering)
        self._flow = flow
        now = time.monotonic()
        if not flow.hold:
            self._held_since = None
        elif self._held_since is None:
            self._held_since = now
        # A hold takes no messages, but it cannot last forever without polling: the client
        # serves rebalances and proves liveness (max.poll.interval.ms) only inside poll. A
        # long hold therefore pauses every partition at the client and polls again.
        long_hold = flow.hold and now - self._held_since >= self._hold_limit()
        client_paused = set(self.processors) if long_hold else set(flow.isolated)
        if client_paused != self._client_paused:
            self._client_paused = client_paused
            self.source.set_paused(client_paused)
            metrics.partitions_paused.set(len(client_paused))
        metrics.backpressure.set(1 if flow.hold or flow.isolated else 0)
        return flow.hold and not long_hold

    def _hold_limit(self) -> float:
        return min(HOLD_LIMIT_SECONDS, self.config.kafka.max_poll_interval_ms / 1000 / 4)

    async def _hold(self) -> None:
        """Wait for room (or a short while), committing what finished meanwhile."""
        assert self.source is not None
        self._progress.clear()
        if not await wait_event(self._progress, HOLD_RECHECK_SECONDS):
            commits = self._committable()
            if commits:
                done = await self._unless_stopped(self.source.commit_now(commits))
                self._acknowledge(done or {})

    async def _unless_stopped(self, call: Any) -> Any:
        """Await a call into the consumer thread, or stop waiting for it (None) once a stop is asked for.

        The consumer thread can be stuck for a long time in a commit to an unreachable broker; a
        stop must not wait for it.
        """
        future = asyncio.ensure_future(call)
        await asyncio.wait((future, self._stopping), return_when=asyncio.FIRST_COMPLETED)
        if future.done():
            return future.result()
        future.add_done_callback(_ignore_result)
        return None

    def _on_progress(self) -> None:
        """Called as work finishes (by processors, and by the scheduler when a slot stays free): while
        the worker holds, see whether the hold is over once the loop's current round is done, not once
        per finished task (a round often finishes several; the check reads every partition's load)."""
        if self._flow.hold and not self._progress_due and not self._progress.is_set():
            self._progress_due = True
            asyncio.get_running_loop().call_soon(self._check_progress)

    def _check_progress(self) -> None:
        """Wake the held poll loop if the hold is over. If it is not, and a slot idles meanwhile, what
        holds the load up is past the executors: the sinks are asked to confirm deliveries sooner."""
        self._progress_due = False
        if self._flow.hold and not self._progress.is_set():
            idle = self._pool_idle()
            if hold_ends(held_load(self._loads(), self._flow), self._work_marks, idle, self._delivering(),
                         self._delivery_marks):
                self._progress.set()
            elif idle and self.sinks is not None:
                self.sinks.hurry()

    def _pool_idle(self) -> bool:
        """A slot is free and nothing waits for one: no task, and no message queued to make one."""
        return self.scheduler.idle_slot and not any(processor.queued for processor in self.processors.values())

    def _log_flow(self, flow: Flow, loads: dict[int, int], delivering: int) -> None:
        """Each kind of change at most once per FLOW_LOG_SECONDS at INFO, with how often it changed meanwhile.

        Under steady load the hold flaps several times a second; a line per change would bury the log.
        """
        load, now = sum(loads.values()), time.monotonic()

        def info(kind: str, message: str, **fields: Any) -> None:
            metrics.labelled(metrics.backpressure_changes, kind).inc()
            if self.recorder is not None:
                self.recorder.record("backpressure_on" if kind in ("hold", "isolate") else "backpressure_off",
                                     data={"change": kind, "load": load, "delivering": delivering, **fields})
            emit, unlogged = self._flow_changes.seen(kind, now)
            if emit:
                self.log.info(message, load=load, delivering=delivering,
                              **({"repeated": unlogged} if unlogged else {}), **fields)
            else:
                self.log.debug(message, load=load, delivering=delivering, **fields)

        if flow.hold != self._flow.hold:
            info("hold" if flow.hold else "release", "backpressure on: holding" if flow.hold else "backpressure off: consuming")
        if flow.isolated - self._flow.isolated:
            info("isolate", "partition flooded by fan-out: paused while the others flow",
                 partitions=sorted(flow.isolated - self._flow.isolated))
        if self._flow.isolated - flow.isolated:
            info("rejoin", "flooded partition drained: resuming", partitions=sorted(self._flow.isolated - flow.isolated))

    def _committable(self) -> dict[int, int]:
        out = {}
        for partition, processor in self.processors.items():
            offset = processor.watermark.committable()
            if offset is not None:
                out[partition] = offset
        return out

    def _acknowledge(self, committed: dict[int, int]) -> None:
        for partition, offset in committed.items():
            processor = self.processors.get(partition)
            if processor is not None:
                processor.watermark.acknowledge_commit(offset)
            if self.recorder is not None:
                self.recorder.record("committed", partition, offset)

    # --- assignment ------------------------------------------------------------------------
    async def _assign(self, partitions: list[int]) -> None:
        assert self.source is not None
        for p in partitions:
            if p in self.processors:
                continue
            processor = PartitionProcessor(
                self.source.topic, p, self.handler, self.executor, self.sinks, self.config.executor, self.fail,
                on_progress=self._on_progress, stats=self.stats, on_parse_error=self.config.source.on_parse_error,
                recorder=self.recorder,
            )
            processor.start()
            self.processors[p] = processor
        metrics.assigned_partitions.set(len(self.processors))
        if self.recorder is not None:
            for p in partitions:
                self.recorder.record("assigned", p, data={"partitions": sorted(partitions)})
        self._spawn(self._hook("on_assign", self.handler.on_assign, partitions))

    async def _revoke(self, partitions: list[int], lost: bool) -> dict[int, int]:
        """Drain the partitions (bounded) and say which offsets may be committed before they go."""
        leaving = [(p, self.processors.pop(p)) for p in partitions if p in self.processors]
        metrics.assigned_partitions.set(len(self.processors))
        if self.recorder is not None:
            for p in partitions:
                self.recorder.record("revoked", p, data={"partitions": sorted(partitions), "lost": lost})
        if not leaving:
            return {}

        async def release(p: int, proc: PartitionProcessor) -> tuple[int, int | None]:
            clean = False if lost or self._fatal else await proc.drain(self.config.executor.drain_timeout_seconds)
            await proc.stop()
            return p, proc.watermark.committable() if clean else None

        results = await asyncio.gather(*(release(p, proc) for p, proc in leaving))
        self._spawn(self._hook("on_revoke", self.handler.on_revoke, partitions))
        return {p: o for p, o in results if o is not None}

    async def _hook(self, name: str, fn: Any, *args: Any) -> None:
        await call_hook(name, fn, *args, log=self.log, partitions=args[0] if args else None)

    # --- shutdown --------------------------------------------------------------------------
    async def _shutdown(self) -> int:
        assert self.source is not None
        started = time.monotonic()
        for task in list(self._background):
            task.cancel()
        self._arm_deadline()
        processors = list(self.processors.values())
        clean = False
        if self._fatal is None:
            timeout = self.config.executor.drain_timeout_seconds
            drained = await asyncio.gather(*(p.drain(timeout) for p in processors))
            clean = all(drained)
            if clean:
                clean = await self._bounded("the final commit", self._final_commit())
            else:
                self.log.warning("drain incomplete; final commit skipped, in-flight messages will be replayed")
        await asyncio.gather(*(p.stop() for p in processors))
        self.processors.clear()
        await self.executor.close()
        if self.cache is not None:  # every hook is done: nothing sets an entry after this flush
            await self._bounded("closing the cache", self.cache.close())
        await self._stop_debug()
        await asyncio.gather(self._bounded("closing the sinks", self._close_outputs()),
                             self._bounded("closing the consumer", self.source.close()))
        if self.health is not None:
            await self.health.stop()
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
        self.log.info("worker stopped", clean=clean, seconds=round(time.monotonic() - started, 3),
                      fatal=str(self._fatal) if self._fatal else None)
        # The deadline stays armed: if a thread stuck in a client keeps the interpreter from exiting,
        # it ends the process with this exit code.
        self._exit_code = (ExitCode.FATAL if self._fatal is not None
                           else ExitCode.OK if clean else ExitCode.DRAIN_INCOMPLETE)
        if self._stuck and self.hard_deadline:
            # A thread is still inside a client talking to a server that does not answer; a normal
            # exit would wait for it. Everything that could be done safely is done.
            self.log.warning("exiting without waiting for unfinished shutdown steps", steps=self._stuck)
            _exit_now(self._exit_code, self._exit_detail(f"shutdown steps left unfinished: {', '.join(self._stuck)}"))
        return self._exit_code

    async def _final_commit(self) -> bool:
        assert self.source is not None
        wanted = self._committable()
        done = await self.source.commit_now(wanted)
        self._acknowledge(done)
        return done == wanted

    async def _bounded(self, step: str, work: Any) -> bool:
        """One shutdown step that talks to a server: False (logged) if it did not finish in time."""
        try:
            result = await asyncio.wait_for(work, SHUTDOWN_STEP_SECONDS)
        except TimeoutError:
            self.log.warning(f"{step} did not finish within {SHUTDOWN_STEP_SECONDS:.0f}s; going on without it")
            self._stuck.append(step)
            return False
        return result is not False

    async def _stop_background(self) -> None:
        """Cancel the periodic tasks and hooks started so far, and the cache (a startup that failed)."""
        await cancel_and_wait(self._background, self.log)
        if self.cache is not None:
            await self.cache.close()

    async def _close_outputs(self) -> None:
        if self.sinks is not None:
            await self.sinks.close_all()


def _ignore_result(future: asyncio.Future) -> None:
    if not future.cancelled():
        future.exception()  # retrieved, so an abandoned poll's error is not reported as never retrieved


def _exit_now(code: int, detail: str = "") -> None:
    """End the process at once: a thread stuck inside a client would keep a normal exit waiting.

    ``detail`` becomes the termination message (the CLI, which writes it otherwise, is skipped).
    """
    if detail:
        record_exit(code, detail)
    sys.stderr.flush()
    os._exit(code)
