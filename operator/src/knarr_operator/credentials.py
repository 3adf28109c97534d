"""Credentials: config values that come from Secrets, never from the ConfigMap.

A credential-capable value is a plain string or ``{valueFrom: {secretKeyRef: {name, key}}}``.
The latter never reaches the rendered config file: it becomes the worker's env override
(``KNARR_SINKS__POSTGRES__main__DSN``, ``KNARR_KAFKA__EXTRA__sasl.password``), which the worker
deep-merges over the file. A secret written inline (a ``sasl.password``, an ``Authorization``
header, a DSN with a password) is refused: it would sit in plain text in the ConfigMap (and
in the Pipeline, which more people can read than Secrets).

Which values may come from a Secret:
- whole fields, listed in :data:`SECRET_FIELDS` (sink connection strings and URLs, the debug UI's token,
  the shared cache tier's URL);
- every value of the maps in :data:`SECRET_MAPS` (librdkafka properties, HTTP headers, task env).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from knarr.config import (
    ExecutorConfig,
    HttpSinkConfig,
    KafkaConfig,
    KafkaSinkConfig,
    KnarrConfig,
    MongoSinkConfig,
    PostgresSinkConfig,
    RedisSinkConfig,
)
from knarr.config.cache import SharedCacheConfig
from knarr.config.environment import ENV_DELIMITER, env_name
from knarr.config.models import DebugConfig
from knarr.config.secrets import has_credentials, is_secret_key
from pydantic import BaseModel

from knarr_operator.naming import dict_value_model, model_of

SECRET_FIELDS: dict[type[BaseModel], frozenset[str]] = {
    PostgresSinkConfig: frozenset({"dsn"}),
    MongoSinkConfig: frozenset({"uri"}),
    RedisSinkConfig: frozenset({"url"}),
    HttpSinkConfig: frozenset({"url"}),
    DebugConfig: frozenset({"token"}),
    SharedCacheConfig: frozenset({"url"}),
}
SECRET_MAPS: dict[type[BaseModel], frozenset[str]] = {
    KafkaConfig: frozenset({"extra"}),
    KafkaSinkConfig: frozenset({"extra"}),
    HttpSinkConfig: frozenset({"headers"}),
    ExecutorConfig: frozenset({"env"}),
}

# What every Kubernetes version accepts as an env var name (newer ones accept more).
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")


class CredentialError(ValueError):
    """A credential is written where it would end up in plain text, or cannot travel as an env override."""


@dataclass(frozen=True)
class SecretRef:
    """One config value the worker reads from a Secret, through an env override."""

    env_name: str
    secret: str
    key: str
    path: tuple[str, ...]  # the config keys, e.g. ("kafka", "extra", "sasl.password")

    @property
    def config_path(self) -> str:
        """For messages, e.g. kafka.extra.sasl.password."""
        return ".".join(self.path)

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


def split_off_secrets(data: dict[str, Any]) -> list[SecretRef]:
    """Remove every secretKeyRef from ``data`` (the worker's snake_case config), in place; return them.

    Raises :class:`CredentialError` listing every inline secret and every key that cannot be
    an env name.
    """
    refs: list[SecretRef] = []
    problems: list[str] = []
    _walk(KnarrConfig, data, [], refs, problems)
    if problems:
        raise CredentialError("\n".join(problems))
    return refs


def _walk(model: type[BaseModel], data: dict[str, Any], path: list[str], refs: list[SecretRef], problems: list[str]) -> None:
    for name, field in model.model_fields.items():
        value = data.get(name)
        if value is None:
            continue
        here = [*path, name]
        if name in SECRET_FIELDS.get(model, ()):
            if _take(data, name, here, refs, problems) is None and value:
                if is_secret_key(name):  # a token is a secret whatever it looks like
                    problems.append(_inline(here, "is a secret"))
                elif has_credentials(value):
                    problems.append(_inline(here, "holds a password"))
        elif name in SECRET_MAPS.get(model, ()) and isinstance(value, dict):
            for key in list(value):
                if _take(value, key, [*here, key], refs, problems) is None and (is_secret_key(key) or has_credentials(value[key])):
                    problems.append(_inline([*here, key], "is a secret"))
        elif (values := dict_value_model(field.annotation)) is not None and isinstance(value, dict):
            for key, item in value.items():
                if isinstance(item, dict):
                    _walk(values, item, [*here, key], refs, problems)
        elif (nested := model_of(field.annotation)) is not None and isinstance(value, dict):
            _walk(nested, value, here, refs, problems)


def _take(container: dict[str, Any], key: str, path: list[str], refs: list[SecretRef], problems: list[str]) -> tuple[str, str] | None:
    """If ``container[key]`` is a secretKeyRef: record it, remove it, return it."""
    ref = secret_ref(container[key])
    if ref is None:
        return None
    env = env_name(KnarrConfig, path)
    config_path = ".".join(path)
    if ENV_DELIMITER in key or not _ENV_NAME.match(env):
        problems.append(
            f"  {config_path}: from a Secret, it reaches the worker as env {env!r}, which Kubernetes does not accept "
            f"as a variable name; use only letters, digits, '.', '-' and single '_' in the key"
        )
        return ref
    del container[key]
    refs.append(SecretRef(env_name=env, secret=ref[0], key=ref[1], path=tuple(path)))
    return ref


def _inline(path: list[str], what: str) -> str:
    return (
        f"  {'.'.join(path)}: {what}, and written here it would be stored in plain text in the ConfigMap; "
        f"put it in a Secret and write {{valueFrom: {{secretKeyRef: {{name: <secret>, key: <key>}}}}}} instead"
    )


# --- rolling the workers when a Secret changes ------------------------------------------------


def referenced_secrets(refs: Iterable[SecretRef], env: Iterable[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """Every (secret, key) the workers read: the config's credentials and the user's env entries."""
    found = {(r.secret, r.key) for r in refs}
    for entry in env:
        ref = secret_ref(entry)
        if ref is not None:
            found.add(ref)
    return sorted(found)


def secret_value(secrets: Mapping[str, Mapping[str, Any] | None], name: str, key: str) -> str | None:
    """The decoded value of ``key`` in Secret ``name`` (as read from the API), or None."""
    secret = secrets.get(name)
    encoded = (secret or {}).get("data", {}).get(key) if secret else None
    if encoded is None:
        return None
    return base64.b64decode(encoded).decode("utf-8", errors="replace")


def kafka_extra_with_secrets(extra: Mapping[str, Any], refs: Iterable[SecretRef], secrets: Mapping[str, Mapping[str, Any] | None]) -> dict[str, Any]:
    """``kafka.extra`` as the operator's own Kafka client needs it: credentials read from their Secrets.

    A credential that cannot be read is left out rather than sent as its placeholder.
    """
    out = dict(extra)
    for ref in refs:
        if ref.path[:2] == ("kafka", "extra") and len(ref.path) == 3:
            value = secret_value(secrets, ref.secret, ref.key)
            if value is None:
                out.pop(ref.path[2], None)
            else:
                out[ref.path[2]] = value
    return out


def secrets_digest(wanted: Iterable[tuple[str, str]], secrets: Mapping[str, Mapping[str, Any] | None]) -> str:
    """A digest that changes when any referenced key of any referenced Secret changes.

    Each value is hashed with an HMAC keyed by its Secret's uid, so the digest (stored on
    the pod template, readable by anyone who can read Deployments) is no help in guessing a
    weak secret: the key is readable only by those who may read the Secret anyway.
    """
    entries = []
    for name, key in sorted(set(wanted)):
        secret = secrets.get(name)
        if secret is None:
            entries.append([name, key, "missing"])
            continue
        value = (secret.get("data") or {}).get(key)
        if value is None:
            entries.append([name, key, "no such key"])
            continue
        uid = str(secret.get("metadata", {}).get("uid", ""))
        entries.append([name, key, hmac.new(uid.encode(), str(value).encode(), hashlib.sha256).hexdigest()])
    return hashlib.sha256(json.dumps(entries, separators=(",", ":")).encode()).hexdigest()[:16]
