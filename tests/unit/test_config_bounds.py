"""Every number in the configuration has sensible bounds, and a value past one is named with the bound."""

from __future__ import annotations

import math
import typing

import pytest
import yaml
from pydantic import BaseModel

from knarr.config import ConfigError, KnarrConfig, config_from_dict, load_config

SINK = {"filesystem": {"out": {"base_path": "/tmp/knarr-out"}}}


def nested(path: str, value: object) -> dict:
    data: dict = {}
    node = data
    *parents, leaf = path.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value
    return data


def load(path: str, value: object, extra: dict | None = None) -> KnarrConfig:
    data = {"sinks": dict(SINK), **(extra or {})}
    for key, section in nested(path, value).items():
        data[key] = {**data.get(key, {}), **section} if isinstance(section, dict) else section
    return config_from_dict(data)


TOO_LARGE = [
    ("kafka.max_poll_records", 2_000_000, "100000"),
    ("kafka.max_poll_interval_ms", 86_400_001, "86400000"),
    ("kafka.session_timeout_ms", 3_600_001, "3600000"),
    ("kafka.heartbeat_interval_ms", 3_600_001, "3600000"),
    ("executor.max_executors", 100_000_000, "1024"),
    ("executor.task_timeout_seconds", 86_401, "86400"),
    ("executor.window_size", 1e9, "100000"),
    ("executor.window_linger_ms", 600_001, "600000"),
    ("executor.max_retries", 101, "100"),
    ("executor.retry_backoff_base_seconds", 3_601, "3600"),
    ("executor.retry_backoff_max_seconds", 86_401, "86400"),
    ("executor.max_per_partition", 1_025, "1024"),
    ("executor.drain_timeout_seconds", 3_601, "3600"),
    ("executor.backpressure_high_multiplier", 1_000_001, "1000000"),
    ("executor.backpressure_low_multiplier", 1_000_001, "1000000"),
    ("metrics.port", 65_536, "65535"),
    ("metrics.max_connections", 1_025, "1024"),
]


@pytest.mark.parametrize(("path", "value", "bound"), TOO_LARGE, ids=[p for p, _, _ in TOO_LARGE])
def test_a_value_above_its_bound_is_refused_naming_the_key_and_the_bound(path, value, bound):
    with pytest.raises(ConfigError) as err:
        load(path, value)
    line = next(line for line in str(err.value).splitlines() if line.strip().startswith(f"{path}:"))
    assert f"less than or equal to {bound}" in line
    assert f"[env: KNARR_{path.upper().replace('.', '__')}]" in line


@pytest.mark.parametrize(
    ("path", "bound"),
    [("pool_max", "1000"), ("pool_min", "1000")],
)
def test_a_postgres_pool_above_its_bound_is_refused(path, bound):
    sink = {"dsn": "postgresql://db/x", path: 1_001}
    with pytest.raises(ConfigError, match=rf"sinks\.postgres\.main\.{path}: .*less than or equal to {bound}"):
        config_from_dict({"sinks": {"postgres": {"main": sink}}})


def test_an_http_sink_timeout_above_an_hour_is_refused():
    with pytest.raises(ConfigError, match=r"sinks\.http\.api\.timeout_seconds: .*less than or equal to 3600"):
        config_from_dict({"sinks": {"http": {"api": {"url": "https://example.invalid", "timeout_seconds": 3_601}}}})


def test_a_local_source_with_more_partitions_than_a_worker_can_run_is_refused():
    with pytest.raises(ConfigError, match=r"source\.local\.partitions: .*less than or equal to 1024"):
        load("source.local", {"path": "in.jsonl", "partitions": 1_025}, {"source": {"type": "local"}})


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan, "inf", "NaN"])
def test_infinity_and_nan_are_not_numbers_here(value):
    with pytest.raises(ConfigError, match=r"executor\.task_timeout_seconds: Input should be a finite number"):
        load("executor.task_timeout_seconds", value)


def test_yaml_infinity_is_refused_in_every_float_key(tmp_path):
    floats = [p for p, f in _numeric_fields(KnarrConfig) if f.annotation is float]
    executor: dict = {}
    for path in (p for p in floats if p.startswith("executor.")):
        *sections, leaf = path.split(".")[1:]
        node = executor
        for section in sections:  # executor.persistent.*: a section inside the section
            node = node.setdefault(section, {})
        node[leaf] = math.inf
    text = "sinks: {filesystem: {out: {base_path: /tmp/o}}}\n" + yaml.safe_dump({"executor": executor})
    assert ".inf" in text
    (tmp_path / "knarr.yaml").write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(tmp_path / "knarr.yaml", env={})
    for path in (p for p in floats if p.startswith("executor.")):
        assert f"{path}: Input should be a finite number" in str(err.value)


def test_a_session_timeout_longer_than_the_poll_interval_is_refused_as_the_kafka_client_would():
    with pytest.raises(ConfigError, match=r"session_timeout_ms \(400000\) must not exceed max_poll_interval_ms \(300000\)"):
        load("kafka", {"session_timeout_ms": 400_000, "heartbeat_interval_ms": 3_000})


def test_a_postgres_pool_whose_minimum_exceeds_its_maximum_is_refused():
    with pytest.raises(ConfigError, match=r"pool_min \(5\) must not exceed pool_max \(2\)"):
        config_from_dict({"sinks": {"postgres": {"main": {"dsn": "postgresql://db/x", "pool_min": 5, "pool_max": 2}}}})


def _numeric_fields(model: type[BaseModel], prefix: str = "") -> list[tuple[str, object]]:
    found = []
    for name, field in model.model_fields.items():
        annotation = field.annotation
        args = [a for a in typing.get_args(annotation) if a is not type(None)] or [annotation]
        for arg in args:
            if typing.get_origin(arg) is dict:
                arg = typing.get_args(arg)[1]
            if isinstance(arg, type) and issubclass(arg, BaseModel):
                found += _numeric_fields(arg, f"{prefix}{name}.")
            elif arg in (int, float):
                found.append((f"{prefix}{name}", field))
    return found


def test_every_numeric_key_has_an_upper_bound():
    unbounded = [
        path for path, field in _numeric_fields(KnarrConfig)
        if not any(getattr(m, "le", None) is not None or getattr(m, "lt", None) is not None for m in field.metadata)
    ]
    assert unbounded == []
