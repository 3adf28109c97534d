"""Which backfills are submitted, which are given up on, and what the status says about them."""

from __future__ import annotations

from knarr_operator.backfills import Observed, Wanted, plan_backfills

WANTED = {"replay": Wanted("search-replay", submission_deadline_seconds=900)}
NOW = 1_800_000_000.0


def seen(state: str | None, age: float = 0) -> Observed:
    return Observed(state=state, created_at=NOW - age)


def test_a_new_backfill_is_submitted():
    plan = plan_backfills(WANTED, [], {}, NOW)
    assert plan.submit == ["replay"]
    assert plan.statuses == [{"name": "replay", "phase": "SUBMITTED", "sparkApplication": "search-replay", "finished": False}]


def test_the_spark_application_state_is_mirrored():
    plan = plan_backfills(WANTED, [], {"search-replay": seen("RUNNING")}, NOW)
    assert plan.submit == []
    assert plan.statuses[0]["phase"] == "RUNNING"


def test_a_finished_backfill_is_not_run_again_even_without_its_spark_application():
    recorded = [{"name": "replay", "phase": "COMPLETED", "sparkApplication": "search-replay", "finished": True}]
    plan = plan_backfills(WANTED, recorded, {}, NOW)
    assert plan.submit == []
    assert plan.statuses == recorded


def test_a_failed_backfill_counts_as_finished():
    plan = plan_backfills(WANTED, [], {"search-replay": seen("FAILED")}, NOW)
    assert plan.statuses[0]["finished"] is True


def test_a_recorded_outcome_is_final_whatever_a_leftover_spark_application_says():
    recorded = [{"name": "replay", "phase": "FAILED", "sparkApplication": "search-replay", "finished": True,
                 "reason": "SubmissionDeadlineExceeded", "message": "…"}]
    plan = plan_backfills(WANTED, recorded, {"search-replay": seen("SUBMITTED", age=2000)}, NOW)
    assert (plan.statuses, plan.submit, plan.expired) == (recorded, [], [])


def test_a_backfill_removed_from_the_spec_has_its_spark_application_deleted():
    plan = plan_backfills({}, [], {"search-replay": seen("RUNNING")}, NOW)
    assert plan.remove == ["search-replay"]
    assert plan.statuses == []


def test_a_spark_application_no_spark_operator_picked_up_by_the_deadline_fails_the_backfill():
    plan = plan_backfills(WANTED, [], {"search-replay": seen(None, age=901)}, NOW)
    assert plan.expired == ["replay"]
    (entry,) = plan.statuses
    assert {k: entry[k] for k in ("phase", "finished", "reason")} == {"phase": "FAILED", "finished": True, "reason": "SubmissionDeadlineExceeded"}
    assert entry["message"].startswith("SparkApplication search-replay was without a state: no Spark operator picked it up")
    assert "901s after it was created, past submissionDeadlineSeconds (900)" in entry["message"]


def test_a_driver_still_not_started_by_the_deadline_fails_the_backfill():
    plan = plan_backfills(WANTED, [], {"search-replay": seen("SUBMITTED", age=901)}, NOW)
    assert plan.expired == ["replay"]
    assert plan.statuses[0]["message"].startswith("SparkApplication search-replay was still SUBMITTED: its driver never started")


def test_a_backfill_waiting_within_its_deadline_keeps_waiting():
    plan = plan_backfills(WANTED, [], {"search-replay": seen("SUBMITTED", age=899)}, NOW)
    assert (plan.expired, plan.statuses[0]["phase"], plan.statuses[0]["finished"]) == ([], "SUBMITTED", False)


def test_a_backfill_that_runs_is_never_held_to_the_submission_deadline():
    plan = plan_backfills(WANTED, [], {"search-replay": seen("RUNNING", age=86_400)}, NOW)
    assert (plan.expired, plan.statuses[0]["phase"]) == ([], "RUNNING")
