"""The worker's configuration: one set of pydantic models, the single source of truth.

The CRD schema, the Helm values and the configuration reference in the README are
generated from these models; a test fails when they drift.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

_IDENT = r"^[A-Za-z_][A-Za-z0-9_.-]*$"


class Section(BaseModel):
    """Base for every config section: unknown keys are errors, not silently ignored."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class KafkaConfig(Section):
    brokers: str = Field("localhost:9092", min_length=1, description="Kafka bootstrap servers, comma-separated host:port.")
    source_topic: str = Field("input-events", min_length=1, description="Topic to consume from.")
    consumer_group: str = Field("knarr-workers", min_length=1, description="Consumer group id.")
    max_poll_records: int = Field(100, ge=1, description="Most messages fetched per poll batch.")
    max_poll_interval_ms: int = Field(300_000, ge=1_000, description="Longest gap between polls before the broker evicts the consumer.")
    session_timeout_ms: int = Field(45_000, ge=1_000, description="Group membership session timeout.")
    heartbeat_interval_ms: int = Field(3_000, ge=100, description="Heartbeat interval to the group coordinator.")
    extra: dict[str, str | int | float | bool] = Field(
        default_factory=dict,
        description="Extra librdkafka consumer properties (e.g. security.protocol, sasl.*), passed through as given; the connection ones (security.*, sasl.*, ssl.*, socket.*, …) also reach every producer, Spark reader and the operator's lag reader.",
    )

    @model_validator(mode="after")
    def _heartbeat_below_session(self) -> KafkaConfig:
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise ValueError(
                f"heartbeat_interval_ms ({self.heartbeat_interval_ms}) must be lower than "
                f"session_timeout_ms ({self.session_timeout_ms}); a third of it is usual"
            )
        return self


class ExecutorConfig(Section):
    binary_path: str | None = Field(None, min_length=1, description="Default binary for tasks; None means every task must set its own binary_path.")
    max_executors: int = Field(4, ge=1, description="Subprocesses running at once across all partitions (pool slots).")
    task_timeout_seconds: float = Field(120, gt=0, description="Wall-clock limit per subprocess; on expiry its whole process group is killed.")
    window_size: int = Field(100, ge=1, description="Most messages handed to one arrange() call.")
    window_linger_ms: int = Field(0, ge=0, description="How long a window may wait to fill up to window_size before arrange() runs (0: no wait).")
    max_retries: int = Field(3, ge=0, description="Retries of a failed task when on_error returns RETRY (0: none).")
    retry_backoff_base_seconds: float = Field(0.5, ge=0, description="First retry delay; doubles per attempt, with jitter.")
    retry_backoff_max_seconds: float = Field(30, ge=0, description="Upper bound of a retry delay.")
    max_per_partition: int | None = Field(None, ge=1, description="Most pool slots one partition may hold at once (None: no cap), so a hot partition cannot starve the others.")
    drain_timeout_seconds: float = Field(30, gt=0, description="Longest wait for in-flight work on shutdown or revoke; on timeout the final commit is skipped (replay instead of loss).")
    backpressure_high_multiplier: int = Field(32, ge=1, description="Pause consumption when queued + in-flight messages reach max_executors x this.")
    backpressure_low_multiplier: int = Field(4, ge=1, description="Resume when they fall to max(1, max_executors x this).")
    env: dict[str, str] = Field(default_factory=dict, description="Environment variables added to every subprocess (tasks may add their own).")
    max_tasks_per_window: int = Field(10_000, ge=1, le=1_000_000, description="Most tasks one arrange() call may return; a larger result is refused and the window dead-lettered instead of buffered.")
    on_retries_exhausted: Literal["dlq", "discard"] = Field("dlq", description="A task whose on_error asked for RETRY and that has no attempt left: dead-letter its source messages (dlq) or count it as failed only (discard).")
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
    def backpressure_low(self) -> int:
        return max(1, self.max_executors * self.backpressure_low_multiplier)


class SinkBase(Section):
    ui_url: str = Field("", description="Link shown to operators for browsing this sink's data.")


class KafkaSinkConfig(SinkBase):
    topic: str = Field(..., min_length=1, description="Topic to produce to.")
    brokers: str = Field("", description="Bootstrap servers; empty inherits kafka.brokers.")
    extra: dict[str, str | int | float | bool] = Field(default_factory=dict, description="Extra librdkafka producer properties, applied after the connection settings (security.*, sasl.*, ssl.*) it takes from kafka.extra.")


class PostgresSinkConfig(SinkBase):
    dsn: str = Field(..., min_length=1, description="PostgreSQL connection string (keep credentials in a Secret / env override).")
    pool_min: int = Field(2, ge=1)
    pool_max: int = Field(10, ge=1)


class MongoSinkConfig(SinkBase):
    uri: str = Field(..., min_length=1, description="MongoDB connection URI.")
    database: str = Field(..., min_length=1)


class HttpSinkConfig(SinkBase):
    url: str = Field(..., min_length=1)
    method: Literal["POST", "PUT", "PATCH"] = "POST"
    timeout_seconds: float = Field(30, gt=0)
    headers: dict[str, str] = Field(default_factory=dict)
    max_retries: int = Field(3, ge=0)


class RedisSinkConfig(SinkBase):
    url: str = Field("redis://localhost:6379/0", min_length=1)
    key_prefix: str = ""


class FileSinkConfig(SinkBase):
    base_path: str = Field(..., min_length=1, description="Directory every written path must stay inside.")


SinkType = Literal["kafka", "postgres", "mongo", "http", "redis", "filesystem"]


class SinksConfig(Section):
    """Named sink instances per type: ``sinks.<type>.<name>``."""

    kafka: dict[str, KafkaSinkConfig] = Field(default_factory=dict)
    postgres: dict[str, PostgresSinkConfig] = Field(default_factory=dict)
    mongo: dict[str, MongoSinkConfig] = Field(default_factory=dict)
    http: dict[str, HttpSinkConfig] = Field(default_factory=dict)
    redis: dict[str, RedisSinkConfig] = Field(default_factory=dict)
    filesystem: dict[str, FileSinkConfig] = Field(default_factory=dict)

    @field_validator("kafka", "postgres", "mongo", "http", "redis", "filesystem")
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
        for sink_type in ("kafka", "postgres", "mongo", "http", "redis", "filesystem"):
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
    path: str = Field("", description="Write dead letters as JSON Lines to this file instead of a topic (used with the local source).")
    on_send_failure: Literal["stall", "drop"] = Field("stall", description="When the DLQ refuses a record 5 times: keep retrying with backoff while the partition waits and readiness says why (stall), or count, log and let the offset complete (drop).")
    max_record_bytes: int = Field(900_000, ge=1_000, le=100_000_000, description="Largest DLQ record; bigger payloads keep their head, with their full size and SHA-256 in the record.")


class MetricsConfig(Section):
    enabled: bool = True
    port: int = Field(9090, ge=0, le=65535, description="Port of /metrics, /healthz and /readyz (0: pick a free one).")


class LoggingConfig(Section):
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    format: Literal["json", "console"] = "json"

    @field_validator("level", mode="before")
    @classmethod
    def _upper(cls, value: object) -> object:
        return value.upper() if isinstance(value, str) else value


class LocalSourceConfig(Section):
    """The embedded source: a JSONL file read as a partitioned log (no Kafka needed)."""

    path: str = Field(..., min_length=1, description="JSONL file; one message per line.")
    partitions: int = Field(1, ge=1, description="Lines are spread over this many partitions (line number modulo).")
    offsets_path: str = Field("", description="Where committed offsets are kept so a rerun resumes; empty: '<path>.offsets.json'.")
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
