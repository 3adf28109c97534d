"""Status conditions read the way kubectl users expect."""

from __future__ import annotations

from knarr_operator.conditions import Observation, conditions, merge_transition_times
from knarr_operator.failures import Failure


def by_type(conds):
    return {c["type"]: c for c in conds}


def test_a_rejected_config_is_not_ready_with_the_workers_message():
    conds = by_type(conditions(Observation(generation=2, rejected="kafka.brokers: required")))
    assert conds["Ready"]["status"] == "False"
    assert conds["Ready"]["reason"] == "ConfigRejected"
    assert "kafka.brokers" in conds["Ready"]["message"]


def test_unreachable_kafka_makes_the_pipeline_degraded():
    conds = by_type(conditions(Observation(generation=1, kafka_error="no broker", deployment={})))
    assert (conds["Ready"]["reason"], conds["Degraded"]["status"]) == ("KafkaUnreachable", "True")


def test_a_rolling_deployment_is_progressing_and_not_ready():
    dep = {"replicas": 3, "updatedReplicas": 1, "readyReplicas": 2, "observedGeneration": 4}
    conds = by_type(conditions(Observation(generation=1, desired_replicas=3, deployment=dep, deployment_generation=4)))
    assert conds["Progressing"]["status"] == "True"
    assert conds["Ready"]["status"] == "False"


def test_all_workers_updated_and_ready_is_ready():
    dep = {"replicas": 3, "updatedReplicas": 3, "readyReplicas": 3, "observedGeneration": 4}
    conds = by_type(conditions(Observation(generation=1, desired_replicas=3, deployment=dep, deployment_generation=4)))
    assert conds["Ready"]["status"] == "True"
    assert conds["Progressing"]["status"] == "False"


def test_transition_time_is_kept_while_the_status_holds():
    old = [{"type": "Ready", "status": "True", "lastTransitionTime": "T0"}]
    assert merge_transition_times([{"type": "Ready", "status": "True"}], old, "T1")[0]["lastTransitionTime"] == "T0"
    assert merge_transition_times([{"type": "Ready", "status": "False"}], old, "T1")[0]["lastTransitionTime"] == "T1"


def test_a_workers_termination_reason_is_the_not_ready_reason():
    dep = {"replicas": 1, "updatedReplicas": 1, "readyReplicas": 0, "observedGeneration": 2}
    failure = Failure("ServiceUnavailable", "cannot reach Kafka at 'kafka:9092' within 30s")
    conds = by_type(conditions(Observation(generation=1, desired_replicas=1, deployment=dep, deployment_generation=2, failure=failure)))
    assert (conds["Ready"]["reason"], conds["Ready"]["message"]) == ("ServiceUnavailable", "cannot reach Kafka at 'kafka:9092' within 30s")
    assert (conds["Degraded"]["status"], conds["Degraded"]["reason"]) == ("True", "ServiceUnavailable")


def test_a_suspended_pipeline_says_so_and_how_many_workers_it_resumes_with():
    dep = {"replicas": 0, "observedGeneration": 2}
    conds = by_type(conditions(Observation(generation=1, desired_replicas=0, deployment=dep, suspended=True, resume_replicas=3)))
    assert (conds["Suspended"]["status"], conds["Suspended"]["reason"]) == ("True", "Suspended")
    assert "3 when resumed" in conds["Suspended"]["message"]
    assert (conds["Ready"]["status"], conds["Ready"]["reason"]) == ("False", "Suspended")
    assert conds["Degraded"]["status"] == "False"


def test_a_rolled_back_pipeline_names_the_failed_generation_and_its_reason():
    back = {"generation": 5, "hash": "h", "reason": "HandlerRejected", "message": "cannot import module 'h'", "toGeneration": 3,
            "deadlineSeconds": 60}
    dep = {"replicas": 1, "updatedReplicas": 1, "readyReplicas": 1, "observedGeneration": 2}
    conds = by_type(conditions(Observation(generation=6, desired_replicas=1, deployment=dep, deployment_generation=2, rolled_back=back)))
    assert (conds["RolledBack"]["status"], conds["RolledBack"]["reason"]) == ("True", "HandlerRejected")
    assert conds["RolledBack"]["message"].startswith(
        "generation 5 was not ready within 60s (HandlerRejected: cannot import module 'h'); the workers run generation 3's spec again")
    assert (conds["Ready"]["status"], conds["Ready"]["message"]) == ("True", "1/1 workers ready (running generation 3's spec)")
    assert (conds["Progressing"]["reason"], conds["Degraded"]["reason"]) == ("RolledBack", "RolledBack")


def test_a_missed_deadline_without_a_spec_to_go_back_to_stops_progressing():
    dep = {"replicas": 1, "updatedReplicas": 1, "readyReplicas": 0, "observedGeneration": 1}
    conds = by_type(conditions(Observation(generation=1, desired_replicas=1, deployment=dep, deployment_generation=2,
                                           deadline_exceeded=True, deadline_seconds=600)))
    assert (conds["Progressing"]["status"], conds["Progressing"]["reason"]) == ("False", "ReadyDeadlineExceeded")
    assert (conds["Suspended"]["status"], conds["RolledBack"]["status"]) == ("False", "False")
