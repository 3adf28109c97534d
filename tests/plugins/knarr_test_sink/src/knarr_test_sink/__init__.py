"""A plug-in sink for knarr's tests: every payload becomes one JSON line in one file.

Two switch files let a test play the sink's server: while ``unavailable_while`` exists the sink
is "down" (TransientSinkError: knarr waits), while ``refuse_while`` exists it refuses every
batch (PermanentSinkError: on_delivery_error decides, the DLQ by default).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from knarr.sinks.base import PermanentSinkError, SinkConnectError, TransientSinkError


class JsonlOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(..., min_length=1, description="The file every payload is appended to.")
    unavailable_while: str = Field("", description="While this file exists, deliveries fail as transient.")
    refuse_while: str = Field("", description="While this file exists, deliveries are refused.")
    batch_limit: int = Field(1000, ge=1, le=100_000, description="Most payloads in one delivery.")


class JsonlSink:
    config_model = JsonlOptions

    def __init__(self, name: str, options: JsonlOptions) -> None:
        self.name = name
        self.options = options
        self.path = Path(options.path)
        self.connected = False

    @classmethod
    def from_config(cls, name: str, options: JsonlOptions, root: Any) -> JsonlSink:
        return cls(name, options)

    async def connect(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.touch()
        except OSError as exc:
            raise SinkConnectError(f"test-jsonl sink {self.name!r}: {self.path} is not writable ({exc.strerror})") from None
        self.connected = True

    async def deliver(self, payloads: list[Any]) -> None:
        if self.options.unavailable_while and Path(self.options.unavailable_while).exists():
            raise TransientSinkError(f"{self.path} is unavailable (switch file present)")
        if self.options.refuse_while and Path(self.options.refuse_while).exists():
            raise PermanentSinkError(f"{self.path} refuses payloads (switch file present)")
        if len(payloads) > self.options.batch_limit:
            raise PermanentSinkError(f"{len(payloads)} payloads in one batch, more than {self.options.batch_limit}")
        lines = [json.dumps({"sink": self.name, "data": p.data_dict(), "meta": p.meta}, sort_keys=True) + "\n"
                 for p in payloads]
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write("".join(lines))

    async def close(self) -> None:
        self.connected = False
