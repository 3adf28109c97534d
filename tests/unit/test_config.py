"""Loading configuration: YAML, KNARR_* env on top, and errors that name the key."""

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
    assert cfg.executor.backpressure_low == 16
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
