"""What a window turns into: tasks for the subprocess pool, and their outcomes."""

from __future__ import annotations

import enum
import hashlib
import itertools
import os
import time
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, computed_field, field_validator, model_validator

from knarr.api.labels import MAX_LABEL_KEY, MAX_LABEL_VALUE, MAX_LABELS, check_labels, unknown_task_field

_counter = itertools.count()
_prefix_salt = f"{os.getpid():x}{int(time.time() * 1000) % 0xFFFFFF:06x}"


def make_task_id(prefix: str = "task") -> str:
    """A task id unique within this process and, practically, across workers: ``prefix-<salt>-<n>``."""
    return f"{prefix}-{_prefix_salt}-{next(_counter)}"


def make_stable_task_id(prefix: str, *parts: str) -> str:
    """A task id derived from content: the same ``prefix`` and ``parts`` give the same id, in any process.

    Use it for idempotent re-runs: a message replayed after a restart arranges to the id it had
    before, so ``pending.pending_task_ids`` and the ids stored downstream recognise it. The id is
    ``prefix-`` and 16 hex digits of a SHA-256 over the parts, each preceded by its length so that
    ``("a", "bc")`` and ``("ab", "c")`` differ (the ids Drakkar 2.x makes from the same parts).
    """
    if not parts:
        raise ValueError("make_stable_task_id(prefix, *parts) needs at least one part; "
                         "without one every task would get the same id")
    digest = hashlib.sha256()
    for part in parts:
        if not isinstance(part, str):
            raise TypeError(f"make_stable_task_id parts must be str, got {type(part).__name__} {part!r}; "
                            "convert numbers with str()")
        data = part.encode("utf-8")
        digest.update(len(data).to_bytes(8, "big") + data)
    return f"{prefix}-{digest.hexdigest()[:16]}"


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
    labels: dict[str, str] = Field(
        default_factory=dict,
        description=f"Named tags shown with the task in logs (and on metrics for keys listed in "
                    f"executor.metric_labels): at most {MAX_LABELS}, keys identifiers of up to "
                    f"{MAX_LABEL_KEY} characters, values up to {MAX_LABEL_VALUE}.")
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
    # Persistent mode (docs/task-protocol.md): run in a long-lived program instead of a process of its own.
    persistent: bool | None = Field(
        None, description="True: run in a persistent program; False: spawn a process (binary_path); None: in "
                          "executor.persistent.command when that is set and the task names no binary_path.")
    persistent_command: list[str] | None = Field(
        None, min_length=1, description="The persistent program (argv) to run this task in, instead of "
                                        "executor.persistent.command; implies persistent mode.")

    @model_validator(mode="before")
    @classmethod
    def _name_unknown_fields(cls, data: Any) -> Any:
        if isinstance(data, dict) and not data.keys() <= _TASK_FIELDS:  # a set test: every arrange() builds tasks
            unknown = [key for key in data if key not in _TASK_FIELDS]
            raise ValueError("; ".join(unknown_task_field(key, sorted(_TASK_FIELDS)) for key in unknown))
        return data

    @model_validator(mode="after")
    def _one_mode(self) -> ExecutorTask:
        if self.persistent is False and self.persistent_command:
            raise ValueError("persistent is False but persistent_command is set; drop one of them "
                             "(persistent_command runs the task in that program)")
        return self

    @field_validator("labels")
    @classmethod
    def _bounded_labels(cls, labels: dict[str, str]) -> dict[str, str]:
        return check_labels(labels)


_TASK_FIELDS = frozenset(ExecutorTask.model_fields)


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
    reason: str = "failed"  # failed | timeout | launch | expired | hook | crash | protocol
    attempt: int = 1
    result: ExecutorResult | None = None
    stderr_truncated: bool = False

    @computed_field  # type: ignore[prop-decorator]
    @property
    def kind(self) -> str:
        """The failure class Drakkar handlers branch on, derived from ``reason``.

        ``nonzero_exit`` (reason failed, and crash: a persistent program that died mid-task, like a
        spawned process killed by a signal), ``timeout``, ``launch_failure`` (reason launch), and
        ``internal`` for what knarr synthesised with no subprocess outcome behind it (reasons hook
        and expired) or a persistent program that broke the protocol (reason protocol).
        """
        return ERROR_KINDS.get(self.reason, "internal")


ERROR_KINDS = {"failed": "nonzero_exit", "timeout": "timeout", "launch": "launch_failure",
               "hook": "internal", "expired": "internal", "crash": "nonzero_exit", "protocol": "internal"}


class ErrorAction(str, enum.Enum):
    """What ``on_error`` may return (besides a list of replacement tasks)."""

    RETRY = "retry"
    SKIP = "skip"
