"""Which backfills to submit, which to give up on, and what to report about each. Pure.

A backfill runs once. Its outcome is recorded in the Pipeline's status, so a
COMPLETED or FAILED one is not submitted again, not even when its
SparkApplication was deleted (by hand, or by the Spark operator when its
``timeToLiveSeconds`` ran out) or the operator restarted. A recorded outcome is final.

A SparkApplication that is not running ``submissionDeadlineSeconds`` after it was
created — no Spark operator picked it up (no state), or its driver never started
(``SUBMITTED``: no room, an image that cannot be pulled) — fails the backfill with
reason ``SubmissionDeadlineExceeded``, and is deleted, so that it cannot start later
behind a status that says it failed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

FINISHED = frozenset({"COMPLETED", "FAILED", "SUBMISSION_FAILED"})
SUBMITTED = "SUBMITTED"
FAILED = "FAILED"
# States of a SparkApplication whose driver has not started yet ("" or none: not picked up at all).
WAITING = frozenset({None, "", SUBMITTED})
SUBMISSION_DEADLINE_EXCEEDED = "SubmissionDeadlineExceeded"
SPARK_OPERATOR_TOO_OLD = "SparkOperatorTooOld"


@dataclass(frozen=True)
class Wanted:
    app: str  # the SparkApplication's name
    submission_deadline_seconds: float


@dataclass(frozen=True)
class Observed:
    state: str | None  # .status.applicationState.state; None: none yet
    created_at: float | None  # .metadata.creationTimestamp, epoch seconds


@dataclass(frozen=True)
class BackfillPlan:
    submit: list[str]  # names whose SparkApplication must be created
    statuses: list[dict[str, Any]]  # the new status.backfills, in spec order
    remove: list[str]  # SparkApplication names no longer in the spec
    expired: list[str]  # backfill names that missed their submission deadline just now (their SparkApplication goes)


def failed(name: str, app: str, reason: str, message: str) -> dict[str, Any]:
    return {"name": name, "phase": FAILED, "sparkApplication": app, "finished": True, "reason": reason, "message": message}


def plan_backfills(
    wanted: Mapping[str, Wanted],  # backfill name -> its SparkApplication, in spec order
    recorded: Sequence[Mapping[str, Any]],  # status.backfills as last written
    observed: Mapping[str, Observed],  # SparkApplication name -> what the API server holds
    now: float,
) -> BackfillPlan:
    before = {r.get("name"): r for r in recorded}
    submit: list[str] = []
    expired: list[str] = []
    statuses: list[dict[str, Any]] = []
    for name, want in wanted.items():
        prev = before.get(name) or {}
        seen = observed.get(want.app)
        if prev.get("finished"):
            statuses.append(dict(prev))
        elif seen is None:
            submit.append(name)
            statuses.append(_entry(name, want.app, SUBMITTED))
        elif seen.state in WAITING and _overdue(seen, want, now):
            expired.append(name)
            statuses.append(failed(name, want.app, SUBMISSION_DEADLINE_EXCEEDED, _deadline_message(want, seen, now)))
        else:
            statuses.append(_entry(name, want.app, seen.state or prev.get("phase") or SUBMITTED))
    keep = {w.app for w in wanted.values()}
    return BackfillPlan(submit=submit, statuses=statuses, remove=sorted(a for a in observed if a not in keep), expired=expired)


def _entry(name: str, app: str, phase: str) -> dict[str, Any]:
    return {"name": name, "phase": phase, "sparkApplication": app, "finished": phase in FINISHED}


def _overdue(seen: Observed, want: Wanted, now: float) -> bool:
    return seen.created_at is not None and now - seen.created_at > want.submission_deadline_seconds


def _deadline_message(want: Wanted, seen: Observed, now: float) -> str:
    where = (f"still {seen.state}: its driver never started (no room for it, or an image that cannot be pulled?)"
             if seen.state else "without a state: no Spark operator picked it up (is one running, watching this namespace?)")
    return (f"SparkApplication {want.app} was {where} {int(now - (seen.created_at or now))}s after it was created, past "
            f"submissionDeadlineSeconds ({int(want.submission_deadline_seconds)}); it was deleted so that it cannot start "
            f"later. To run the range again, add a backfill with a new name.")
