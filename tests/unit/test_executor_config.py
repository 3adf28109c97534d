"""The executor's task-safety settings: output cap, inherited environment, retries-exhausted policy, cgroup."""

import pytest

from knarr.config import ConfigError, load_config

MINIMAL = "sinks:\n  filesystem:\n    out: {base_path: /tmp/knarr-out}\n"


@pytest.fixture
def load(tmp_path):
    def from_yaml(extra: str = "", env: dict[str, str] | None = None):
        path = tmp_path / "knarr.yaml"
        path.write_text(MINIMAL + extra)
        return load_config(path, env=env or {})

    return from_yaml


def test_the_defaults_are_safe(load):
    executor = load().executor
    assert executor.max_output_bytes == 8 * 1024 * 1024
    assert executor.env_inherit == ["PATH", "HOME", "LANG", "LC_*", "TZ", "TMPDIR"]
    assert executor.on_retries_exhausted == "dlq"
    assert executor.task_cgroup is True


def test_max_output_bytes_has_an_upper_bound(load):
    with pytest.raises(ConfigError, match="executor.max_output_bytes"):
        load("executor: {max_output_bytes: 1000000000000}\n")


def test_an_inherited_name_that_is_no_variable_name_is_refused_naming_it(load):
    with pytest.raises(ConfigError, match="'SECRET=1' is not an environment variable name"):
        load("executor: {env_inherit: [PATH, 'SECRET=1']}\n")


def test_an_executor_env_name_with_an_equals_sign_is_refused(load):
    with pytest.raises(ConfigError, match="'A=B' is not an environment variable name"):
        load("executor: {env: {'A=B': x}}\n")


def test_prefix_patterns_and_a_lone_star_are_accepted(load):
    assert load("executor: {env_inherit: ['LC_*', 'AWS_*']}\n").executor.env_inherit == ["LC_*", "AWS_*"]
    assert load("executor: {env_inherit: ['*']}\n").executor.env_inherit == ["*"]


def test_the_retries_exhausted_policy_is_dlq_or_discard(load):
    assert load("executor: {on_retries_exhausted: discard}\n").executor.on_retries_exhausted == "discard"
    with pytest.raises(ConfigError, match="executor.on_retries_exhausted"):
        load("executor: {on_retries_exhausted: retry}\n")
