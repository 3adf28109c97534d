"""OpenAPI v3 (structural) schemas generated from pydantic models, in camelCase.

Kubernetes needs a *structural* schema: every node typed, no type inside anyOf.
Only what the worker's models use is supported; anything else raises, so a new
kind of field in the worker breaks `make crds` loudly instead of drifting.
"""

from __future__ import annotations

import functools
import re
import types
import typing
from typing import Any, Literal

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from knarr_operator.credentials import SECRET_FIELDS, SECRET_MAPS
from knarr_operator.naming import camel

SECRET_NOTE = "A string, or {valueFrom: {secretKeyRef: {name, key}}} to read it from a Secret."


def secret_or_string(description: str) -> dict[str, Any]:
    return {
        "description": description,
        # Untyped so it can be either; CEL cannot see such a field, so its shape is
        # checked by the operator (a ConfigRejected condition naming the field).
        "x-kubernetes-preserve-unknown-fields": True,
    }


def map_of_secret_or_string(description: str) -> dict[str, Any]:
    return {
        "type": "object",
        "description": (description + " " if description else "")
        + "Each value: a string, or {valueFrom: {secretKeyRef: {name, key}}} to read it from a Secret.",
        "additionalProperties": {"x-kubernetes-preserve-unknown-fields": True},
    }


def model_schema(model: type[BaseModel], *, defaults: bool = False, exclude: frozenset[str] = frozenset()) -> dict[str, Any]:
    """The object schema of ``model``; ``defaults`` also writes field defaults into the schema."""
    properties: dict[str, Any] = {}
    required: list[str] = []
    secrets = SECRET_FIELDS.get(model, frozenset())
    secret_maps = SECRET_MAPS.get(model, frozenset())
    for name, field in model.model_fields.items():
        if name in exclude:
            continue
        key = field.alias or camel(name)
        if name in secrets:
            properties[key] = secret_or_string(explain_text(field, SECRET_NOTE))
        elif name in secret_maps:
            properties[key] = map_of_secret_or_string(explain_text(field))
        else:
            properties[key] = field_schema(field, defaults=defaults)
        if field.is_required():
            required.append(key)
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if model.__doc__ and model.__module__.startswith("knarr_operator"):
        schema["description"] = " ".join(model.__doc__.split())
    if required:
        schema["required"] = required
    return schema


def field_schema(field: FieldInfo, *, defaults: bool) -> dict[str, Any]:
    extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
    if "x-schema" in extra:
        schema = dict(extra["x-schema"])  # type: ignore[arg-type]
        description = explain_text(field)
        if description and "description" not in schema:
            schema["description"] = description
        return schema
    schema = annotation_schema(field.annotation, defaults=defaults)
    schema.update({k: v for k, v in extra.items() if k != "x-schema"})
    for meta in field.metadata:
        schema.update(_constraint(meta, schema.get("type")))
    description = explain_text(field)
    if description:
        schema["description"] = description
    if defaults and field.default is not PydanticUndefined and field.default is not None:
        schema["default"] = field.default
    return schema


# A snake_case word in a description is a config key only if some model has a field by that
# name; hook names (on_error) and other words stay as written.
_SNAKE_WORD = re.compile(r"\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+\b")


def explain_text(field: FieldInfo, note: str = "") -> str:
    """The description ``kubectl explain`` shows: keys in the resource's camelCase, a note, and the default."""
    text = _SNAKE_WORD.sub(lambda m: camel(m[0]) if m[0] in field_names() else m[0], field.description or "")
    text = f"{text} {note}".strip()
    default = default_text(field)
    if default:
        text = f"{text.rstrip()} Default: {default}." if text else f"Default: {default}."
    return text


def default_text(field: FieldInfo) -> str:
    """The default as it would be written in the resource; empty when there is nothing worth showing."""
    if field.default_factory is not None or field.default in (PydanticUndefined, None, ""):
        return ""
    value = field.default
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


@functools.cache
def field_names() -> frozenset[str]:
    """Every field name of the worker's and the operator's models."""
    from knarr.config import KnarrConfig

    from knarr_operator.spec import OperatorSpec

    names: set[str] = set()
    todo: list[type[BaseModel]] = [KnarrConfig, OperatorSpec]
    while todo:
        model = todo.pop()
        for name, field in model.model_fields.items():
            names.add(name)
            todo += [m for m in _models_in(field.annotation) if m not in todo]
    return frozenset(names)


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]


def annotation_schema(annotation: Any, *, defaults: bool) -> dict[str, Any]:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if annotation is str:
        return {"type": "string"}
    if annotation is bool:
        return {"type": "boolean"}
    if annotation is int:
        return {"type": "integer"}
    if annotation is float:
        return {"type": "number"}
    if origin is Literal:
        return {"type": "string", "enum": list(args)}
    if origin in (typing.Union, types.UnionType):
        members = [a for a in args if a is not type(None)]
        if len(members) == 1:
            return annotation_schema(members[0], defaults=defaults)
        if str in members and all(m in (str, int, float, bool) for m in members):
            # A scalar that librdkafka & co. take as text anyway.
            return {"type": "string"}
        raise TypeError(f"no structural schema for union {annotation!r}")
    if origin is dict:
        return {"type": "object", "additionalProperties": annotation_schema(args[1], defaults=defaults)}
    if origin is list:
        return {"type": "array", "items": annotation_schema(args[0], defaults=defaults)}
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return model_schema(annotation, defaults=defaults)
    raise TypeError(f"no structural schema for {annotation!r}; teach knarr_operator.schema about it")


def _constraint(meta: Any, kind: str | None) -> dict[str, Any]:
    if isinstance(meta, annotated_types.Ge):
        return {"minimum": meta.ge}
    if isinstance(meta, annotated_types.Gt):
        return {"minimum": meta.gt, "exclusiveMinimum": True}
    if isinstance(meta, annotated_types.Le):
        return {"maximum": meta.le}
    if isinstance(meta, annotated_types.Lt):
        return {"maximum": meta.lt, "exclusiveMaximum": True}
    if isinstance(meta, annotated_types.MinLen):
        return {"minLength" if kind == "string" else "minItems": meta.min_length}
    if isinstance(meta, annotated_types.MaxLen):
        return {"maxLength" if kind == "string" else "maxItems": meta.max_length}
    pattern = getattr(meta, "pattern", None)
    if pattern:
        return {"pattern": pattern}
    return {}
