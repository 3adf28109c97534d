"""OpenAPI v3 (structural) schemas generated from pydantic models, in camelCase.

Kubernetes needs a *structural* schema: every node typed, no type inside anyOf.
Only what the worker's models use is supported; anything else raises, so a new
kind of field in the worker breaks `make crds` loudly instead of drifting.
"""

from __future__ import annotations

import types
import typing
from typing import Any, Literal

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from knarr_operator.credentials import SECRET_FIELDS, SECRET_MAPS
from knarr_operator.naming import camel


def secret_or_string(description: str) -> dict[str, Any]:
    return {
        "description": (description + " " if description else "")
        + "A string, or {valueFrom: {secretKeyRef: {name, key}}} to read it from a Secret.",
        # Untyped so it can be either; CEL cannot see such a field, so its shape is
        # checked by the operator (an InvalidConfig condition naming the field).
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
            properties[key] = secret_or_string(field.description or "")
        elif name in secret_maps:
            properties[key] = map_of_secret_or_string(field.description or "")
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
        return dict(extra["x-schema"])  # type: ignore[arg-type]
    schema = annotation_schema(field.annotation, defaults=defaults)
    schema.update({k: v for k, v in extra.items() if k != "x-schema"})
    for meta in field.metadata:
        schema.update(_constraint(meta, schema.get("type")))
    if field.description:
        schema["description"] = field.description
    if defaults and field.default is not PydanticUndefined and field.default is not None:
        schema["default"] = field.default
    return schema


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
