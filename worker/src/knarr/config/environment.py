"""``KNARR_*`` environment variables as configuration overrides.

``KNARR_`` + the key path with ``__`` between levels: ``KNARR_EXECUTOR__MAX_EXECUTORS=8``.
Field names match ignoring case. Map keys — sink names, ``kafka.extra`` librdkafka
properties, HTTP header names, ``executor.env`` variable names — are the user's, and their
case matters (``sasl.password`` is not ``SASL.PASSWORD`` to librdkafka, ``FOO`` is not ``foo``
to a task): one that matches a key already in the file, ignoring case, overrides that key;
any other is taken exactly as written. So ``KNARR_SINKS__KAFKA__RESULTS__TOPIC`` overrides the
file's ``results`` sink, and ``KNARR_KAFKA__EXTRA__sasl.password`` adds ``sasl.password``.

A value is text, converted by validation like a YAML scalar; a variable naming a whole
section or map takes JSON (``KNARR_KAFKA__EXTRA='{"client.rack": "a"}'``).

Which ``KNARR_*`` variables are configuration — tools and scripts around knarr export their
own (``KNARR_CACHE_DIR``, ``KNARR_BIN_DIR``, ...), and those must not stop a worker, while a
misspelt override must:

- with ``__`` in it, a variable is an override, and one naming no config key is an error;
- without ``__``, it is an override only when it names a top-level key exactly
  (``KNARR_KAFKA='{"brokers": ...}'``, ``KNARR_HANDLER=...``);
- any other is an error when doubling one of its ``_`` would make it an override
  (``KNARR_EXECUTOR_MAX_EXECUTORS``: did you mean ``KNARR_EXECUTOR__MAX_EXECUTORS``),
  and is otherwise not configuration and left alone;
- ``KNARR_CONFIG``, ``KNARR_TERMINATION_LOG``, ``KNARR_SUPERVISOR_PID`` and the operator's ``KNARR_OPERATOR_*`` are
  never overrides.
"""

from __future__ import annotations

import json
import types
import typing
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

ENV_PREFIX = "KNARR_"
ENV_DELIMITER = "__"
CONFIG_PATH_ENV = "KNARR_CONFIG"
# Where a failed worker writes its one-line reason for Kubernetes (knarr.observability.termination).
TERMINATION_LOG_ENV = "KNARR_TERMINATION_LOG"
# Set by a supervising `knarr run` (processes > 1) in each worker process it starts (knarr.supervisor).
SUPERVISOR_PID_ENV = "KNARR_SUPERVISOR_PID"
NOT_CONFIG_ENV = frozenset({CONFIG_PATH_ENV, TERMINATION_LOG_ENV, SUPERVISOR_PID_ENV})
# The operator's own settings (KNARR_OPERATOR_RESYNC_SECONDS, ...) are not worker config keys.
RESERVED_ENV_PREFIX = "KNARR_OPERATOR_"


def env_overrides(model: type[BaseModel], env: Mapping[str, str], file_data: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The nested overrides the ``KNARR_*`` variables of ``env`` ask for, and a problem line per unusable one.

    ``file_data`` (the YAML, as loaded) decides which existing map key a variable names.
    """
    overrides: dict[str, Any] = {}
    problems: list[str] = []
    for name in sorted(env):
        segments = _override_segments(model, name)
        if segments is None:
            suggestion = _meant_override(model, name)
            if suggestion is not None:
                problems.append(
                    f"  {name}: not a config override; did you mean {suggestion}? "
                    f"(sections and keys are separated by two underscores)"
                )
            continue
        resolved = _resolve(model, segments, file_data)
        if resolved is None:
            problems.append(
                f"  {name}: no config key {'.'.join(s.lower() for s in segments)!r}; env overrides look like "
                f"KNARR_SECTION__KEY (e.g. KNARR_KAFKA__BROKERS)"
            )
            continue
        path, scalar = resolved
        value: Any = env[name]
        if not scalar:
            try:
                value = json.loads(value)
            except ValueError:
                problems.append(f"  {name}: {'.'.join(path)} is a section or map; give it as JSON, or set its keys one by one")
                continue
        _set(overrides, path, value)
    return overrides, problems


def not_config_env(model: type[BaseModel], env: Mapping[str, str]) -> list[str]:
    """The ``KNARR_*`` variables of ``env`` that are neither overrides nor misspelt ones: left alone."""
    return [
        name for name in sorted(env)
        if _has_prefix(name) and _override_segments(model, name) is None and _meant_override(model, name) is None
    ]


def _has_prefix(name: str) -> bool:
    upper = name.upper()
    return upper.startswith(ENV_PREFIX) and upper not in NOT_CONFIG_ENV and not upper.startswith(RESERVED_ENV_PREFIX)


def _override_segments(model: type[BaseModel], name: str) -> list[str] | None:
    """The key path ``name`` overrides, as written, or ``None`` when it is not an override at all."""
    if not _has_prefix(name):
        return None
    rest = name[len(ENV_PREFIX) :]
    if ENV_DELIMITER in rest or rest.lower() in model.model_fields:
        return rest.split(ENV_DELIMITER)
    return None


def _meant_override(model: type[BaseModel], name: str) -> str | None:
    """The override a variable that is none probably meant: itself with one ``_`` doubled, naming a key."""
    if not _has_prefix(name):
        return None
    rest = name[len(ENV_PREFIX) :]
    for at, char in enumerate(rest):
        if char == "_":
            resolved = _resolve(model, [rest[:at], rest[at + 1 :]], {})
            if resolved is not None:
                return env_name(model, resolved[0])
    return None


def env_name(model: type[BaseModel], path: list[str]) -> str:
    """The variable that sets config key ``path``: field names upper-cased, map keys as they are."""
    annotation: Any = model
    parts = []
    for key in path:
        if typing.get_origin(annotation) in (dict, Mapping):
            parts.append(key)
            annotation = typing.get_args(annotation)[1]
            continue
        submodel = _model_in(annotation)
        field = submodel.model_fields.get(key) if submodel is not None else None
        parts.append(key.upper())
        annotation = field.annotation if field is not None else None
    return ENV_PREFIX + ENV_DELIMITER.join(parts)


def deep_merge(base: Mapping[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``top`` laid over it: maps merge key by key, anything else is replaced."""
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def _resolve(model: type[BaseModel], segments: list[str], file_data: Any) -> tuple[list[str], bool] | None:
    """The config path ``segments`` name (field names normalised, map keys matched), and whether it is a scalar."""
    annotation: Any = model
    data = file_data
    path: list[str] = []
    for segment in segments:
        if not segment:
            return None
        if typing.get_origin(annotation) in (dict, Mapping):
            key = _existing_key(data, segment)
            annotation = typing.get_args(annotation)[1]
        else:
            submodel = _model_in(annotation)
            if submodel is None:
                return None
            key = segment.lower()
            if key not in submodel.model_fields:
                return None
            annotation = submodel.model_fields[key].annotation
        path.append(key)
        data = data.get(key) if isinstance(data, Mapping) else None
    return path, _is_scalar(annotation)


def _existing_key(data: Any, segment: str) -> str:
    if isinstance(data, Mapping):
        if segment in data:
            return segment
        matches = [k for k in data if isinstance(k, str) and k.lower() == segment.lower()]
        if len(matches) == 1:
            return matches[0]
    return segment


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The model of ``X`` or ``X | None``."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        models = [a for a in typing.get_args(annotation) if isinstance(a, type) and issubclass(a, BaseModel)]
        return models[0] if len(models) == 1 else None
    return None


def _is_scalar(annotation: Any) -> bool:
    if _model_in(annotation) is not None:
        return False
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return all(_is_scalar(a) for a in typing.get_args(annotation))
    return origin not in (dict, Mapping, list, tuple, set)


def _set(data: dict[str, Any], path: list[str], value: Any) -> None:
    for key in path[:-1]:
        nested = data.get(key)
        if not isinstance(nested, dict):
            nested = data[key] = {}
        data = nested
    data[path[-1]] = value
