"""Rendering a Pipeline's children is a pure function of its spec."""

from __future__ import annotations

from knarr_operator.manifests import PipelineRef, render_children
from knarr_operator.manifests.autoscaling import PAUSED_REPLICAS_ANNOTATION
from knarr_operator.manifests.backfill import pod_templates_kept
from knarr_operator.manifests.meta import (
    CONFIG_HASH_ANNOTATION,
    RESTART_NONCE_ANNOTATION,
    RESUME_REPLICAS_ANNOTATION,
    SECRETS_HASH_ANNOTATION,
    SPEC_HASH_ANNOTATION,
    WORKLOAD_HASH_ANNOTATION,
)
from knarr_operator.spec import split_spec
from knarr_operator.worker_config import render_worker_config

PIPELINE = PipelineRef(name="search", namespace="team-a", uid="uid-1")


def render(spec, replicas=2):
    operator, worker = split_spec(spec)
    return render_children(PIPELINE, operator, render_worker_config(worker), replicas)


def by_kind(children):
    return {m["kind"]: m for m in children.workload}


def test_the_fleet_is_a_configmap_deployment_service_and_pdb(sample_spec):
    assert set(by_kind(render(sample_spec))) == {"ConfigMap", "Deployment", "Service", "PodDisruptionBudget"}


def test_every_child_is_owned_by_its_pipeline(sample_spec):
    children = render(sample_spec)
    for manifest in [*children.workload, *children.backfills.values()]:
        (owner,) = manifest["metadata"]["ownerReferences"]
        assert owner == {"apiVersion": "knarr.dev/v1alpha1", "kind": "Pipeline", "name": "search", "uid": "uid-1", "controller": True, "blockOwnerDeletion": True}


def test_the_worker_runs_the_handler_with_the_mounted_config(sample_spec):
    pod = by_kind(render(sample_spec))["Deployment"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"] == ["knarr", "run", "--config", "/etc/knarr/config.yaml", "--handler", "search.handler:SearchHandler"]
    assert {"name": "config", "mountPath": "/etc/knarr", "readOnly": True} in container["volumeMounts"]
    assert {"name": "config", "configMap": {"name": "search-config"}} in pod["volumes"]


def test_probes_use_the_metrics_port_from_the_worker_config(sample_spec):
    sample_spec["metrics"] = {"port": 9100}
    container = by_kind(render(sample_spec))["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    assert container["ports"] == [{"name": "metrics", "containerPort": 9100, "protocol": "TCP"}]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}


def test_grace_period_outlasts_the_executor_drain_timeout(sample_spec):
    sample_spec["executor"]["drainTimeoutSeconds"] = 95.5
    pod = by_kind(render(sample_spec))["Deployment"]["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] >= 96 + 10


def test_a_rollout_never_takes_more_than_one_worker_down(sample_spec):
    strategy = by_kind(render(sample_spec))["Deployment"]["spec"]["strategy"]
    assert strategy["rollingUpdate"] == {"maxUnavailable": 1, "maxSurge": 0}
    assert by_kind(render(sample_spec))["PodDisruptionBudget"]["spec"]["maxUnavailable"] == 1


def test_workers_run_as_non_root_on_a_read_only_root_filesystem_with_a_writable_tmp(sample_spec):
    pod = by_kind(render(sample_spec))["Deployment"]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]
    assert {"name": "tmp", "emptyDir": {}} in pod["volumes"]


def test_credentials_reach_the_worker_as_secret_env_and_user_env_follows(sample_spec):
    env = by_kind(render(sample_spec))["Deployment"]["spec"]["template"]["spec"]["containers"][0]["env"]
    names = [e["name"] for e in env]
    assert names == ["KNARR_TERMINATION_LOG", "WORKER_ID", "KNARR_SINKS__POSTGRES__main__DSN", "LOG_EXTRA"]


def test_the_worker_leaves_its_failure_reason_where_the_kubelet_reads_it(sample_spec):
    container = by_kind(render(sample_spec))["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    assert container["terminationMessagePath"] == "/dev/termination-log"
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert {"name": "KNARR_TERMINATION_LOG", "value": "/dev/termination-log"} in container["env"]


def test_a_restart_nonce_goes_on_the_pod_template_so_a_new_one_rolls_the_workers(sample_spec):
    assert RESTART_NONCE_ANNOTATION not in by_kind(render(sample_spec))["Deployment"]["spec"]["template"]["metadata"]["annotations"]
    sample_spec["restartNonce"] = "2026-11-23T12:00"
    template = by_kind(render(sample_spec))["Deployment"]["spec"]["template"]
    assert template["metadata"]["annotations"][RESTART_NONCE_ANNOTATION] == "2026-11-23T12:00"


def test_a_suspended_pipeline_has_zero_workers_and_remembers_how_many_to_resume_with(sample_spec):
    sample_spec["suspend"] = True
    operator, worker = split_spec(sample_spec)
    deployment = by_kind(render_children(PIPELINE, operator, render_worker_config(worker), 0, resume_replicas=3))["Deployment"]
    assert deployment["spec"]["replicas"] == 0
    assert deployment["metadata"]["annotations"][RESUME_REPLICAS_ANNOTATION] == "3"


def test_a_suspended_keda_pipeline_pauses_its_scaled_object_at_zero(sample_spec):
    sample_spec["scaling"]["engine"] = "keda"
    sample_spec["suspend"] = True
    kinds = by_kind(render(sample_spec))
    assert kinds["ScaledObject"]["metadata"]["annotations"][PAUSED_REPLICAS_ANNOTATION] == "0"
    assert kinds["Deployment"]["spec"]["replicas"] == 0
    sample_spec["suspend"] = False
    kinds = by_kind(render(sample_spec))
    assert PAUSED_REPLICAS_ANNOTATION not in kinds["ScaledObject"]["metadata"]["annotations"]
    assert "replicas" not in kinds["Deployment"]["spec"]


def test_the_deployment_says_which_workload_it_runs(sample_spec):
    operator, worker = split_spec(sample_spec)
    deployment = by_kind(render_children(PIPELINE, operator, render_worker_config(worker), 1, workload_hash="abc123"))["Deployment"]
    assert deployment["metadata"]["annotations"][WORKLOAD_HASH_ANNOTATION] == "abc123"


def test_the_digest_of_the_referenced_secrets_goes_on_the_pod_template(sample_spec):
    operator, worker = split_spec(sample_spec)
    children = render_children(PIPELINE, operator, render_worker_config(worker), 1, secrets_digest="0123abcd")
    annotations = by_kind(children)["Deployment"]["spec"]["template"]["metadata"]["annotations"]
    assert annotations[SECRETS_HASH_ANNOTATION] == "0123abcd"


def test_without_referenced_secrets_the_pod_template_has_no_secrets_digest(sample_spec):
    del sample_spec["sinks"]["postgres"]
    annotations = by_kind(render(sample_spec))["Deployment"]["spec"]["template"]["metadata"]["annotations"]
    assert SECRETS_HASH_ANNOTATION not in annotations


def test_a_config_change_changes_the_pod_template_hash_so_pods_roll(sample_spec):
    before = by_kind(render(sample_spec))["Deployment"]["spec"]["template"]["metadata"]["annotations"][CONFIG_HASH_ANNOTATION]
    sample_spec["executor"]["windowSize"] = 21
    after = by_kind(render(sample_spec))["Deployment"]["spec"]["template"]["metadata"]["annotations"][CONFIG_HASH_ANNOTATION]
    assert before != after


def test_rendering_is_deterministic(sample_spec):
    assert render(sample_spec) == render(sample_spec)


def test_the_replica_count_does_not_change_the_deployments_spec_hash(sample_spec):
    one = by_kind(render(sample_spec, replicas=1))["Deployment"]["metadata"]["annotations"][SPEC_HASH_ANNOTATION]
    five = by_kind(render(sample_spec, replicas=5))["Deployment"]["metadata"]["annotations"][SPEC_HASH_ANNOTATION]
    assert one == five


def test_with_keda_a_scaled_object_owns_the_replica_count(sample_spec):
    sample_spec["scaling"]["engine"] = "keda"
    kinds = by_kind(render(sample_spec))
    assert "replicas" not in kinds["Deployment"]["spec"]
    scaled = kinds["ScaledObject"]
    assert scaled["apiVersion"] == "keda.sh/v1alpha1"
    assert scaled["spec"]["scaleTargetRef"]["name"] == "search"
    (trigger,) = scaled["spec"]["triggers"]
    assert trigger["type"] == "kafka"
    assert trigger["metadata"]["consumerGroup"] == "search"
    assert trigger["metadata"]["lagThreshold"] == "1000"


def keda_range(spec, partitions):
    operator, worker = split_spec(spec)
    scaled = by_kind(render_children(PIPELINE, operator, render_worker_config(worker), None, partitions=partitions))["ScaledObject"]
    return scaled["spec"]["minReplicaCount"], scaled["spec"]["maxReplicaCount"]


def test_with_keda_pods_of_several_processes_are_capped_at_the_partitions_over_the_consumers_a_pod_brings(sample_spec):
    sample_spec["scaling"].update(engine="keda", minReplicas=1, maxReplicas=10)
    sample_spec["processes"] = 3
    assert keda_range(sample_spec, None) == (1, 10)  # the partitions not seen yet: the spec's range
    assert keda_range(sample_spec, 8) == (1, 3)  # 8 partitions, 3 consumers a pod: 3 pods (the last with 2)
    assert keda_range(sample_spec, 64) == (1, 10)
    sample_spec["processes"] = 0
    sample_spec["resources"] = {"limits": {"cpu": "1500m"}}  # one process per CPU of the limit: 2 a pod
    assert keda_range(sample_spec, 8) == (1, 4)


def test_with_keda_pods_of_one_process_leave_the_partition_cap_to_kedas_own(sample_spec):
    sample_spec["scaling"].update(engine="keda", minReplicas=2, maxReplicas=10)
    assert keda_range(sample_spec, 4) == (2, 10)  # allowIdleConsumers false: KEDA stops at one pod a partition


def test_with_keda_the_lag_counts_from_the_earliest_offset_like_the_workers_and_the_spec_tunes_the_trigger(sample_spec):
    sample_spec["scaling"].update(engine="keda", keda={"activationLagThreshold": 50, "limitToPartitionsWithLag": True, "excludePersistentLag": True})
    (trigger,) = by_kind(render(sample_spec))["ScaledObject"]["spec"]["triggers"]
    assert {k: trigger["metadata"][k] for k in ("offsetResetPolicy", "activationLagThreshold", "limitToPartitionsWithLag",
                                                 "excludePersistentLag", "allowIdleConsumers")} == {
        "offsetResetPolicy": "earliest", "activationLagThreshold": "50", "limitToPartitionsWithLag": "true",
        "excludePersistentLag": "true", "allowIdleConsumers": "false",
    }  # fmt: skip


def test_with_keda_and_a_plaintext_broker_there_is_nothing_to_sign_in_with(sample_spec):
    sample_spec["scaling"]["engine"] = "keda"
    children = render(sample_spec)
    assert "authenticationRef" not in by_kind(children)["ScaledObject"]["spec"]["triggers"][0]
    assert ("keda.sh/v1alpha1", "TriggerAuthentication", "search") in children.absent
    assert ("v1", "ConfigMap", "search-keda-auth") in children.absent


def test_with_keda_the_trigger_signs_in_with_the_workers_secrets_through_a_trigger_authentication(sample_spec):
    sample_spec["scaling"]["engine"] = "keda"
    sample_spec["kafka"]["extra"] = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "search",
        "sasl.password": {"valueFrom": {"secretKeyRef": {"name": "kafka", "key": "password"}}},
    }
    children = render(sample_spec)
    plain, auth, scaled = children.workload[1:4]
    assert [m["kind"] for m in children.workload][1:5] == ["ConfigMap", "TriggerAuthentication", "ScaledObject", "Deployment"]
    (trigger,) = scaled["spec"]["triggers"]
    assert trigger["authenticationRef"] == {"name": "search", "kind": "TriggerAuthentication"}
    assert (trigger["metadata"]["tls"], trigger["metadata"]["sasl"]) == ("enable", "scram_sha512")
    assert auth["spec"] == {
        "secretTargetRef": [{"parameter": "password", "name": "kafka", "key": "password"}],
        "configMapTargetRef": [{"parameter": "username", "name": "search-keda-auth", "key": "username"}],
    }
    assert (plain["metadata"]["name"], plain["data"]) == ("search-keda-auth", {"username": "search"})


def test_suspending_with_keda_pauses_the_scaled_object_before_the_workers_go_to_zero(sample_spec):
    sample_spec["scaling"]["engine"] = "keda"
    sample_spec["suspend"] = True
    kinds = [m["kind"] for m in render(sample_spec).workload]
    assert kinds.index("ScaledObject") < kinds.index("Deployment")


def test_with_the_builtin_engine_a_leftover_scaled_object_is_removed(sample_spec):
    children = render(sample_spec)
    assert ("keda.sh/v1alpha1", "ScaledObject", "search") in children.absent


def test_a_backfill_is_a_spark_application_running_the_backfill_entry_point(sample_spec):
    app = render(sample_spec).backfills["replay-2026-11-01"]
    assert app["apiVersion"] == "sparkoperator.k8s.io/v1beta2"
    assert app["metadata"]["name"] == "search-replay-2026-11-01"
    assert app["spec"]["mainApplicationFile"] == "local:///opt/knarr/spark_entry.py"
    assert app["spec"]["image"] == sample_spec["image"]
    assert app["spec"]["arguments"] == [
        "--config", "/etc/knarr/config.yaml", "--handler", "search.handler:SearchHandler",
        "--from-timestamp", "2026-11-01T00:00:00Z", "--to-timestamp", "2026-11-02T00:00:00Z",
        "--report", "/tmp/knarr-backfill-replay-2026-11-01.json",
    ]  # fmt: skip
    assert app["spec"]["executor"]["instances"] == 4


def test_a_backfill_gets_config_and_credentials_through_pod_templates_not_the_spark_operators_webhook_fields(sample_spec):
    spec = render(sample_spec).backfills["replay-2026-11-01"]["spec"]
    for role, container_name in (("driver", "spark-kubernetes-driver"), ("executor", "spark-kubernetes-executor")):
        assert not {"env", "volumeMounts", "configMaps"} & set(spec[role])  # the webhook's: dropped without it
        template = spec[role]["template"]["spec"]
        (container,) = template["containers"]
        assert container["name"] == container_name
        assert [e["name"] for e in container["env"]] == ["WORKER_ID", "KNARR_SINKS__POSTGRES__main__DSN", "LOG_EXTRA"]
        assert {"name": "KNARR_SINKS__POSTGRES__main__DSN", "valueFrom": {"secretKeyRef": {"name": "pg", "key": "dsn"}}} in container["env"]
        assert {"name": "config", "mountPath": "/etc/knarr", "readOnly": True} in container["volumeMounts"]
        assert {"name": "config", "configMap": {"name": "search-config"}} in template["volumes"]
    assert "volumes" not in spec


def test_a_finished_backfills_spark_application_lives_for_its_time_to_live(sample_spec):
    assert render(sample_spec).backfills["replay-2026-11-01"]["spec"]["timeToLiveSeconds"] == 86_400
    sample_spec["backfills"][0]["timeToLiveSeconds"] = 3600
    assert render(sample_spec).backfills["replay-2026-11-01"]["spec"]["timeToLiveSeconds"] == 3600


def test_the_api_server_dropping_the_pod_templates_is_noticed(sample_spec):
    app = render(sample_spec).backfills["replay-2026-11-01"]
    assert pod_templates_kept(app)
    del app["spec"]["driver"]["template"]  # as a Spark operator before 2.1 prunes it
    assert not pod_templates_kept(app)


def test_an_offset_backfill_passes_partition_offset_pairs_in_partition_order(sample_spec):
    sample_spec["backfills"] = [{"name": "b", "from": {"offsets": {"10": 5, "2": 100}}, "to": {"offsets": {"2": 200, "10": 9}}}]
    args = render(sample_spec).backfills["b"]["spec"]["arguments"]
    assert args[4:8] == ["--from-offsets", "2:100,10:5", "--to-offsets", "2:200,10:9"]


def test_the_handler_cache_gets_a_scratch_volume_at_its_db_dir(sample_spec):
    sample_spec["cache"] = {"enabled": True, "dbDir": "/var/lib/knarr-cache"}
    pod = by_kind(render(sample_spec))["Deployment"]["spec"]["template"]["spec"]
    assert {"name": "cache", "mountPath": "/var/lib/knarr-cache"} in pod["containers"][0]["volumeMounts"]
    assert {"name": "cache", "emptyDir": {}} in pod["volumes"]
