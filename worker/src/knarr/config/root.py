"""The configuration root, ``KnarrConfig``. How it is loaded (YAML, then ``KNARR_*`` env) is in loading.py."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from knarr.config.cache import CacheConfig
from knarr.config.environment import CONFIG_PATH_ENV, ENV_DELIMITER, ENV_PREFIX
from knarr.config.models import (
    DebugConfig,
    DlqConfig,
    ExecutorConfig,
    KafkaConfig,
    LoggingConfig,
    MetricsConfig,
    Section,
    SinksConfig,
    SourceConfig,
)
from knarr.config.paths import HandlerSpec

GC_THRESHOLD = 10_000  # gc_threshold's default (Python's own is 700); engine/event_loop.py says why
MAX_PROCESSES = 256  # worker processes of one `knarr run`; knarr/supervisor says what they share

__all__ = ["CONFIG_PATH_ENV", "ENV_DELIMITER", "ENV_PREFIX", "KnarrConfig", "debug_ports_problem", "dump_config",
           "processes_problem"]


class KnarrConfig(Section):
    """Everything a worker needs. Load it with :func:`knarr.config.load_config`."""

    kafka: KafkaConfig = Field(default_factory=KafkaConfig, description="The source topic, its brokers and the consumer group.")
    source: SourceConfig = Field(default_factory=SourceConfig, description="Kafka (the default) or a local JSONL file.")
    executor: ExecutorConfig = Field(default_factory=ExecutorConfig, description="How tasks run: the subprocess pool, windows, retries, backpressure.")
    sinks: SinksConfig = Field(default_factory=SinksConfig, description="Where hook outputs go: named sinks per type (at least one).")
    dlq: DlqConfig = Field(default_factory=DlqConfig, description="Where failed deliveries and unprocessable windows go.")
    metrics: MetricsConfig = Field(default_factory=MetricsConfig, description="The /metrics, /healthz and /readyz server.")
    logging: LoggingConfig = Field(default_factory=LoggingConfig, description="Log level and format.")
    debug: DebugConfig = Field(default_factory=DebugConfig, description="The flight recorder and the debug web UI (off by default).")
    cache: CacheConfig = Field(default_factory=CacheConfig, description="The handler cache (self.cache): memory, SQLite, and a shared tier.")
    handler: HandlerSpec = Field(
        "",
        description="The handler class, 'package.module:Class' or 'path/to/file.py:Class' (a file is relative "
        "to the config file); the --handler option overrides it.",
    )
    worker_name_env: str = Field("WORKER_ID", description="Environment variable holding this worker's name.")
    cluster_name: str = Field("", description="Logical cluster name, bound to every log line.")
    cluster_name_env: str = Field("", description="Environment variable that overrides cluster_name when set.")
    event_loop: Literal["uvloop", "asyncio"] = Field(
        "uvloop",
        description="The event loop `knarr run` and `knarr demo` run on: uvloop (compiled, less CPU per task) or "
        "asyncio (the standard library's, for a handler whose libraries need it; hooks that call "
        "asyncio.create_subprocess_exec themselves run those 2.5x faster on it).",
    )
    gc_threshold: int = Field(
        GC_THRESHOLD, ge=0, le=1_000_000,
        description="In `knarr run` and `knarr demo`: Python's cyclic garbage collector takes its young "
        "generation every this many allocations (gc.set_threshold's first value; Python's own default is 700, "
        "0 turns automatic collection off), and start-up's objects are frozen out of collections. A message "
        "leaves no reference cycles behind, so a high value costs no memory (peak RSS on W1 the same at 700 "
        "and 10,000) and saves CPU: 10,000 takes 6-17 us off the worker's CPU per task against 700.",
    )

    processes: int = Field(
        1, ge=0, le=MAX_PROCESSES,
        description="Worker processes `knarr run` starts (the --processes option overrides it): each a consumer of "
        "the same group with its own event loop, under one supervisor that serves metrics.port (every process's "
        "metrics, labelled process=\"0\", \"1\", ...; /healthz and /readyz for all of them), passes SIGTERM/SIGINT "
        "on, restarts a process a signal killed (the OOM killer's SIGKILL) and stops them all when one exits by "
        "itself (its exit code and reason become the pod's). One interpreter runs one core's worth of Python: a "
        "worker bound by its event loop (persistent executors, tiny tasks) uses a pod's cores this way without a "
        "replica each. executor.max_executors is shared among them (each gets its part; at least one each). "
        "0: one per CPU this process may use (its cgroup's cpu.max, else its CPU affinity). 1: one process, no "
        "supervisor. Needs the Kafka source.",
    )

    @model_validator(mode="after")
    def _processes_fit(self) -> KnarrConfig:
        problem = processes_problem(self.processes, self.source.type, self.executor.max_executors)
        if problem is not None:
            raise ValueError(f"processes is {self.processes}: {problem}")
        return self

    @model_validator(mode="after")
    def _debug_ports_fit(self) -> KnarrConfig:
        count = self.processes or 1  # 0 is counted at start, where knarr/supervisor checks again
        problem = debug_ports_problem(self, count)
        if problem is not None:
            raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _at_least_one_sink(self) -> KnarrConfig:
        if self.sinks.is_empty:
            raise ValueError(
                "no sink is configured; add at least one under 'sinks', e.g. "
                "sinks: {filesystem: {out: {base_path: ./out}}}"
            )
        return self

    @property
    def dlq_topic(self) -> str:
        return self.dlq.topic or f"{self.kafka.source_topic}_dlq"

    @property
    def dlq_brokers(self) -> str:
        return self.dlq.brokers or self.kafka.brokers


def processes_problem(processes: int, source_type: str, max_executors: int) -> str | None:
    """Why ``processes`` worker processes cannot run (0 and 1 always can: 0 is counted at start), or None."""
    if processes <= 1:
        return None
    if source_type != "kafka":
        return (f"several worker processes share their partitions through a Kafka consumer group, and source.type "
                f"is {source_type!r}; run one process (processes: 1) on the local source")
    if processes > max_executors:
        return (f"the processes share executor.max_executors ({max_executors}) and each needs at least one pool "
                "slot; raise executor.max_executors or run fewer processes")
    return None


def debug_ports_problem(config: KnarrConfig, processes: int) -> str | None:
    """Why ``processes`` worker processes cannot serve their debug UIs, process i on ``debug.port + i``
    (past the last port, or on the metrics port), or None. debug.port 0: each picks a free port."""
    debug, metrics = config.debug, config.metrics
    if not debug.enabled or debug.port == 0:
        return None
    said = f"debug.port {debug.port}" + (f" and processes {processes}" if processes > 1 else "")
    last = debug.port + processes - 1
    if last > 65535:
        return (f"{said}: worker process i serves its debug UI on debug.port + i, past 65535 for the last ones; "
                "lower debug.port")
    if metrics.enabled and debug.port <= metrics.port <= last:
        if processes == 1:
            return (f"{said}: the debug UI and the metrics endpoint (metrics.port {metrics.port}) cannot share a "
                    "port; move debug.port or metrics.port")
        return (f"{said}: worker process i serves its debug UI on debug.port + i, and metrics.port "
                f"({metrics.port}) is among those ports; move debug.port or metrics.port")
    return None


def dump_config(config: KnarrConfig) -> dict[str, Any]:
    """The config as plain data, the shape a YAML file would have."""
    return config.model_dump(mode="json")
