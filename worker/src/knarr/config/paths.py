"""Paths in a config file are relative to that file's directory, not to where knarr runs.

A field holding a path is annotated ``ConfigPath`` (or ``HandlerSpec`` for the handler,
whose file form ``path/to/file.py:Class`` is a path too). When a YAML file is loaded, every
such value that is relative is joined to the file's directory before validation, so the
same config works from any working directory. Absolute paths, and values that come from
``KNARR_*`` environment overrides or from plain data (``config_from_dict``), stay as given.
"""

from __future__ import annotations

import os
import typing
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel


class RelativeToConfig:
    """Marks a config field whose relative value is relative to the config file."""

    def __init__(self, kind: str) -> None:
        self.kind = kind  # "path", or "handler" (only the file form is a path)

    def __repr__(self) -> str:
        return f"RelativeToConfig({self.kind!r})"


ConfigPath = Annotated[str, RelativeToConfig("path")]
HandlerSpec = Annotated[str, RelativeToConfig("handler")]


def is_file_handler(spec: str) -> bool:
    """True for ``path/to/file.py:Class`` (as opposed to ``package.module:Class``)."""
    target = spec.rpartition(":")[0]
    return target.endswith(".py") or "/" in target


def resolve_value(kind: str, value: str, base: Path) -> str:
    if not value:
        return value
    if kind == "handler":
        if not is_file_handler(value):
            return value
        target, _, name = value.rpartition(":")
        return f"{resolve_value('path', target, base)}:{name}"
    path = Path(os.path.expanduser(value))
    return value if path.is_absolute() else os.path.normpath(base / path)


def resolve_paths(model: type[BaseModel], data: Any, base: Path) -> Any:
    """``data`` (the raw YAML mapping for ``model``) with every relative path joined to ``base``."""
    if not isinstance(data, dict):
        return data
    out = dict(data)
    for name, field in model.model_fields.items():
        if name not in out:
            continue
        marker = next((m for m in field.metadata if isinstance(m, RelativeToConfig)), None)
        if marker is not None:
            if isinstance(out[name], str):
                out[name] = resolve_value(marker.kind, out[name], base)
            continue
        out[name] = _resolve_nested(field.annotation, out[name], base)
    return out


def _resolve_nested(annotation: Any, value: Any, base: Path) -> Any:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return resolve_paths(annotation, value, base)
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is dict and isinstance(value, dict):
        return {k: _resolve_nested(args[1], v, base) for k, v in value.items()}
    models = [a for a in args if isinstance(a, type) and issubclass(a, BaseModel)]
    if models:  # Optional[Model]
        return resolve_paths(models[0], value, base)
    return value


def path_fields(model: type[BaseModel], prefix: str = "") -> list[str]:
    """Dotted keys of every path field (``<name>`` for named instances), for the docs."""
    out = []
    for name, field in model.model_fields.items():
        if any(isinstance(m, RelativeToConfig) for m in field.metadata):
            out.append(prefix + name)
            continue
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            out += path_fields(annotation, f"{prefix}{name}.")
            continue
        origin, args = typing.get_origin(annotation), typing.get_args(annotation)
        if origin is dict and isinstance(args[1], type) and issubclass(args[1], BaseModel):
            out += path_fields(args[1], f"{prefix}{name}.<name>.")
        else:
            out += [p for a in args if isinstance(a, type) and issubclass(a, BaseModel) for p in path_fields(a, f"{prefix}{name}.")]
    return out
