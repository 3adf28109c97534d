"""A task's environment: an allow-list of the worker's variables, then executor.env, then the task's env."""

from __future__ import annotations

from knarr.config.models import ExecutorConfig
from knarr.engine.environment import inherited, task_environment

WORKER_ENV = {
    "PATH": "/usr/bin:/bin", "HOME": "/app", "LANG": "C.UTF-8", "LC_CTYPE": "C.UTF-8", "TZ": "UTC",
    "KNARR_SINKS__POSTGRES__MAIN__DSN": "postgresql://user:s3cret@db/x", "KAFKA_SASL_PASSWORD": "s3cret",
    "LCX": "not a locale variable",
}


def test_by_default_a_task_inherits_only_the_safe_minimal_set():
    env = task_environment(ExecutorConfig().env_inherit, WORKER_ENV, {})
    assert env == {"PATH": "/usr/bin:/bin", "HOME": "/app", "LANG": "C.UTF-8", "LC_CTYPE": "C.UTF-8", "TZ": "UTC"}


def test_sink_and_kafka_credentials_never_reach_a_task_by_default():
    env = task_environment(ExecutorConfig().env_inherit, WORKER_ENV, {}, {"TASK": "1"})
    assert "s3cret" not in "".join(env.values())


def test_a_trailing_star_matches_a_prefix_and_nothing_else():
    assert inherited(["LC_*"], WORKER_ENV) == {"LC_CTYPE": "C.UTF-8"}


def test_a_lone_star_inherits_everything():
    assert inherited(["*"], WORKER_ENV) == WORKER_ENV


def test_config_env_overrides_inherited_values_and_the_task_overrides_both():
    env = task_environment(["PATH", "TZ"], WORKER_ENV, {"TZ": "Europe/Oslo", "MODE": "fast"}, {"MODE": "slow"})
    assert env == {"PATH": "/usr/bin:/bin", "TZ": "Europe/Oslo", "MODE": "slow"}


def test_the_workers_own_markers_win_over_everything():
    env = task_environment(["PATH"], WORKER_ENV, {"KNARR_TASK_TAG": "x"}, {"KNARR_TASK_TAG": "y"},
                           always={"KNARR_TASK_TAG": "worker"})
    assert env["KNARR_TASK_TAG"] == "worker"
