"""Key names: the resource speaks camelCase, the worker's config file snake_case.

The conversion is guided by the worker's models, never by guessing from the data:
user-chosen keys (sink names, ``kafka.extra`` librdkafka properties, executor env)
pass through untouched.
"""

from __future__ import annotations

import typing
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel


def camel(snake: str) -> str:
    head, *rest = snake.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def model_of(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model inside ``annotation`` (``X``, ``X | None``), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = model_of(arg)
        if found is not None and typing.get_origin(annotation) is not dict:
            return found
    return None


def dict_value_model(annotation: Any) -> type[BaseModel] | None:
    """For ``dict[str, X]`` with X a model, X; else None."""
    if typing.get_origin(annotation) is dict:
        return model_of(typing.get_args(annotation)[1])
    return None


def to_snake(model: type[BaseModel], data: Mapping[str, Any], path: str = "") -> dict[str, Any]:
    """Rename the camelCase keys of ``data`` to ``model``'s field names, recursively.

    Unknown keys are kept as given, so the worker's own validation names them.
    """
    by_camel = {camel(name): name for name in model.model_fields}
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = by_camel.get(key, key)
        field = model.model_fields.get(name)
        if field is not None and isinstance(value, Mapping):
            nested = model_of(field.annotation)
            values = dict_value_model(field.annotation)
            if values is not None:
                value = {k: to_snake(values, v, f"{path}{key}.{k}.") if isinstance(v, Mapping) else v for k, v in value.items()}
            elif nested is not None:
                value = to_snake(nested, value, f"{path}{key}.")
        out[name] = value
    return out
