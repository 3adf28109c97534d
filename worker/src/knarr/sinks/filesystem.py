"""Filesystem sink: JSON Lines appended to files under ``base_path`` (and never outside it)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from knarr.config.models import FileSinkConfig
from knarr.config.root import KnarrConfig
from knarr.sinks.base import SinkConnectError


class PathEscapeError(ValueError):
    """A payload's path points outside the sink's base_path."""


def target_path(base: Path, relative: str) -> Path:
    """Where a payload path lands under ``base``; refuses anything that escapes it."""
    candidate = (base / relative).resolve()
    if candidate != base and base not in candidate.parents:
        raise PathEscapeError(f"path {relative!r} escapes base_path {str(base)!r}; use a path inside it")
    return candidate


class FileSink:
    sink_type = "filesystem"

    def __init__(self, name: str, config: FileSinkConfig) -> None:
        self.name = name
        self.config = config
        self.base = Path(config.base_path).resolve()

    @classmethod
    def from_config(cls, name: str, config: FileSinkConfig, root: KnarrConfig) -> FileSink:
        return cls(name, config)

    async def connect(self) -> None:
        try:
            self.base.mkdir(parents=True, exist_ok=True)
            probe = self.base / ".knarr-write-probe"
            probe.write_text("")
            probe.unlink()
        except OSError as exc:
            raise SinkConnectError(
                f"filesystem sink {self.name!r}: base_path {str(self.base)!r} is not writable ({exc.strerror}); "
                "point base_path at a writable directory"
            ) from None

    async def deliver(self, payloads: list[Any]) -> None:
        # Validate every path before writing anything, so a bad one fails the batch cleanly.
        lines: dict[Path, list[str]] = defaultdict(list)
        for p in payloads:
            lines[target_path(self.base, p.path)].append(p.data_json() + "\n")
        for path, chunk in lines.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("a", encoding="utf-8") as fh:
                fh.write("".join(chunk))

    async def close(self) -> None:
        return None
