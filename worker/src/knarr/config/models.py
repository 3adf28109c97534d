"""The worker's configuration: one set of pydantic models, the single source of truth.

The CRD schema, the Helm values and the configuration reference in the README are
generated from these models; a test fails when they drift.

Every number has an upper bound as well as a lower one: a value past it is a typo or a
misunderstanding (``window_size: 1e9``), and it is cheaper to say so at startup than to
find out from the first poll, the OOM killer or a task that never times out. Where
librdkafka has its own range, the bound is librdkafka's.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from knarr.config.paths import ConfigPath
from knarr.config.librdkafka import refusals

_IDENT = r"^[A-Za-z_][A-Za-z0-9_.-]*$"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_MIB = 1024 * 1024

HOUR_MS = 3_600_000
DAY_SECONDS = 86_400
MAX_POLL_RECORDS = 100_000  # far above any useful batch: backpressure holds at max_executors x 32 messages
MAX_EXECUTORS = 1_024  # subprocesses of one worker; each holds 3 pipes, and 1024 is a common open-files limit
HELD_PER_SLOT = 16  # executor.spawn_ahead unset: held tasks per slot at most (tasks of 1.25 ms or less fill them)


class Section(BaseModel):
    """Base for every config section: unknown keys are errors, not silently ignored; inf and nan are no numbers."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)


class KafkaConfig(Section):
    brokers: str = Field("localhost:9092", min_length=1, description="Kafka bootstrap servers, comma-separated host:port.")
    source_topic: str = Field("input-events", min_length=1, description="Topic to consume from.")
    consumer_group: str = Field("knarr-workers", min_length=1, description="Consumer group id.")
    max_poll_records: int = Field(100, ge=1, le=MAX_POLL_RECORDS, description="Most messages fetched per poll batch.")
    max_poll_interval_ms: int = Field(300_000, ge=1_000, le=24 * HOUR_MS, description="Longest gap between polls before the broker evicts the consumer.")
    session_timeout_ms: int = Field(45_000, ge=1_000, le=HOUR_MS, description="Group membership session timeout.")
    heartbeat_interval_ms: int = Field(3_000, ge=100, le=HOUR_MS, description="Heartbeat interval to the group coordinator.")
    startup_timeout_seconds: float = Field(
        30, gt=0, le=3600,
        description="How long startup waits for the brokers to answer before giving up (exit code 3).",
    )
    ownership_check_seconds: float = Field(
        15, ge=0, le=3600,
        description="With static membership (extra group.instance.id): how often (give or take a quarter) the worker looks at its group for partitions "
        "no member owns, which a static member killed mid-rebalance can leave behind; one unowned in every look for longer than "
        "a rebalance takes (the session timeout or the revoke drain, whichever is longer, plus this interval) is handed out by "
        "rejoining the group. 0 turns the looks off. Without a static id nothing is looked at: a dead member's session ends and rebalances the group.",
    )
    extra: dict[str, str | int | float | bool] = Field(
        default_factory=dict,
        description="Extra librdkafka consumer properties (e.g. security.protocol, sasl.*), passed through as given; the connection ones (security.*, sasl.*, ssl.*, socket.*, …) "
        "also reach every producer, Spark reader and the operator's lag reader. Applied last, over knarr's own consumer settings, its small read-ahead among them "
        "(queued.min.messages, queued.max.messages.kbytes, fetch.message.max.bytes, fetch.max.bytes, fetch.queue.backoff.ms). "
        "Properties that would undo knarr's commits or group handling (enable.auto.commit, group.protocol, ...) are refused.",
    )

    @field_validator("extra")
    @classmethod
    def _no_property_that_breaks_commits(cls, value: dict[str, str | int | float | bool]) -> dict[str, str | int | float | bool]:
        refused = refusals(value)
        if refused:
            raise ValueError("; ".join(refused))
        return value

    @model_validator(mode="after")
    def _timeouts_in_order(self) -> KafkaConfig:
        # librdkafka refuses the second at startup; say it here, where the operator sees it too.
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise ValueError(
                f"heartbeat_interval_ms ({self.heartbeat_interval_ms}) must be lower than "
                f"session_timeout_ms ({self.session_timeout_ms}); a third of it is usual"
            )
        if self.session_timeout_ms > self.max_poll_interval_ms:
            raise ValueError(
                f"session_timeout_ms ({self.session_timeout_ms}) must not exceed "
                f"max_poll_interval_ms ({self.max_poll_interval_ms}); the Kafka client refuses it"
            )
        return self


class PersistentConfig(Section):
    """A long-lived program that runs many tasks, one at a time, over docs/task-protocol.md."""

    command: list[str] | None = Field(None, min_length=1, description="The program and its arguments (exec'd, no shell), started once per pool slot and reused; set, tasks run in it unless they name their own binary_path or persistent_command, or set persistent: false. Unset: only tasks naming a persistent_command use a program.")
    prestart: bool = Field(True, description="Start one program of command per pool slot when the worker starts, before it takes a message: the first tasks do not wait for the programs' start-up, and if none can start, the worker exits (code 2) before it takes a message, naming the command and why. False: each program starts when a task first needs it. Later, tasks wait while no program can start, and go on once one does.")
    max_tasks_per_process: int | None = Field(None, ge=1, le=1_000_000_000, description="Tasks one program runs before it is replaced (unset: no limit), against slow leaks.")
    max_idle_seconds: float = Field(300, gt=0, le=DAY_SECONDS, description="A program idle this long is stopped; the next task starts a new one.")
    max_rss_mb: int | None = Field(None, ge=1, le=1_048_576, description="Resident memory of the program, read from /proc after each task; past it the program is replaced once that task has finished (unset: not checked).")
    start_timeout_seconds: float = Field(30, gt=0, le=3_600, description="Longest wait for a new program's hello frame; past it the start is a launch error naming the command.")
    stop_grace_seconds: float = Field(2, ge=0, le=600, description="A program being retired gets its stdin closed and this long to exit before its process group is killed.")
    restart_backoff_base_seconds: float = Field(0.1, ge=0, le=3_600, description="After a program crashes, breaks the protocol or fails to start, the next start waits this long, doubling (with jitter) per consecutive failure.")
    restart_backoff_max_seconds: float = Field(10, ge=0, le=DAY_SECONDS, description="Upper bound of the restart delay.")

    @field_validator("command")
    @classmethod
    def _command_is_argv(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and (not value[0] or any("\0" in arg for arg in value)):
            raise ValueError("command must be the program and its arguments as a list, the first a non-empty "
                             "path or name on PATH, none holding a NUL byte (e.g. [python, -m, my_tasks])")
        return value

    @model_validator(mode="after")
    def _backoff_in_order(self) -> PersistentConfig:
        if self.restart_backoff_max_seconds < self.restart_backoff_base_seconds:
            raise ValueError("restart_backoff_max_seconds must be at least restart_backoff_base_seconds")
        return self


class ExecutorConfig(Section):
    binary_path: str | None = Field(None, min_length=1, description="Default binary for tasks; unset, every task must set its own binary_path.")
    max_executors: int = Field(4, ge=1, le=MAX_EXECUTORS, description="Subprocesses running at once across all partitions (pool slots).")
    task_timeout_seconds: float = Field(120, gt=0, le=DAY_SECONDS, description="Wall-clock limit per subprocess; on expiry its whole process group is killed.")
    window_size: int = Field(100, ge=1, le=100_000, description="Most messages handed to one arrange() call.")
    window_linger_ms: int = Field(0, ge=0, le=600_000, description="How long a window may wait to fill up to window_size before arrange() runs (0: no wait).")
    max_retries: int = Field(3, ge=0, le=100, description="Retries of a failed task when on_error returns RETRY (0: none).")
    retry_backoff_base_seconds: float = Field(0.5, ge=0, le=3_600, description="First retry delay; doubles per attempt, with jitter.")
    retry_backoff_max_seconds: float = Field(30, ge=0, le=DAY_SECONDS, description="Upper bound of a retry delay.")
    max_per_partition: int | None = Field(None, ge=1, le=MAX_EXECUTORS, description="Most pool slots one partition may hold at once (unset: no cap), so a hot partition cannot starve the others.")
    drain_timeout_seconds: float = Field(30, gt=0, le=3_600, description="Longest wait for in-flight work on shutdown or revoke; on timeout the final commit is skipped (replay instead of loss).")
    backpressure_high_multiplier: int = Field(32, ge=1, le=1_000_000, description="Pause consumption when queued messages + tasks in flight (waiting for a slot, running, in on_task_complete or between retries; not those whose outputs await a sink's confirmation, see backpressure_delivery_multiplier) reach max_executors x this.")
    backpressure_low_multiplier: int = Field(16, ge=1, le=1_000_000, description="Resume when they fall to max(1, max_executors x this), or sooner, under the high watermark, when a pool slot is free that no task or queued message waits for (outputs waiting on a slow sink then hold no slot idle). Half the high watermark by default, so the next poll lands while the pool still has work queued (a resume at 4 per slot left fast tasks idle for a poll's round trip).")
    backpressure_delivery_multiplier: int = Field(64, ge=1, le=1_000_000, description="Tasks whose outputs await a sink's confirmation (and on_message_complete's or on_window_complete's outputs that do, one per call) are bounded apart from the load above: consumption also pauses when they reach max_executors x this, and resumes when they fall to half of it, or sooner when a pool slot is free that no task or queued message waits for. Counted in the load, they filled it by themselves with tiny tasks (a broker confirms a record 5-10 ms after it is produced: at 20,000 tasks/s, 100-200 tasks). What a slow sink keeps in memory is bounded by this.")
    env: dict[str, str] = Field(default_factory=dict, description="Environment variables added to every subprocess (tasks may add their own).")
    max_tasks_per_window: int = Field(10_000, ge=1, le=1_000_000, description="Most tasks one arrange() call may return; a larger result is refused and the window dead-lettered instead of buffered.")
    on_retries_exhausted: Literal["dlq", "discard"] = Field("dlq", description="A task whose on_error asked for RETRY and that has no attempt left: dead-letter its source messages (dlq) or count it as failed only (discard).")
    env_inherit: list[str] = Field(
        default_factory=lambda: ["PATH", "HOME", "LANG", "LC_*", "TZ", "TMPDIR"],
        description="The worker's environment variables a subprocess inherits (a trailing * matches a prefix); no other worker variable — sink credentials included — reaches a task.",
    )
    max_output_bytes: int = Field(8 * _MIB, ge=1024, le=256 * _MIB, description="Most bytes of stdout and of stderr kept per task (the head); the rest is dropped and the result's stdout_truncated / stderr_truncated say so.")
    persistent: PersistentConfig | None = Field(None, description="Run tasks in long-lived programs instead of one process per task (see the README's Persistent executors and docs/task-protocol.md).")
    spawner: Literal["auto", "native", "thread"] = Field("auto", description="What starts and reaps task processes: the native runner (a C thread built at install time; a sixth less worker CPU per task in spawn mode), the spawner thread (Python), or auto: native when it was built, else the thread, with a warning. Persistent programs are unaffected.")
    spawn_ahead: int | None = Field(None, ge=0, le=MAX_EXECUTORS * HELD_PER_SLOT, description="Spawn-mode tasks the native runner holds ready beyond the max_executors running, each started by its thread the moment a running task ends (no round trip through the event loop), the loop woken once for many ended tasks (while tasks are held, it hears of an ended one 20 ms late at most). Unset: as many as the running tasks clear in about 20 ms at their recent mean duration, at most 16 x max_executors (tasks of 1.25 ms or less fill it; tasks of 100 ms or more are never held), so a later, more urgent task waits about 20 ms at most behind held ones; a number: that many whatever the duration; 0: none. Never more than max_executors run at once; a held task's timeout counts from its start, and one whose expires_at passes while held is dropped as expired. Priorities and partition fairness order tasks as they are handed to the runner, so a later, more urgent task can wait behind the held ones.")
    task_cgroup: bool = Field(True, description="knarr run moves itself into a cgroup v2 of its own where the hierarchy is writable, so every process a task starts (detached or not) dies with the worker.")

    @field_validator("env", "env_inherit")
    @classmethod
    def _env_names(cls, value: dict[str, str] | list[str], info) -> dict[str, str] | list[str]:
        for name in value:
            pattern = name[:-1] if info.field_name == "env_inherit" and name.endswith("*") else name
            if name == "*" and info.field_name == "env_inherit":
                continue  # everything: the old, leaky behaviour, for who really wants it
            if not _ENV_NAME.match(pattern):
                raise ValueError(
                    f"{name!r} is not an environment variable name: use letters, digits and _, not starting with a digit"
                    + (" (a trailing * matches a prefix)" if info.field_name == "env_inherit" else "")
                )
        return value
    metric_labels: list[str] = Field(default_factory=list, max_length=8, description="Task label keys counted on knarr_task_labels_total{status,label,value} (opt-in; empty: none). Tasks without the label are not counted there.")
    metric_label_values_max: int = Field(50, ge=1, le=1000, description="Distinct values kept per metric label key; later new values are counted as 'other', so a label cannot blow up the metric's cardinality.")

    @field_validator("metric_labels")
    @classmethod
    def _metric_labels_are_label_keys(cls, keys: list[str]) -> list[str]:
        import re

        for key in keys:
            if not re.match(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$", key):
                raise ValueError(f"metric label {key!r} must be a task label key: letters, digits and _, "
                                 "not starting with a digit, at most 64 characters")
        if len(set(keys)) != len(keys):
            raise ValueError("metric_labels lists a key twice")
        return keys

    @model_validator(mode="after")
    def _low_below_high(self) -> ExecutorConfig:
        if self.backpressure_low_multiplier >= self.backpressure_high_multiplier:
            raise ValueError(
                f"backpressure_low_multiplier ({self.backpressure_low_multiplier}) must be lower than "
                f"backpressure_high_multiplier ({self.backpressure_high_multiplier}), or consumption would flap"
            )
        if self.retry_backoff_max_seconds < self.retry_backoff_base_seconds:
            raise ValueError("retry_backoff_max_seconds must be at least retry_backoff_base_seconds")
        return self

    @property
    def backpressure_high(self) -> int:
        return self.max_executors * self.backpressure_high_multiplier

    @property
    def held_tasks(self) -> int:
        """The most tasks the native runner may hold ready (spawn_ahead, or its cap when unset)."""
        return HELD_PER_SLOT * self.max_executors if self.spawn_ahead is None else self.spawn_ahead

    @property
    def backpressure_low(self) -> int:
        return max(1, self.max_executors * self.backpressure_low_multiplier)

    @property
    def delivery_high(self) -> int:
        """Tasks awaiting a sink's confirmation at which consumption pauses."""
        return self.max_executors * self.backpressure_delivery_multiplier

    @property
    def delivery_low(self) -> int:
        """... and at which it resumes: half (0 when the bound is 1)."""
        return self.delivery_high // 2


class SinkBase(Section):
    ui_url: str = Field("", description="Link shown to operators for browsing this sink's data.")


class KafkaSinkConfig(SinkBase):
    topic: str = Field(..., min_length=1, description="Topic to produce to.")
    brokers: str = Field("", description="Bootstrap servers; empty inherits kafka.brokers.")
    extra: dict[str, str | int | float | bool] = Field(default_factory=dict, description="Extra librdkafka producer properties, applied after the connection settings (security.*, sasl.*, ssl.*) it takes from kafka.extra (acks=0 and bootstrap.servers are refused).")

    @field_validator("extra")
    @classmethod
    def _no_property_that_loses_results(cls, value: dict[str, str | int | float | bool]) -> dict[str, str | int | float | bool]:
        refused = refusals(value, producer=True)
        if refused:
            raise ValueError("; ".join(refused))
        return value


class PostgresSinkConfig(SinkBase):
    dsn: str = Field(..., min_length=1, description="PostgreSQL connection string (keep credentials in a Secret / env override).")
    pool_min: int = Field(2, ge=1, le=1_000, description="Connections kept open.")
    pool_max: int = Field(10, ge=1, le=1_000, description="Most connections at once.")
    connect_timeout_seconds: float = Field(10, gt=0, le=600, description="Longest wait for a new connection; at startup, an unreachable server fails the worker (exit code 3) after it.")
    command_timeout_seconds: float = Field(30, gt=0, le=3_600, description="Longest wait for one delivery's statements; past it the server counts as unavailable and the delivery waits and retries.")

    @model_validator(mode="after")
    def _pool_in_order(self) -> PostgresSinkConfig:
        if self.pool_min > self.pool_max:
            raise ValueError(f"pool_min ({self.pool_min}) must not exceed pool_max ({self.pool_max})")
        return self


class MongoSinkConfig(SinkBase):
    uri: str = Field(..., min_length=1, description="MongoDB connection URI (keep credentials in a Secret / env override).")
    database: str = Field(..., min_length=1, description="Database the payloads' collections live in.")
    timeout_seconds: float = Field(10, gt=0, le=600, description="Longest wait for the server: to find it, to connect, and for one reply. Past it a delivery waits and retries like any outage (nothing is dead-lettered for it); at startup the worker exits 3.")


class HttpSinkConfig(SinkBase):
    url: str = Field(..., min_length=1, description="Endpoint every payload is sent to.")
    method: Literal["POST", "PUT", "PATCH"] = Field("POST", description="HTTP method of each request.")
    timeout_seconds: float = Field(30, gt=0, le=3_600, description="Longest wait for one response (and for the reachability check at startup).")
    headers: dict[str, str] = Field(default_factory=dict, description="Headers added to every request (Content-Type is application/json unless set here).")
    max_retries: int = Field(3, ge=0, le=100, description="Quick retries, with backoff and the server's Retry-After, of a request that met a connection error, a timeout, 408, 429 or 5xx; after them the delivery waits for the server like any outage (nothing is dead-lettered for it).")
    max_concurrency: int = Field(8, ge=1, le=1_000, description="Requests to this sink in flight at once, across partitions (one request per payload; the server sees them in no particular order).")


class RedisSinkConfig(SinkBase):
    url: str = Field("redis://localhost:6379/0", min_length=1, description="Redis connection URL.")
    key_prefix: str = Field("", description="Prepended to every key written.")
    pool_max: int = Field(10, ge=1, le=1_000, description="Most connections at once; more deliveries at a time wait for one.")
    socket_timeout_seconds: float = Field(10, gt=0, le=3_600, description="Longest wait for the server to connect or answer; past it the server counts as unavailable and the delivery waits and retries (at startup: exit code 3).")


class FileSinkConfig(SinkBase):
    base_path: ConfigPath = Field(..., min_length=1, description="Directory every written path must stay inside (relative: to the config file).")


class PluginSinkConfig(SinkBase):
    """A sink of a type an installed package adds (a ``knarr.sinks`` entry point); see docs/plugins.md."""

    type: str = Field(..., min_length=1, max_length=100, pattern=_IDENT,
                      description="The plug-in's entry point name in the knarr.sinks group (`knarr check` lists the installed ones).")
    options: dict[str, Any] = Field(
        default_factory=dict,
        description="The plug-in's own settings, validated by its config_model when the worker loads the config.",
        json_schema_extra={"x-schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
    )


SinkType = Literal["kafka", "postgres", "mongo", "http", "redis", "filesystem", "plugin"]
SINK_TYPES: tuple[SinkType, ...] = ("kafka", "postgres", "mongo", "http", "redis", "filesystem", "plugin")


class SinksConfig(Section):
    """Named sink instances per type: ``sinks.<type>.<name>``."""

    kafka: dict[str, KafkaSinkConfig] = Field(default_factory=dict, description="Kafka topics, by sink name.")
    postgres: dict[str, PostgresSinkConfig] = Field(default_factory=dict, description="PostgreSQL databases, by sink name.")
    mongo: dict[str, MongoSinkConfig] = Field(default_factory=dict, description="MongoDB databases, by sink name.")
    http: dict[str, HttpSinkConfig] = Field(default_factory=dict, description="HTTP endpoints, by sink name.")
    redis: dict[str, RedisSinkConfig] = Field(default_factory=dict, description="Redis servers, by sink name.")
    filesystem: dict[str, FileSinkConfig] = Field(default_factory=dict, description="Directories of JSON Lines files, by sink name.")
    plugin: dict[str, PluginSinkConfig] = Field(default_factory=dict, description="Sinks of types installed packages add (entry points in the knarr.sinks group), by sink name.")

    @field_validator("kafka", "postgres", "mongo", "http", "redis", "filesystem", "plugin")
    @classmethod
    def _names_are_identifiers(cls, value: dict) -> dict:
        import re

        for name in value:
            if not re.match(_IDENT, name):
                raise ValueError(f"sink name {name!r} must start with a letter or _ and hold only letters, digits, _ . -")
        return value

    def instances(self) -> list[tuple[SinkType, str, SinkBase]]:
        """Every configured sink as (type, name, config), in a stable order."""
        out: list[tuple[SinkType, str, SinkBase]] = []
        for sink_type in SINK_TYPES:
            for name, cfg in getattr(self, sink_type).items():
                out.append((sink_type, name, cfg))
        return out

    @property
    def is_empty(self) -> bool:
        return not self.instances()


class DlqConfig(Section):
    topic: str = Field("", description="Dead-letter topic; empty means '{kafka.source_topic}_dlq'.")
    brokers: str = Field("", description="Dead-letter brokers; empty inherits kafka.brokers.")
    extra: dict[str, str | int | float | bool] = Field(
        default_factory=dict,
        description="Extra librdkafka producer properties for the dead-letter producer, applied after the connection settings (security.*, sasl.*, ssl.*) it takes from kafka.extra.",
    )
    path: ConfigPath = Field("", description="Write dead letters as JSON Lines to this file instead of a topic (used with the local source; relative: to the config file).")
    on_send_failure: Literal["stall", "drop"] = Field("stall", description="When the DLQ refuses a record 5 times: keep retrying with backoff while the partition waits and readiness says why (stall), or count, log and let the offset complete (drop).")
    max_record_bytes: int = Field(900_000, ge=1_000, le=100_000_000, description="Largest DLQ record; bigger payloads keep their head, with their full size and SHA-256 in the record.")


class MetricsConfig(Section):
    enabled: bool = Field(True, description="Serve /metrics, /healthz and /readyz.")
    host: str = Field(
        "0.0.0.0", min_length=1,
        description="Address /metrics, /healthz and /readyz listen on; the default reaches the pod IP Kubernetes probes use "
        "(:: for IPv6, 127.0.0.1 to keep them on this host).",
    )
    port: int = Field(9090, ge=0, le=65535, description="Port of /metrics, /healthz and /readyz (0: pick a free one).")
    max_connections: int = Field(
        32, ge=2, le=1_024,
        description="Connections served at once; past it the oldest one still sending its request is dropped, so idle "
        "connections cannot lock out the probes.",
    )


class LoggingConfig(Section):
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field("INFO", description="Least severe level logged.")
    format: Literal["json", "console"] = Field("json", description="json: one JSON object per line; console: for people.")

    @field_validator("level", mode="before")
    @classmethod
    def _upper(cls, value: object) -> object:
        return value.upper() if isinstance(value, str) else value


class LocalSourceConfig(Section):
    """The embedded source: a JSONL file read as a partitioned log (no Kafka needed)."""

    path: ConfigPath = Field(..., min_length=1, description="JSONL file, one message per line (relative: to the config file).")
    partitions: int = Field(1, ge=1, le=MAX_EXECUTORS, description="Lines are spread over this many partitions (line number modulo).")
    offsets_path: ConfigPath = Field("", description="Where committed offsets are kept so a rerun resumes (relative: to the config file); empty: '<path>.offsets.json'.")
    exit_when_done: bool = Field(True, description="Stop the worker once every line is processed and committed.")


class SourceConfig(Section):
    type: Literal["kafka", "local"] = Field("kafka", description="Where messages come from: the Kafka topic, or a local JSONL file.")
    local: LocalSourceConfig | None = None
    on_parse_error: Literal["arrange", "dlq", "skip"] = Field("arrange", description="A message that does not parse into the input model: hand it to arrange() with payload=None and parse_error set (arrange), dead-letter it (dlq), or complete its offset without processing (skip).")

    @model_validator(mode="after")
    def _local_needs_path(self) -> SourceConfig:
        if self.type == "local" and self.local is None:
            raise ValueError("source.type is 'local' but source.local is missing; set source.local.path to a JSONL file")
        return self


def is_loopback(host: str) -> bool:
    """True for an address only this host can reach (127.0.0.0/8, ::1, localhost)."""
    import ipaddress

    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host.strip().lower() == "localhost"


class DebugLink(Section):
    title: str = Field(..., min_length=1, max_length=200, description="Text of the link in the debug UI.")
    url: str = Field(..., min_length=1, max_length=2_000, description="Where it points.")


class DebugConfig(Section):
    """The flight recorder (engine events in SQLite) and the debug web UI / JSON API serving it."""

    enabled: bool = Field(False, description="Record engine events and serve the debug UI (off unless asked for: it listens on a port).")
    host: str = Field("127.0.0.1", min_length=1, description="Address the debug UI listens on; anything but a loopback address needs debug.token.")
    port: int = Field(8080, ge=0, le=65535, description="Port of the debug UI and its JSON API (0: pick a free one).")
    token: str = Field("", description="Bearer token every /api request and the WebSocket must carry (Authorization: Bearer ...); required when host is not a loopback address. Keep it in a Secret / env override.")
    debug_url: str = Field("", description="URL peers and links use to reach this worker's debug UI; empty: http://<host>:<port> (the host name when bound to all addresses).")
    db_dir: str = Field("/tmp", description="Directory of the recorder's SQLite files (a shared volume lets peers find each other); empty: keep events in memory only.")
    store_events: bool = Field(True, description="Write engine events to the events table.")
    store_config: bool = Field(True, description="Write this worker's config (secrets masked) to the worker_config table, so peers of the consumer group discover it.")
    store_state: bool = Field(True, description="Write a snapshot of the worker's state (partitions, pool, backpressure) every state_sync_interval_seconds.")
    state_sync_interval_seconds: float = Field(10, gt=0, le=3_600, description="Seconds between state snapshots.")
    rotation_interval_minutes: float = Field(60, gt=0, le=10_080, description="Start a new database file (named by worker and time) this often, or sooner once it holds its share of retention_max_events.")
    retention_hours: float = Field(24, gt=0, le=8_760, description="Delete this worker's database files older than this.")
    retention_max_events: int = Field(100_000, ge=10, le=100_000_000, description="Most events kept across this worker's database files; the oldest go first, a whole file at a time (a file takes at most a quarter of this, or 1,000 events), so more than three quarters of it stay.")
    store_output: bool = Field(True, description="Keep tasks' stdout and stderr in their events.")
    flush_interval_seconds: float = Field(5, gt=0, le=600, description="How often buffered events are written (in a thread, never on the event loop).")
    max_buffer: int = Field(50_000, ge=100, le=10_000_000, description="Most events buffered between flushes; past it the oldest are dropped (and counted in knarr_recorder_events_dropped_total), never the pipeline's work.")
    max_ui_rows: int = Field(5_000, ge=10, le=1_000_000, description="Most rows one API query or page returns.")
    log_min_duration_ms: int = Field(500, ge=0, le=86_400_000, description="Tasks taking at least this long are logged as slow (INFO).")
    ws_min_duration_ms: int = Field(500, ge=0, le=86_400_000, description="Events with a duration shorter than this are not pushed to the live WebSocket feed (events without one always are).")
    event_min_duration_ms: int = Field(0, ge=0, le=86_400_000, description="Events with a duration shorter than this are not stored (events without one always are).")
    output_min_duration_ms: int = Field(500, ge=0, le=86_400_000, description="A successful task's stdout/stderr is kept only when it ran at least this long (a failed task's always is).")
    prometheus_url: str = Field("", description="Prometheus server for the UI's dashboard links; empty: no such links.")
    prometheus_rate_interval: str = Field("5m", pattern=r"^[0-9]+(ms|s|m|h|d)$", description="Range of rate() in those links.")
    prometheus_worker_label: str = Field("", description="Label naming the worker in Prometheus (e.g. pod); empty: the links show every worker.")
    prometheus_cluster_label: str = Field("", description="Label naming the cluster in Prometheus; empty: not filtered by cluster.")
    custom_links: list[DebugLink] = Field(default_factory=list, max_length=50, description="Extra links shown in the UI: [{title, url}].")

    @model_validator(mode="after")
    def _token_off_loopback(self) -> DebugConfig:
        if self.enabled and not self.token and not is_loopback(self.host):
            raise ValueError(
                f"debug.host is {self.host!r}, which is reachable from other machines, but debug.token is empty: "
                "set debug.token (e.g. from a Secret through KNARR_DEBUG__TOKEN) or bind debug.host to 127.0.0.1"
            )
        return self
