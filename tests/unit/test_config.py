"""Loading configuration: YAML, KNARR_* env on top, and errors that name the key."""

import logging

import pytest

from knarr.config import ConfigError, KnarrConfig, load_config

MINIMAL = "sinks:\n  filesystem:\n    out: {base_path: /tmp/knarr-out}\n"


@pytest.fixture
def config_file(tmp_path):
    def write(text: str = MINIMAL):
        path = tmp_path / "knarr.yaml"
        path.write_text(text)
        return path

    return write


def test_defaults_follow_the_configuration_reference(config_file):
    cfg = load_config(config_file(), env={})
    assert cfg.kafka.brokers == "localhost:9092"
    assert cfg.kafka.max_poll_records == 100
    assert cfg.executor.max_executors == 4
    assert cfg.executor.window_size == 100
    assert cfg.executor.backpressure_high == 128
    assert cfg.executor.backpressure_low == 64
    assert cfg.metrics.port == 9090
    assert cfg.dlq_topic == "input-events_dlq"


def test_env_overrides_are_deep_merged_over_yaml(config_file):
    path = config_file(MINIMAL + "  kafka: {results: {topic: in-file}}\nkafka: {brokers: 'yaml:1', source_topic: orders}\n")
    cfg = load_config(path, env={"KNARR_KAFKA__BROKERS": "env:2", "KNARR_SINKS__KAFKA__RESULTS__TOPIC": "out"})
    assert cfg.kafka.brokers == "env:2"
    assert cfg.kafka.source_topic == "orders"  # untouched sibling survives the merge
    assert list(cfg.sinks.kafka) == ["results"]  # RESULTS names the file's sink, whatever its case
    assert cfg.sinks.kafka["results"].topic == "out"
    assert cfg.sinks.filesystem["out"].base_path == "/tmp/knarr-out"


def test_map_keys_from_env_keep_their_case(config_file):
    env = {
        "KNARR_KAFKA__EXTRA__sasl.password": "pw",
        "KNARR_EXECUTOR__ENV__AWS_REGION": "eu-north-1",
        "KNARR_SINKS__HTTP__Api__URL": "https://example.invalid/in",
        "KNARR_SINKS__HTTP__Api__HEADERS__Authorization": "Bearer x",
    }
    cfg = load_config(config_file(), env=env)
    assert cfg.kafka.extra == {"sasl.password": "pw"}
    assert cfg.executor.env == {"AWS_REGION": "eu-north-1"}
    assert cfg.sinks.http["Api"].headers == {"Authorization": "Bearer x"}


def test_a_section_given_whole_in_env_is_json(config_file):
    cfg = load_config(config_file(), env={"KNARR_KAFKA__EXTRA": '{"client.rack": "a"}'})
    assert cfg.kafka.extra == {"client.rack": "a"}


def test_a_section_given_in_env_as_plain_text_says_to_use_json(config_file):
    with pytest.raises(ConfigError, match=r"KNARR_KAFKA__EXTRA: kafka.extra is a section or map; give it as JSON"):
        load_config(config_file(), env={"KNARR_KAFKA__EXTRA": "client.rack=a"})


def test_the_config_path_may_come_from_knarr_config(config_file):
    path = config_file()
    assert load_config(None, env={"KNARR_CONFIG": str(path)}).sinks.filesystem


def test_an_unknown_yaml_key_names_the_key(config_file):
    with pytest.raises(ConfigError, match=r"executor\.max_executor: unknown key"):
        load_config(config_file(MINIMAL + "executor: {max_executor: 3}\n"), env={})


def test_an_unknown_env_variable_names_the_variable(config_file):
    with pytest.raises(ConfigError, match=r"KNARR_KAFKA__BROKRS: no config key 'kafka.brokrs'"):
        load_config(config_file(), env={"KNARR_KAFKA__BROKRS": "x"})


def test_an_env_variable_with_a_double_underscore_under_no_section_is_an_error(config_file):
    with pytest.raises(ConfigError, match=r"KNARR_TOOLS__DIR: no config key 'tools.dir'; env overrides look like KNARR_SECTION__KEY"):
        load_config(config_file(), env={"KNARR_TOOLS__DIR": "/opt/tools"})


def test_a_variable_naming_a_section_exactly_takes_the_section_as_json(config_file):
    cfg = load_config(config_file(), env={"KNARR_KAFKA": '{"brokers": "env:1", "source_topic": "orders"}'})
    assert (cfg.kafka.brokers, cfg.kafka.source_topic) == ("env:1", "orders")


def test_a_variable_naming_a_top_level_key_exactly_overrides_it(config_file):
    assert load_config(config_file(), env={"KNARR_CLUSTER_NAME": "eu-1"}).cluster_name == "eu-1"


def test_tool_variables_that_name_no_config_key_are_left_alone(config_file):
    tooling = {
        "KNARR_CACHE_DIR": "/home/dev/.cache/knarr",
        "KNARR_KAFKA_STATE_DIR": "/home/dev/.cache/knarr/kafka",
        "KNARR_POSTGRES_STATE_DIR": "/home/dev/.cache/knarr/pg",
        "KNARR_BIN_DIR": "/home/dev/.cache/knarr/bin",
        "KNARR_CHROMIUM": "/usr/bin/chromium",
        "KNARR_TEST_POSTGRES_DSN": "postgresql://knarr@127.0.0.1:5432/knarr",
        "KNARR_KUBE_VERSION": "1.31.0",
        "KNARR_ENVTEST_DIR": "/home/dev/.cache/knarr/envtest",
        "KNARR_DOCS_SCREENSHOTS": "1",
    }
    assert load_config(config_file(), env=tooling) == load_config(config_file(), env={})


def test_the_operator_settings_and_the_config_path_variables_are_not_overrides(config_file):
    env = {"KNARR_OPERATOR_RESYNC_SECONDS": "2", "KNARR_OPERATOR__X": "y", "KNARR_TERMINATION_LOG": "/tmp/t"}
    assert load_config(config_file(), env=env) == load_config(config_file(), env={})


@pytest.mark.parametrize(("name", "meant"), [
    ("KNARR_EXECUTOR_MAX_EXECUTORS", "KNARR_EXECUTOR__MAX_EXECUTORS"),
    ("KNARR_KAFKA_BROKERS", "KNARR_KAFKA__BROKERS"),
    ("KNARR_CACHE_SHARED", "KNARR_CACHE__SHARED"),
    ("knarr_metrics_port", "KNARR_METRICS__PORT"),
])
def test_an_override_with_a_single_underscore_between_section_and_key_says_what_was_meant(config_file, name, meant):
    with pytest.raises(ConfigError) as err:
        load_config(config_file(), env={name: "8"})
    assert f"{name}: not a config override; did you mean {meant}? (sections and keys are separated by two underscores)" \
        in str(err.value)


def test_variables_left_alone_are_logged_once_at_debug_level(config_file, caplog):
    env = {"KNARR_LOGGED_ONCE_DIR": "/tmp/x"}
    with caplog.at_level(logging.DEBUG, logger="knarr.config"):
        load_config(config_file(), env=env)
        load_config(config_file(), env=env)
    said = [r for r in caplog.records if "KNARR_LOGGED_ONCE_DIR" in r.getMessage()]
    assert [r.levelno for r in said] == [logging.DEBUG]
    assert "not configuration, left alone" in said[0].getMessage()


def test_an_invalid_value_names_the_key_the_value_and_the_env_variable(config_file):
    with pytest.raises(ConfigError) as err:
        load_config(config_file(), env={"KNARR_EXECUTOR__MAX_EXECUTORS": "0"})
    text = str(err.value)
    assert "executor.max_executors" in text and "greater than or equal to 1" in text
    assert "'0'" in text and "KNARR_EXECUTOR__MAX_EXECUTORS" in text


def test_at_least_one_sink_is_required(config_file):
    with pytest.raises(ConfigError, match="no sink is configured"):
        load_config(config_file("kafka: {brokers: 'a:1'}\n"), env={})


def test_a_missing_file_says_how_to_pass_one(tmp_path):
    with pytest.raises(ConfigError, match="does not exist; pass --config PATH or set KNARR_CONFIG"):
        load_config(tmp_path / "nope.yaml", env={})


def test_yaml_that_is_not_a_mapping_is_rejected(config_file):
    with pytest.raises(ConfigError, match="must hold a mapping"):
        load_config(config_file("- a\n- b\n"), env={})


def test_backpressure_low_must_stay_below_high(config_file):
    with pytest.raises(ConfigError, match="backpressure_low_multiplier .* must be lower"):
        load_config(config_file(MINIMAL + "executor: {backpressure_low_multiplier: 40}\n"), env={})


def test_a_required_sink_key_is_reported_as_missing(config_file):
    with pytest.raises(ConfigError, match=r"sinks\.kafka\.results\.topic: required key is missing"):
        load_config(config_file("sinks: {kafka: {results: {}}}\n"), env={})


def test_the_root_model_is_knarrconfig(config_file):
    assert isinstance(load_config(config_file(), env={}), KnarrConfig)


def test_the_operators_own_env_settings_are_not_mistaken_for_worker_keys(config_file):
    assert load_config(config_file(), env={"KNARR_OPERATOR_RESYNC_SECONDS": "1"}).sinks.filesystem
