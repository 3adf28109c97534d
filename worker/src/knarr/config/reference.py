"""The configuration reference, generated from the models (``python -m knarr.config.reference``).

The README embeds it between markers, and the exit-code table (``knarr.errors``) between its
own; ``--write README.md`` regenerates both, and a test fails when either drifts.
"""

from __future__ import annotations

import sys
import typing
from pathlib import Path

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from knarr.config.models import SinksConfig
from knarr.config.paths import path_fields
from knarr.config.root import KnarrConfig
from knarr.errors import exit_code_table

START, END = "<!-- config-reference:start -->", "<!-- config-reference:end -->"
EXIT_CODES_START, EXIT_CODES_END = "<!-- exit-codes:start -->", "<!-- exit-codes:end -->"


def _type_name(annotation: object) -> str:
    text = str(annotation).replace("typing.", "").replace("<class '", "").replace("'>", "")
    return text.replace("knarr.config.models.", "").replace("|", "\\|")


def _default(field) -> str:
    if field.default is PydanticUndefined and field.default_factory is None:
        return "(required)"
    value = field.default_factory() if field.default_factory is not None else field.default
    if isinstance(value, BaseModel):
        return ""
    if value is None:
        return "(unset)"
    return f"`{value!r}`"


def _constraints(field) -> str:
    out = []
    for meta in field.metadata:
        for attr, sym in (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("min_length", "min length")):
            if getattr(meta, attr, None) is not None:
                out.append(f"{sym} {getattr(meta, attr)}")
    return ", ".join(out)


def _section(title: str, model: type[BaseModel], prefix: str) -> list[str]:
    lines = [f"### `{title}`", "", "| key | type | default | constraint | description |", "|---|---|---|---|---|"]
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            continue
        desc = (field.description or "").replace("|", "\\|")
        lines.append(f"| `{prefix}{name}` | {_type_name(annotation)} | {_default(field)} | {_constraints(field)} | {desc} |")
    return lines + [""]


def render() -> str:
    parts = [
        "Every key can be set in the YAML file or overridden by an environment variable: "
        "`KNARR_` + the path in upper case with `__` between levels (e.g. `KNARR_EXECUTOR__MAX_EXECUTORS=8`, "
        "`KNARR_SINKS__KAFKA__RESULTS__TOPIC=out`). Key names match ignoring case; map keys (sink names, "
        "`kafka.extra` properties, header and `executor.env` names) match a key of the file ignoring case, "
        "or are taken as written (`KNARR_KAFKA__EXTRA__sasl.password`). A section or map given whole takes JSON. "
        "Unknown keys and invalid values stop startup; values of secrets (passwords, tokens, `sasl.*`, DSNs, "
        "`Authorization` headers, URLs with credentials) are never echoed in errors.",
        "",
        "Which `KNARR_*` variables are overrides: every one with `__` in it (an unknown key there stops startup), "
        "and one without that names a top-level key exactly (`KNARR_KAFKA='{\"brokers\": \"k:9092\"}'`, "
        "`KNARR_HANDLER`). One that would name a key if one of its `_` were doubled stops startup too, saying "
        "so (`KNARR_EXECUTOR_MAX_EXECUTORS`: did you mean `KNARR_EXECUTOR__MAX_EXECUTORS`). Any other — "
        "`KNARR_CACHE_DIR`, `KNARR_BIN_DIR` and the like, set by scripts and tools — is not configuration and is "
        "left alone, as are `KNARR_CONFIG`, `KNARR_TERMINATION_LOG` and the operator's `KNARR_OPERATOR_*`.",
        "",
        "Paths in the YAML file — " + ", ".join(f"`{key}`" for key in path_fields(KnarrConfig))
        + " (the file form of `handler`) — are relative to the file's own directory, so a config works from any "
        "working directory; absolute paths stay as they are, and a path given by an env override is taken as given "
        "(relative to the working directory).",
        "",
    ]
    parts += _section("(root)", KnarrConfig, "")
    for name, field in KnarrConfig.model_fields.items():
        annotation = field.annotation
        if name == "sinks":
            continue
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            parts += _section(name, annotation, f"{name}.")
            for sub_name, sub in annotation.model_fields.items():
                args = [a for a in typing.get_args(sub.annotation) if isinstance(a, type) and issubclass(a, BaseModel)]
                if args:
                    parts += _section(f"{name}.{sub_name}", args[0], f"{name}.{sub_name}.")
    parts.append("### `sinks`\n\nNamed instances per type: `sinks.<type>.<name>.<key>`. At least one sink is required.\n")
    for sink_type, field in SinksConfig.model_fields.items():
        model = typing.get_args(field.annotation)[1]
        parts += _section(f"sinks.{sink_type}.<name>", model, "")
    return "\n".join(parts).rstrip() + "\n"


def embed(text: str, reference: str, start: str = START, end: str = END) -> str:
    head, _, rest = text.partition(start)
    _, _, tail = rest.partition(end)
    return f"{head}{start}\n{reference}{end}{tail}"


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "--write":
        path = Path(argv[1])
        text = embed(path.read_text(), render())
        path.write_text(embed(text, exit_code_table(), EXIT_CODES_START, EXIT_CODES_END))
        return 0
    sys.stdout.write(render())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
