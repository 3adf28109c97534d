"""Which backfills to submit, and what to report about each. Pure.

A backfill runs once. Its outcome is recorded in the Pipeline's status, so a
COMPLETED or FAILED one is not submitted again, not even when its
SparkApplication was deleted or the operator restarted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

FINISHED = frozenset({"COMPLETED", "FAILED", "SUBMISSION_FAILED"})
SUBMITTED = "SUBMITTED"


@dataclass(frozen=True)
class BackfillPlan:
    submit: list[str]  # names whose SparkApplication must be created
    statuses: list[dict[str, Any]]  # the new status.backfills, in spec order
    remove: list[str]  # SparkApplication names no longer in the spec


def plan_backfills(
    wanted: Mapping[str, str],  # backfill name -> SparkApplication name, in spec order
    recorded: Sequence[Mapping[str, Any]],  # status.backfills as last written
    observed: Mapping[str, str | None],  # SparkApplication name -> applicationState.state (None: no state yet)
) -> BackfillPlan:
    before = {r.get("name"): r for r in recorded}
    submit: list[str] = []
    statuses: list[dict[str, Any]] = []
    for name, app in wanted.items():
        prev = before.get(name) or {}
        if app in observed:
            phase = observed[app] or prev.get("phase") or SUBMITTED
        elif prev.get("finished"):
            phase = prev["phase"]
        else:
            submit.append(name)
            phase = SUBMITTED
        statuses.append({"name": name, "phase": phase, "sparkApplication": app, "finished": phase in FINISHED})
    keep = set(wanted.values())
    return BackfillPlan(submit=submit, statuses=statuses, remove=sorted(a for a in observed if a not in keep))
