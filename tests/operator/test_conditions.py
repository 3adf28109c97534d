"""Status conditions read the way kubectl users expect."""

from __future__ import annotations

from knarr_operator.conditions import Observation, conditions, merge_transition_times


def by_type(conds):
    return {c["type"]: c for c in conds}


def test_an_invalid_config_is_not_ready_with_the_workers_message():
    conds = by_type(conditions(Observation(generation=2, invalid_config="kafka.brokers: required")))
    assert conds["Ready"]["status"] == "False"
    assert conds["Ready"]["reason"] == "InvalidConfig"
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
