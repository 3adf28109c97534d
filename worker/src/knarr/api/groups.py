"""Per-message aggregation as the handler sees it: MessageGroup, and PendingContext for arrange()."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from knarr.api.messages import SourceMessage
from knarr.api.tasks import ExecutorError, ExecutorResult, ExecutorTask


class MessageGroup(BaseModel):
    """Every task derived from one source message, once all of them are terminal.

    ``tasks`` is the full history (replaced originals included), so
    ``total == succeeded + failed + replaced`` always holds.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    source_message: SourceMessage
    tasks: list[ExecutorTask] = Field(default_factory=list)
    results: list[ExecutorResult] = Field(default_factory=list)
    errors: list[ExecutorError] = Field(default_factory=list)
    started_at: float = 0.0
    finished_at: float = 0.0

    @property
    def succeeded(self) -> int:
        return len(self.results)

    @property
    def failed(self) -> int:
        return len(self.errors)

    @property
    def total(self) -> int:
        return len(self.tasks)

    @property
    def replaced(self) -> int:
        return self.total - self.succeeded - self.failed

    @property
    def all_succeeded(self) -> bool:
        return self.total > 0 and self.failed == 0

    @property
    def any_failed(self) -> bool:
        return self.failed > 0

    @property
    def is_empty(self) -> bool:
        return self.total == 0

    @property
    def duration_seconds(self) -> float:
        return max(0.0, self.finished_at - self.started_at)


class PendingContext(BaseModel):
    """The partition's tasks that are still in flight when arrange() is called (for de-duplication)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    pending_tasks: list[ExecutorTask] = Field(default_factory=list)
    pending_task_ids: set[str] = Field(default_factory=set)
