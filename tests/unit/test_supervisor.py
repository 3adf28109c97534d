"""Several worker processes under one `knarr run`: what each is given, and the pod's one /metrics."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from knarr.config import ConfigError
from knarr.config.loading import config_from_dict, load_config
from knarr.supervisor.exposition import merged
from knarr.supervisor.machine import free_port
from knarr.supervisor.outcome import Ended, ended_by_itself, stopped
from knarr.supervisor.plan import cpus_allowed, members, process_count, shares

KAFKA = {"kafka": {"brokers": "127.0.0.1:9092"}, "sinks": {"kafka": {"out": {"topic": "o"}}}}


def config(**top):
    executor = top.pop("executor", {})
    return config_from_dict({**KAFKA, "executor": {"max_executors": 4, **executor}, **top})


# --- how many, and what each gets -------------------------------------------------------------

def test_the_pool_is_dealt_among_the_processes_the_first_taking_the_remainder():
    assert shares(10, 3) == [4, 3, 3]
    assert shares(4, 2) == [2, 2]
    assert shares(5, 5) == [1] * 5
    assert sum(shares(1024, 7)) == 1024


@pytest.mark.parametrize("cpu_max, affinity, expected", [
    (None, 8, 8),                 # no cgroup file: the affinity
    ("max 100000\n", 8, 8),       # no quota
    ("250000 100000\n", 8, 3),    # 2.5 CPUs of quota: 3 processes keep it busy
    ("50000 100000", 8, 1),       # half a CPU: one
    ("400000 100000", 2, 2),      # more quota than CPUs allowed: the CPUs
    ("garbage", 4, 4),
])
def test_cpus_allowed_reads_the_cgroup_quota_under_the_affinity(cpu_max, affinity, expected):
    assert cpus_allowed(cpu_max, affinity) == expected


def test_zero_processes_means_one_per_cpu_and_the_option_overrides_the_config():
    assert process_count(config(processes=0), None, cpus=3) == 3
    assert process_count(config(processes=2), None, cpus=3) == 2
    assert process_count(config(processes=2), 1, cpus=3) == 1
    assert process_count(config(), 4, cpus=3) == 4


def test_more_processes_than_pool_slots_is_refused_naming_both():
    with pytest.raises(ConfigError, match=r"--processes 5: .*executor.max_executors \(4\)"):
        process_count(config(), 5, cpus=2)
    with pytest.raises(ConfigError, match=r"processes 0 \(one per CPU allowed: 8\): .*max_executors \(4\)"):
        process_count(config(processes=0), None, cpus=8)


def test_the_config_refuses_processes_it_cannot_run():
    with pytest.raises(ConfigError, match=r"processes is 5: .*raise executor.max_executors or run fewer"):
        config(processes=5)
    with pytest.raises(ConfigError, match=r"processes is 2: .*source.type is 'local'"):
        config_from_dict({**KAFKA, "processes": 2, "source": {"type": "local", "local": {"path": "in.jsonl"}}})


def test_each_process_is_named_given_its_share_and_answers_on_loopback():
    cfg = config(executor={"max_executors": 5, "max_per_partition": 3},
                 debug={"enabled": True, "port": 8080, "debug_url": "http://pod:8080"})
    first, second = members(cfg, 2, "pod-a")
    assert (first.name, first.max_executors, first.max_per_partition, first.debug_port) == ("pod-a-0", 3, 3, 8080)
    assert (second.name, second.max_executors, second.max_per_partition, second.debug_port) == ("pod-a-1", 2, 2, 8081)
    env = second.env(cfg, 41234, 77, "/tmp/t", "/etc/knarr/config.yaml")
    assert env["WORKER_ID"] == "pod-a-1"
    assert env["KNARR_SUPERVISOR_PID"] == "77"
    assert env["KNARR_TERMINATION_LOG"] == "/tmp/t"
    assert env["KNARR_CONFIG"] == "/etc/knarr/config.yaml"
    assert env["KNARR_PROCESSES"] == "1"
    assert env["KNARR_METRICS__HOST"] == "127.0.0.1" and env["KNARR_METRICS__PORT"] == "41234"
    assert env["KNARR_DEBUG__PORT"] == "8081" and env["KNARR_DEBUG__DEBUG_URL"] == ""
    assert "KNARR_DEBUG__DEBUG_URL" not in first.env(cfg, 1, 77, "/tmp/t", None)


def test_the_overrides_a_process_gets_are_ones_its_config_loading_accepts(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("kafka: {brokers: '127.0.0.1:9092'}\nprocesses: 3\nexecutor: {max_executors: 7}\n"
                    "sinks: {kafka: {out: {topic: o}}}\n")
    cfg = load_config(path, env={})
    one = members(cfg, 3, "w")[0]
    loaded = load_config(path, env=one.env(cfg, 40000, 1, "/tmp/t", str(path)))
    assert (loaded.processes, loaded.executor.max_executors) == (1, 3)
    assert (loaded.metrics.enabled, loaded.metrics.host, loaded.metrics.port) == (True, "127.0.0.1", 40000)


def test_a_static_group_member_id_becomes_one_per_process():
    cfg = config(kafka={"brokers": "127.0.0.1:9092", "extra": {"group.instance.id": "pod-7"}})
    ids = [m.env(cfg, 1, 1, "/t", None)["KNARR_KAFKA__EXTRA__group.instance.id"] for m in members(cfg, 3, "w")]
    assert ids == ["pod-7-0", "pod-7-1", "pod-7-2"]
    assert not any("KAFKA__EXTRA" in key for key in members(config(), 2, "w")[0].env(config(), 1, 1, "/t", None))


def test_debug_ports_that_cover_the_metrics_port_are_refused():
    with pytest.raises(ConfigError, match=r"debug.port 9089 and processes 2: .*metrics.port \(9090\) is among those ports"):
        members(config(debug={"enabled": True, "port": 9089}), 2, "w")
    assert len(members(config(debug={"enabled": True, "port": 9091}), 2, "w")) == 2


def test_the_config_refuses_debug_ports_it_cannot_serve_whatever_the_process_count():
    with pytest.raises(ConfigError, match=r"debug.port 9090: the debug UI and the metrics endpoint .* cannot share"):
        config(debug={"enabled": True, "port": 9090})
    with pytest.raises(ConfigError, match=r"debug.port 9088 and processes 3: .*metrics.port \(9090\) is among"):
        config(processes=3, debug={"enabled": True, "port": 9088})
    with pytest.raises(ConfigError, match=r"debug.port 65534 and processes 3: .*past 65535"):
        config(processes=3, debug={"enabled": True, "port": 65534})
    assert config(processes=3, debug={"enabled": True, "port": 9087}).debug.port == 9087
    assert config(debug={"enabled": False, "port": 9090}).debug.port == 9090  # off: no port is taken
    assert config(processes=3, debug={"enabled": True, "port": 0}).debug.port == 0  # each picks a free one


def test_debug_ports_past_the_last_port_are_refused():
    cfg = config(debug={"enabled": True, "port": 65535})
    with pytest.raises(ConfigError, match="debug.port 65535"):
        members(cfg, 2, "w")
    assert [m.debug_port for m in members(config(debug={"enabled": True, "port": 0}), 2, "w")] == [0, 0]
    assert [m.debug_port for m in members(config(), 2, "w")] == [None, None]


def test_the_command_line_refuses_a_count_it_cannot_use():
    for bad in ("-1", "two", "257"):
        proc = subprocess.run([sys.executable, "-m", "knarr.cli", "run", "--processes", bad], capture_output=True,
                              text=True, timeout=60)
        assert proc.returncode == 2
        assert "--processes" in proc.stderr and ("whole number" in proc.stderr or "out of range" in proc.stderr)


# --- the pod's one /metrics -------------------------------------------------------------------

def _exposition(tasks: float, busy: float) -> str:
    registry = CollectorRegistry()
    Counter("knarr_tasks_total", "Task outcomes", ["status"], registry=registry).labels("completed").inc(tasks)
    Gauge("knarr_pool_active", "Pool slots", registry=registry).set(busy)
    Histogram("knarr_task_duration_seconds", "Durations", buckets=(0.1, 1), registry=registry).observe(0.5)
    return generate_latest(registry).decode()


def _samples(text: bytes) -> dict[tuple[str, tuple], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text.decode()) for s in family.samples}


def test_every_processs_samples_are_in_one_exposition_labelled_with_their_process():
    out = merged([("0", _exposition(3, 1)), ("1", _exposition(5, 2))])
    samples = _samples(out)
    assert samples[("knarr_tasks_total", (("process", "0"), ("status", "completed")))] == 3
    assert samples[("knarr_tasks_total", (("process", "1"), ("status", "completed")))] == 5
    assert samples[("knarr_pool_active", (("process", "1"),))] == 2
    assert samples[("knarr_task_duration_seconds_bucket", (("le", "1.0"), ("process", "0")))] == 1
    assert out.decode().count("# TYPE knarr_tasks_total counter") == 1  # one family, not one per process


def test_a_sample_that_names_its_process_keeps_it_and_a_broken_text_is_left_out():
    registry = CollectorRegistry()
    Gauge("knarr_worker_process_up", "Up", ["process"], registry=registry).labels("1").set(0)
    out = merged([("supervisor", generate_latest(registry).decode()), ("0", "not { a metric"),
                  ("1", _exposition(1, 0))])
    samples = _samples(out)
    assert samples[("knarr_worker_process_up", (("process", "1"),))] == 0
    assert not any(dict(labels).get("process") == "0" for _, labels in samples)
    assert samples[("knarr_tasks_total", (("process", "1"), ("status", "completed")))] == 1


# --- how the pod ends -------------------------------------------------------------------------

def test_a_process_that_ends_by_itself_gives_the_pod_its_code_and_reason():
    end = ended_by_itself(Ended(1, 3, "ServiceUnavailable: the broker at 10.0.0.1:9092 cannot be reached"))
    assert (end.code, str(end.reason)) == (3, "ServiceUnavailable")
    assert end.detail == "worker process 1: the broker at 10.0.0.1:9092 cannot be reached"
    silent = ended_by_itself(Ended(0, 1))
    assert (silent.code, str(silent.reason), silent.detail) == (1, "Fatal", "worker process 0: exit code 1")


def test_a_process_that_ends_cleanly_unasked_ends_the_pod_as_fatal():
    end = ended_by_itself(Ended(2, 0))
    assert (end.code, str(end.reason)) == (1, "Fatal")
    assert "ended by itself (exit code 0) unasked" in end.detail


def test_a_stopped_pod_exits_with_the_most_telling_code_of_its_processes():
    assert stopped([Ended(0, 0), Ended(1, 0)]).code == 0
    assert stopped([Ended(0, 0), Ended(1, 0)]).reason is None
    drained_late = stopped([Ended(0, 0), Ended(1, 5, "DrainIncomplete: in-flight work did not finish within 30s")])
    assert (drained_late.code, str(drained_late.reason)) == (5, "DrainIncomplete")
    assert drained_late.detail == "worker process(es) 1: in-flight work did not finish within 30s"
    assert stopped([Ended(0, 5), Ended(1, 1, "Fatal: a sink refused"), Ended(2, 1)]).detail == \
        "worker process(es) 1, 2: a sink refused"


def test_a_process_killed_by_our_sigterm_before_it_listened_stopped_cleanly_any_other_signal_did_not():
    assert stopped([Ended(0, -15), Ended(1, 0)]).code == 0
    killed = stopped([Ended(0, -9), Ended(1, 0)])
    assert (killed.code, killed.detail) == (5, "worker process(es) 0: exit code 5")


def test_a_free_port_lies_below_the_ephemeral_range_and_can_be_listened_on():
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for host in ("127.0.0.1", "0.0.0.0"):
        port = free_port(host)
        assert 1024 <= port < low
        with socket.socket() as s:
            s.bind((host, port))
            s.listen()
