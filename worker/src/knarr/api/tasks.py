"""What a window turns into: tasks for the subprocess pool, and their outcomes."""

from __future__ import annotations

import enum
import itertools
import os
import time
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

_counter = itertools.count()
_prefix_salt = f"{os.getpid():x}{int(time.time() * 1000) % 0xFFFFFF:06x}"


def make_task_id(prefix: str = "task") -> str:
    """A task id unique within this process and, practically, across workers: ``prefix-<salt>-<n>``."""
    return f"{prefix}-{_prefix_salt}-{next(_counter)}"


class PrecomputedResult(BaseModel):
    """An outcome known without running anything (e.g. a cache hit): the task skips the pool."""

    stdout: str = ""
    stderr: str = ""
    exit_code: int = 0
    duration_seconds: float = 0.0


class ExecutorTask(BaseModel):
    """One subprocess invocation, tied to the source messages (``source_offsets``) it works for."""

    model_config = ConfigDict(extra="forbid")

    task_id: str = Field(default_factory=make_task_id)
    args: list[str] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)
    source_offsets: list[int] = Field(default_factory=list)
    binary_path: str | None = None
    stdin: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    parent_task_id: str | None = None
    precomputed: PrecomputedResult | None = None
    # Lifecycle controls (all optional; None falls back to the executor config).
    timeout_seconds: float | None = Field(None, gt=0)
    delay_seconds: float | None = Field(None, ge=0)
    not_before: float | None = Field(None, description="Unix time before which the task must not start.")
    expires_at: float | None = Field(None, description="Unix time after which a task that has not started is dropped as expired.")
    max_attempts: int | None = Field(None, ge=1)


class ExecutorResult(BaseModel):
    """What one subprocess run produced. ``pid`` is None for precomputed results."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    task: ExecutorTask
    exit_code: int
    stdout: str = ""
    stderr: str = ""
    duration_seconds: float = 0.0
    pid: int | None = None
    attempt: int = 1
    stdout_truncated: bool = False  # more than executor.max_output_bytes was printed: stdout holds the head
    stderr_truncated: bool = False


class ExecutorError(BaseModel):
    """Why a task failed: non-zero exit, timeout, launch failure, expiry or a hook exception."""

    task: ExecutorTask
    exit_code: int | None = None
    stderr: str = ""
    exception: str | None = None
    pid: int | None = None
    reason: str = "failed"  # failed | timeout | launch | expired | hook
    attempt: int = 1
    result: ExecutorResult | None = None
    stderr_truncated: bool = False


class ErrorAction(str, enum.Enum):
    """What ``on_error`` may return (besides a list of replacement tasks)."""

    RETRY = "retry"
    SKIP = "skip"
