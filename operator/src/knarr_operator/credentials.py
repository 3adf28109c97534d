"""Credentials: sink fields that may come from a Secret instead of the ConfigMap.

Such a field is either a plain string or ``{valueFrom: {secretKeyRef: {name, key}}}``;
the latter never reaches the rendered config file, it becomes the worker's env
override ``KNARR_SINKS__<TYPE>__<NAME>__<FIELD>``, which the worker deep-merges
over the file.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from knarr.config import MongoSinkConfig, PostgresSinkConfig, RedisSinkConfig
from pydantic import BaseModel

SECRET_FIELDS: dict[type[BaseModel], frozenset[str]] = {
    PostgresSinkConfig: frozenset({"dsn"}),
    MongoSinkConfig: frozenset({"uri"}),
    RedisSinkConfig: frozenset({"url"}),
}

SECRET_FIELDS_BY_SINK_TYPE: dict[str, frozenset[str]] = {
    "postgres": SECRET_FIELDS[PostgresSinkConfig],
    "mongo": SECRET_FIELDS[MongoSinkConfig],
    "redis": SECRET_FIELDS[RedisSinkConfig],
}


@dataclass(frozen=True)
class SecretRef:
    """One config value the worker reads from a Secret, through an env override."""

    env_name: str
    secret: str
    key: str
    config_path: str  # e.g. sinks.postgres.main.dsn, for messages

    def env_var(self) -> dict[str, Any]:
        return {"name": self.env_name, "valueFrom": {"secretKeyRef": {"name": self.secret, "key": self.key}}}


def secret_ref(value: Any) -> tuple[str, str] | None:
    """(secret, key) if ``value`` is a ``{valueFrom: {secretKeyRef: …}}``; else None."""
    if not isinstance(value, Mapping):
        return None
    ref = value.get("valueFrom", {}).get("secretKeyRef", {})
    if not isinstance(ref, Mapping) or not ref.get("name") or not ref.get("key"):
        return None
    return str(ref["name"]), str(ref["key"])
