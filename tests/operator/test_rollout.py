"""Which spec the workers run: the new one, or after a missed deadline the last one that was ready."""

from __future__ import annotations

from typing import Any

from knarr_operator.failures import Failure
from knarr_operator.rollout import RolloutState, plan_rollout, with_workload, workload_hash
from knarr_operator.timestamps import format_time

T0 = 1_800_000_000.0
GOOD = {"generation": 3, "hash": "good"}


def plan(state: RolloutState, *, key: str = "new", now: float = T0, ready: bool = False, suspended: bool = False,
         nonce: str = "", auto_rollback: bool = True, failure: Failure | None = None, generation: int = 5) -> Any:
    return plan_rollout(state, generation=generation, key=key, restart_nonce=nonce, ready=ready, suspended=suspended,
                        now=now, deadline_seconds=60, auto_rollback=auto_rollback, failure=failure)


def started(at: float = T0, key: str = "new", generation: int = 5) -> dict[str, Any]:
    return {"generation": generation, "hash": key, "startedAt": format_time(at)}


def test_a_new_spec_starts_its_deadline_when_first_seen():
    p = plan(RolloutState(last_ready=GOOD))
    assert p.state.attempt == started()
    assert (p.run_last_ready, p.record_ready, p.rolled_back_now) == (False, False, False)


def test_a_new_spec_that_becomes_ready_is_remembered_under_the_generation_that_introduced_it():
    p = plan(RolloutState(last_ready=GOOD, attempt=started(generation=4)), ready=True, now=T0 + 10, generation=6)
    assert p.record_ready
    assert p.state == RolloutState(last_ready={"generation": 4, "hash": "new"})


def test_before_the_deadline_nothing_is_rolled_back():
    p = plan(RolloutState(last_ready=GOOD, attempt=started()), now=T0 + 59)
    assert not p.run_last_ready and p.state.attempt == started()


def test_a_missed_deadline_rolls_back_to_the_last_ready_spec_with_the_workers_reason():
    failure = Failure("HandlerRejected", "handler 'h:H': cannot import module 'h'")
    p = plan(RolloutState(last_ready=GOOD, attempt=started()), now=T0 + 60, failure=failure)
    assert p.run_last_ready and p.rolled_back_now
    assert p.state.rolled_back == {
        "generation": 5, "hash": "new", "restartNonce": "", "reason": "HandlerRejected",
        "message": "handler 'h:H': cannot import module 'h'", "toGeneration": 3, "deadlineSeconds": 60,
    }
    assert p.state.attempt is None and p.state.last_ready == GOOD


def test_without_a_reason_from_the_workers_the_rollback_says_the_deadline_passed():
    p = plan(RolloutState(last_ready=GOOD, attempt=started()), now=T0 + 61)
    assert p.state.rolled_back["reason"] == "ReadyDeadlineExceeded"


def test_a_rolled_back_spec_stays_rolled_back_without_a_second_event():
    back = plan(RolloutState(last_ready=GOOD, attempt=started()), now=T0 + 60).state
    p = plan(back, now=T0 + 600)
    assert p.run_last_ready and not p.rolled_back_now and p.state == back


def test_a_changed_spec_tries_again():
    back = plan(RolloutState(last_ready=GOOD, attempt=started()), now=T0 + 60).state
    p = plan(back, key="newer", now=T0 + 100, generation=6)
    assert not p.run_last_ready and p.state.rolled_back is None
    assert p.state.attempt == started(T0 + 100, "newer", 6)


def test_a_new_restart_nonce_retries_the_same_spec():
    back = plan(RolloutState(last_ready=GOOD, attempt=started()), now=T0 + 60).state
    p = plan(back, nonce="again", now=T0 + 100, generation=6)
    assert not p.run_last_ready and p.state.rolled_back is None and p.state.attempt == started(T0 + 100, "new", 6)


def test_going_back_to_the_last_ready_spec_clears_the_rollback():
    back = plan(RolloutState(last_ready=GOOD, attempt=started()), now=T0 + 60).state
    p = plan(back, key="good", now=T0 + 100)
    assert p.state == RolloutState(last_ready=GOOD) and not p.run_last_ready


def test_without_an_earlier_ready_spec_a_missed_deadline_is_only_reported():
    p = plan(RolloutState(attempt=started()), now=T0 + 60)
    assert p.deadline_exceeded and not p.run_last_ready and p.state.rolled_back is None


def test_with_auto_rollback_off_a_missed_deadline_is_only_reported():
    p = plan(RolloutState(last_ready=GOOD, attempt=started()), now=T0 + 60, auto_rollback=False)
    assert p.deadline_exceeded and not p.run_last_ready


def test_suspended_time_does_not_count_against_the_deadline():
    p = plan(RolloutState(last_ready=GOOD, attempt=started()), now=T0 + 3600, suspended=True)
    assert p.state.attempt is None and not p.run_last_ready
    resumed = plan(p.state, now=T0 + 3700)
    assert resumed.state.attempt == started(T0 + 3700)


def test_scaling_suspend_and_backfills_are_not_part_of_the_workload():
    spec = {"image": "i:1", "kafka": {"brokers": "b"}, "scaling": {"minReplicas": 1}, "suspend": False, "backfills": []}
    changed = {**spec, "scaling": {"minReplicas": 4}, "suspend": True, "restartNonce": "x", "rollout": {"autoRollback": False}}
    assert workload_hash(spec) == workload_hash(changed)
    assert workload_hash(spec) != workload_hash({**spec, "image": "i:2"})


def test_a_rollback_runs_the_good_workload_with_the_current_runtime_keys():
    now = {"image": "i:2", "env": [{"name": "A", "value": "1"}], "scaling": {"minReplicas": 4}, "suspend": True}
    good = {"image": "i:1", "scaling": {"minReplicas": 1}}
    assert with_workload(now, good) == {"image": "i:1", "scaling": {"minReplicas": 4}, "suspend": True}
