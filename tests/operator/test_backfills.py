"""Which backfills are submitted, and what the status says about them."""

from __future__ import annotations

from knarr_operator.backfills import plan_backfills

WANTED = {"replay": "search-replay"}


def test_a_new_backfill_is_submitted():
    plan = plan_backfills(WANTED, [], {})
    assert plan.submit == ["replay"]
    assert plan.statuses == [{"name": "replay", "phase": "SUBMITTED", "sparkApplication": "search-replay", "finished": False}]


def test_the_spark_application_state_is_mirrored():
    plan = plan_backfills(WANTED, [], {"search-replay": "RUNNING"})
    assert plan.submit == []
    assert plan.statuses[0]["phase"] == "RUNNING"


def test_a_finished_backfill_is_not_run_again_even_without_its_spark_application():
    recorded = [{"name": "replay", "phase": "COMPLETED", "sparkApplication": "search-replay", "finished": True}]
    plan = plan_backfills(WANTED, recorded, {})
    assert plan.submit == []
    assert plan.statuses == recorded


def test_a_failed_backfill_counts_as_finished():
    plan = plan_backfills(WANTED, [], {"search-replay": "FAILED"})
    assert plan.statuses[0]["finished"] is True


def test_a_backfill_removed_from_the_spec_has_its_spark_application_deleted():
    plan = plan_backfills({}, [], {"search-replay": "RUNNING"})
    assert plan.remove == ["search-replay"]
    assert plan.statuses == []
