"""Translate a Drakkar worker config (and its ``DK_*`` environment) into knarr's.

Pure: data in, data out. ``RULES`` is the whole mapping, one row per Drakkar key (``*``
matches one key, e.g. a sink name): a ``Move`` says where the value goes in knarr's config, a
``Drop`` why it has no equivalent. A dropped key whose value already is knarr's behaviour (a
disabled section, ``logging.output: stderr`` …) is *ignored*, not lost. Both Drakkar layouts
are read: 2.x (``sources.kafka.topic``, ``kafka.client_config``, ``ui``) and the older one
(``kafka.source_topic``, ``debug``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

DRAKKAR_ENV_PREFIX = "DK_"
KNARR_ENV_PREFIX = "KNARR_"
ENV_DELIMITER = "__"

Path = tuple[str, ...]


@dataclass(frozen=True)
class Move:
    """The value at ``pattern`` goes to ``target``; ``values`` renames enum values (a value not in it is dropped)."""

    pattern: str
    target: str
    values: Mapping[Any, Any] | None = None


@dataclass(frozen=True)
class Drop:
    """No equivalent in knarr, for ``reason``; ``harmless(value)`` says when dropping changes nothing."""

    pattern: str
    reason: str
    harmless: Callable[[Any], bool] | None = None


def _is_false(value: Any) -> bool:
    return value is False or (isinstance(value, str) and value.strip().lower() in ("false", "0", "no"))


def _disabled(value: Any) -> bool:
    """A section with ``enabled: false`` (from YAML, or ``DK_X__ENABLED=false`` from the environment)."""
    return isinstance(value, Mapping) and _is_false(value.get("enabled"))


def _equals(expected: Any) -> Callable[[Any], bool]:
    """The value is ``expected`` (an environment variable's string form counts too)."""
    def check(value: Any) -> bool:
        if isinstance(value, str) and not isinstance(expected, str):
            return value.strip().lower() == str(expected).lower()
        return value == expected
    return check


# Drakkar's typed Kafka security block; knarr passes librdkafka properties through ``extra``.
_SECURITY = {
    "protocol": "security.protocol",
    "sasl_mechanism": "sasl.mechanism",
    "sasl_username": "sasl.username",
    "sasl_password": "sasl.password",
    "ssl_ca_location": "ssl.ca.location",
    "ssl_certificate_location": "ssl.certificate.location",
    "ssl_key_location": "ssl.key.location",
    "ssl_key_password": "ssl.key.password",
    "ssl_endpoint_identification_algorithm": "ssl.endpoint.identification.algorithm",
}
_POLL = ("consumer_group", "max_poll_records", "max_poll_interval_ms", "session_timeout_ms", "heartbeat_interval_ms")
_EXECUTOR = ("binary_path", "env", "max_executors", "task_timeout_seconds", "window_size", "max_retries",
             "drain_timeout_seconds", "backpressure_high_multiplier", "backpressure_low_multiplier")
_SINK_KEYS = {
    "kafka": ("topic", "brokers", "ui_url"),
    "postgres": ("dsn", "pool_min", "pool_max", "ui_url"),
    "mongo": ("uri", "database", "ui_url"),
    "http": ("url", "method", "timeout_seconds", "headers", "max_retries", "ui_url"),
    "redis": ("url", "key_prefix", "ui_url"),
    "filesystem": ("base_path", "ui_url"),
}
_OWN_UI = ("knarr has a flight recorder and debug UI of its own, set up under debug: (debug.enabled, debug.port, "
           "debug.db_dir, ...: the README's 'Flight recorder and debug UI'); Drakkar's UI settings do not carry "
           "over")
# The older layout's debug: section (the flight recorder and its UI) has the same keys in knarr.
_DEBUG = ("enabled", "port", "debug_url", "db_dir", "store_events", "store_config", "store_state",
          "state_sync_interval_seconds", "rotation_interval_minutes", "retention_hours", "retention_max_events",
          "store_output", "flush_interval_seconds", "max_buffer", "max_ui_rows", "log_min_duration_ms",
          "ws_min_duration_ms", "event_min_duration_ms", "output_min_duration_ms", "prometheus_url",
          "prometheus_rate_interval", "prometheus_worker_label", "prometheus_cluster_label")
_UI_LINK = "knarr's debug UI links to other tools through debug.custom_links ([{title, url}])"
_ALLOW_LIST = ("a knarr task gets only the worker's variables that executor.env_inherit names (PATH, HOME, LANG, "
               "LC_*, TZ, TMPDIR by default), then executor.env; name there any others your tasks need")
_OUTPUT_CAP = ("knarr keeps at most executor.max_output_bytes of each of a task's streams (8 MiB by default, one cap "
               "for stdout and stderr, at most 256 MiB, never unlimited): set it to the larger of Drakkar's two caps")


def _kafka_client(source: str, target: str) -> list[Move]:
    """client_config and the security block of one Kafka client, as librdkafka properties in ``extra``."""
    rules = [Move(f"{source}.client_config.*", f"{target}.extra.*")]
    rules += [Move(f"{source}.security.{key}", f"{target}.extra.[{prop}]") for key, prop in _SECURITY.items()]
    return rules


RULES: list[Move | Drop] = [
    Move("worker_name_env", "worker_name_env"),
    Move("cluster_name", "cluster_name"),
    Move("cluster_name_env", "cluster_name_env"),
    Move("kafka.brokers", "kafka.brokers"),
    *_kafka_client("kafka", "kafka"),
    Drop("kafka.ui_url", _UI_LINK),
    Drop("kafka.ui_cluster_name", _UI_LINK),
    # Drakkar 2.x: the Kafka source has its own section.
    Move("sources.kafka.topic", "kafka.source_topic"),
    *[Move(f"sources.kafka.{key}", f"kafka.{key}") for key in _POLL],
    Move("sources.kafka.on_parse_error", "source.on_parse_error", {"skip": "arrange", "dlq": "dlq"}),
    Drop("sources.kafka.enabled", "knarr always consumes the Kafka source; a config with it off has nothing "
         "for knarr to do", harmless=_equals(True)),
    Drop("sources.kafka.startup_align_enabled", "knarr starts consuming as soon as partitions are assigned "
         "(no startup alignment)", harmless=_equals(False)),
    Drop("sources.kafka.startup_min_wait_seconds", "knarr has no startup alignment"),
    Drop("sources.kafka.startup_align_interval_seconds", "knarr has no startup alignment"),
    Drop("sources.http", "knarr has no HTTP source (arrange_http_request); keep those workers on Drakkar",
         harmless=_disabled),
    # The older layout: the source topic and poll settings under kafka:, as in knarr.
    Move("kafka.source_topic", "kafka.source_topic"),
    *[Move(f"kafka.{key}", f"kafka.{key}") for key in _POLL],
    *[Move(f"executor.{key}", f"executor.{key}") for key in _EXECUTOR],
    Drop("executor.env_inherit_parent", _ALLOW_LIST),
    Drop("executor.env_inherit_deny", f"{_ALLOW_LIST}: a variable it does not name never reaches a task"),
    Drop("executor.max_stdout_bytes", _OUTPUT_CAP),
    Drop("executor.max_stderr_bytes", _OUTPUT_CAP),
    *[Move(f"sinks.{kind}.*.{key}", f"sinks.{kind}.*.{key}") for kind, keys in _SINK_KEYS.items() for key in keys],
    *_kafka_client("sinks.kafka.*", "sinks.kafka.*"),
    Drop("sinks.kafka.*.flush_timeout_seconds", "knarr flushes a Kafka sink on each delivery and on shutdown, "
         "bounded by executor.drain_timeout_seconds"),
    Drop("sinks.postgres.*.statements", "knarr's PostgresPayload inserts rows; named statements are not supported"),
    Drop("sinks.mongo.*.statements", "knarr's MongoPayload inserts documents; named statements are not supported"),
    Drop("sinks.redis.*.scripts", "knarr's RedisPayload sets keys; scripts are not supported"),
    Drop("sinks.http.*.encoding", "knarr's HTTP sink sends JSON only", harmless=_equals("json")),
    Drop("sinks.custom", "knarr's plug-in sinks (sinks.plugin, PluginPayload: docs/plugins.md) take the place of "
         "custom sinks; port each one as a plug-in", harmless=lambda v: not v),
    Drop("sinks.delivery_timeout_seconds", "knarr bounds deliveries by each sink's own timeout and retries"),
    Drop("sinks.circuit_breaker", "knarr retries a failing sink with backoff (on_delivery_error) and has no "
         "circuit breaker"),
    Move("dlq.topic", "dlq.topic"),
    Move("dlq.brokers", "dlq.brokers"),
    Move("dlq.on_send_failure", "dlq.on_send_failure"),
    *_kafka_client("dlq", "dlq"),
    Drop("dlq.flush_timeout_seconds", "knarr waits for each dead letter's delivery report"),
    Move("metrics.enabled", "metrics.enabled"),
    Move("metrics.port", "metrics.port"),
    Drop("metrics.task_label_histograms", "knarr has no per-label duration histograms; executor.metric_labels "
         "counts task outcomes per label instead", harmless=lambda v: not v),
    Move("logging.level", "logging.level"),
    Move("logging.format", "logging.format"),
    Drop("logging.output", "knarr logs to stderr", harmless=_equals("stderr")),
    Drop("ui", _OWN_UI, harmless=_disabled),  # Drakkar 2.x: its UI's own nested layout
    *[Move(f"debug.{key}", f"debug.{key}") for key in _DEBUG],
    Drop("debug.custom_links", "knarr's debug.custom_links entries are {title, url}: write them out again"),
    Drop("throughput", "knarr has no throughput cost accounting"),
    Drop("runtime_health", "knarr always measures its event loop's lag (knarr_event_loop_lag_seconds, a warning "
         "naming any stall past 0.25 s) and /healthz checks the loop; none of it has settings", harmless=_disabled),
    Drop("io", "knarr has no shared I/O thread pool setting"),
    Drop("offload", "knarr has no offload pool (self.offload); use asyncio.to_thread in the handler"),
    Move("cache.enabled", "cache.enabled"),
    Move("cache.db_dir", "cache.db_dir"),
    Move("cache.flush_interval_seconds", "cache.flush_interval_seconds"),
    Move("cache.max_memory_entries", "cache.max_entries"),
    Drop("cache.cleanup_interval_seconds", "knarr drops expired rows on every flush (cache.flush_interval_seconds)"),
    Drop("cache.peer_sync", "knarr workers share cache entries through a Redis server, not each other's files: "
         "set cache.shared.url", harmless=_disabled),
    Drop("storage", "knarr keeps no local database files"),
    Drop("shared", "knarr keeps no shared files"),
    Drop("history", "knarr keeps no event history to archive", harmless=_disabled),
    Drop("fleet", "knarr workers find each other through the consumer group only; no registry or cache exchange"),
    Drop("app", "knarr has no app: section; load your application settings yourself (e.g. in on_startup)",
         harmless=lambda v: not v),
]

# Drakkar defaults that differ from knarr's: written out when the input leaves them unset, so
# the migrated worker behaves as the Drakkar one did.
DRAKKAR_DEFAULTS: list[tuple[str, Any, str]] = [
    ("kafka.consumer_group", "drakkar-workers", "Drakkar's default group, so the committed offsets carry over "
                                                 "(knarr's default is knarr-workers)"),
    ("dlq.on_send_failure", "drop", "Drakkar's default (knarr's default is stall: wait for the DLQ rather than "
                                    "lose a dead letter)"),
]


@dataclass
class Migration:
    """What became of a Drakkar config: the knarr config and, per key, what happened to it."""

    config: dict[str, Any] = field(default_factory=dict)
    moved: list[tuple[str, str]] = field(default_factory=list)  # (drakkar key, knarr key)
    defaults: list[tuple[str, Any, str]] = field(default_factory=list)  # (knarr key, value, why)
    ignored: list[tuple[str, str]] = field(default_factory=list)  # (drakkar key, why it changes nothing)
    dropped: list[tuple[str, str]] = field(default_factory=list)  # (drakkar key, reason) — not carried over

    @property
    def complete(self) -> bool:
        return not self.dropped


# --- paths ---------------------------------------------------------------------------------

def _segments(text: str) -> Path:
    """``a.*.[x.y]`` -> ("a", "*", "x.y"): brackets keep a dotted name (a librdkafka property) whole."""
    return tuple(m.group(1) if m.group(1) is not None else m.group(2)
                 for m in re.finditer(r"\[([^\]]*)\]|([^.\[]+)", text))


def _show(path: Path) -> str:
    return ".".join(f"[{p}]" if "." in p else p for p in path)


def _match(pattern: Path, path: Path) -> list[str] | None:
    """The segments ``*`` stood for, or None when ``path`` is not ``pattern``."""
    if len(pattern) != len(path):
        return None
    stars = []
    for want, got in zip(pattern, path, strict=True):
        if want == "*":
            stars.append(got)
        elif want != got:
            return None
    return stars


def _fill(target: Path, stars: list[str]) -> Path:
    it = iter(stars)
    return tuple(next(it) if seg == "*" else seg for seg in target)


_COMPILED = [(_segments(rule.pattern), rule) for rule in RULES]


def find_rule(path: Path) -> tuple[Move | Drop, list[str]] | None:
    for pattern, rule in _COMPILED:
        stars = _match(pattern, path)
        if stars is not None:
            return rule, stars
    return None


def _get(tree: Mapping[str, Any], path: Path) -> Any:
    node: Any = tree
    for part in path:
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def _put(tree: dict[str, Any], path: Path, value: Any) -> Any:
    """Set ``path`` to ``value``; returns the value already there (None if none)."""
    node = tree
    for part in path[:-1]:
        node = node.setdefault(part, {})
    previous = node.get(path[-1])
    node[path[-1]] = value
    return previous


# --- the config ----------------------------------------------------------------------------

def migrate_config(drakkar: Mapping[str, Any]) -> Migration:
    """Translate a Drakkar config tree (as loaded from YAML) into knarr's."""
    out = Migration()
    origin: dict[Path, str] = {}
    _walk(drakkar, (), out, origin)
    _kafka_source_check(drakkar, out)
    _debug_check(drakkar, out)
    source_off = _is_false(_get(drakkar, ("sources", "kafka", "enabled")))
    for key, value, why in DRAKKAR_DEFAULTS:
        path = _segments(key)
        if source_off and path[0] == "kafka":
            continue  # no Kafka source in the input: its defaults mean nothing
        if _get(out.config, path) is None:
            _put(out.config, path, value)
            out.defaults.append((key, value, why))
    return out


def _walk(node: Any, path: Path, out: Migration, origin: dict[Path, str]) -> None:
    found = find_rule(path) if path else None
    if found is None:
        if isinstance(node, Mapping) and node:
            for key, value in node.items():
                _walk(value, (*path, str(key)), out, origin)
        elif path:
            out.dropped.append((_show(path), "not a Drakkar 2.x key knarr knows; check its spelling"))
        return
    rule, stars = found
    if isinstance(rule, Drop):
        if rule.harmless is not None and rule.harmless(node):
            out.ignored.append((_show(path), f"{_describe(node)}; {rule.reason}"))
        else:
            out.dropped.append((_show(path), rule.reason))
        return
    value = node
    if rule.values is not None:
        if value not in rule.values:
            out.dropped.append((_show(path), f"value {value!r} has no knarr equivalent "
                                             f"(knarr takes {', '.join(map(repr, rule.values))})"))
            return
        value = rule.values[value]
    target = _fill(_segments(rule.target), stars)
    previous = _get(out.config, target)
    if previous is not None and previous != value:
        out.dropped.append((_show(path), f"conflicts with {origin[target]} (both set {_show(target)}); "
                                         f"kept {previous!r}"))
        return
    _put(out.config, target, value)
    origin[target] = _show(path)
    out.moved.append((_show(path), _show(target)))


def _describe(value: Any) -> str:
    if _disabled(value):
        return "disabled"
    return f"{value!r} is knarr's behaviour" if not isinstance(value, Mapping) else "empty"


def _debug_check(drakkar: Mapping[str, Any], out: Migration) -> None:
    """The older layout's recorder and UI are on unless debug.enabled says otherwise; knarr's are off."""
    debug = drakkar.get("debug")
    if isinstance(debug, Mapping) and "enabled" not in debug:
        out.dropped.append(("debug.enabled", "unset, which in Drakkar means its recorder and debug UI are on; "
                                             "knarr's are off unless debug.enabled is true (set it if that is meant)"))


def _kafka_source_check(drakkar: Mapping[str, Any], out: Migration) -> None:
    """Drakkar 2.x consumes Kafka only with sources.kafka.enabled: true (its default is false)."""
    sources = drakkar.get("sources")
    if isinstance(sources, Mapping) and _get(sources, ("kafka", "enabled")) is None:
        out.dropped.append(("sources.kafka.enabled", "unset, which in Drakkar 2.x means the Kafka source is off; "
                                                     "knarr always consumes it (set it to true if that is meant)"))


# --- the environment -----------------------------------------------------------------------

@dataclass
class EnvMigration:
    """``DK_*`` variables renamed to ``KNARR_*`` (values translated like the YAML), and those that cannot be."""

    renamed: dict[str, str] = field(default_factory=dict)  # DK name -> KNARR name
    values: dict[str, str] = field(default_factory=dict)  # KNARR name -> value
    ignored: list[tuple[str, str]] = field(default_factory=list)
    dropped: list[tuple[str, str]] = field(default_factory=list)


def migrate_env(env: Mapping[str, str]) -> EnvMigration:
    """Rename the ``DK_*`` variables of ``env``; other variables are not looked at.

    The variables are translated together, as the tree they make, so that e.g.
    ``DK_UI__ENABLED=false`` makes ``DK_UI__PORT`` harmless.
    """
    out = EnvMigration()
    paths: dict[str, Path] = {}
    tree: dict[str, Any] = {}
    for name in sorted(env):
        if not name.upper().startswith(DRAKKAR_ENV_PREFIX):
            continue
        if name.upper() == "DK_CONFIG":
            out.renamed[name] = "KNARR_CONFIG"
            out.values["KNARR_CONFIG"] = env[name]
            continue
        paths[name] = tuple(p.lower() for p in name[len(DRAKKAR_ENV_PREFIX):].split(ENV_DELIMITER))
        _put(tree, paths[name], env[name])
    result = Migration()
    _walk(tree, (), result, {})
    moved = {_segments(old): _segments(new) for old, new in result.moved}
    for name, path in paths.items():
        if path in moved:
            target = moved[path]
            new = KNARR_ENV_PREFIX + ENV_DELIMITER.join(seg if "." in seg else seg.upper() for seg in target)
            out.renamed[name] = new
            out.values[new] = str(_get(result.config, target))
        elif (why := _under(path, result.ignored)) is not None:
            out.ignored.append((name, why))
        else:
            out.dropped.append((name, _under(path, result.dropped) or "no knarr equivalent"))
    return out


def _under(path: Path, entries: list[tuple[str, str]]) -> str | None:
    """The reason of the entry whose key is ``path`` or one of its parents."""
    for key, why in entries:
        key_path = _segments(key)
        if path[:len(key_path)] == key_path:
            return why
    return None


def _nest(path: Path, value: Any) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    _put(tree, path, value)
    return tree
