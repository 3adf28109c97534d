"""A configuration error names the key but never shows a secret's value."""

from __future__ import annotations

import pytest

from knarr.config import ConfigError, config_from_dict, load_config
from knarr.config.secrets import has_credentials, is_secret_key, masked

SINK = {"filesystem": {"out": {"base_path": "/tmp/knarr-out"}}}


def error_of(data: dict) -> str:
    with pytest.raises(ConfigError) as err:
        config_from_dict(data)
    return str(err.value)


@pytest.mark.parametrize(
    ("data", "key"),
    [
        ({"kafka": {"extra": {"sasl.password": ["hunter2"]}}, "sinks": SINK}, "kafka.extra.sasl.password"),
        ({"kafka": {"extra": {"ssl.key.pem": {"pem": "hunter2"}}}, "sinks": SINK}, "kafka.extra.ssl.key.pem"),
        ({"sinks": {"http": {"api": {"url": "https://h", "headers": {"Authorization": ["Bearer hunter2"]}}}}}, "sinks.http.api.headers.Authorization"),
        ({"sinks": {"postgres": {"main": {"dsn": ["postgresql://app:hunter2@db/x"]}}}}, "sinks.postgres.main.dsn"),
        ({"sinks": {"mongo": {"main": {"uri": ["mongodb://hunter2@db"], "database": "d"}}}}, "sinks.mongo.main.uri"),
        ({"executor": {"env": {"API_TOKEN": ["hunter2"]}}, "sinks": SINK}, "executor.env.API_TOKEN"),
    ],
)
def test_an_invalid_secret_is_named_without_its_value(data, key):
    text = error_of(data)
    assert f"  {key}: " in text
    assert "hunter2" not in text


def test_a_url_with_credentials_under_any_key_is_not_shown():
    text = error_of({"kafka": {"brokers": ["kafka://user:hunter2@b:9092"]}, "sinks": SINK})
    assert "kafka.brokers" in text and "hunter2" not in text


def test_a_secret_of_the_wrong_type_says_so_without_showing_it():
    text = error_of({"kafka": {"extra": {"sasl.password": ["hunter2"]}}, "sinks": SINK})
    assert text.splitlines()[1] == (
        "  kafka.extra.sasl.password: Input should be text, a whole number, a number or true/false "
        "(got a value that is not shown: it may be a secret) [env: KNARR_KAFKA__EXTRA__sasl.password]"
    )


def test_an_invalid_ordinary_value_is_still_shown():
    assert "(got 'lots')" in error_of({"executor": {"max_executors": "lots"}, "sinks": SINK})


def test_a_secret_given_through_env_is_not_echoed(tmp_path):
    (tmp_path / "knarr.yaml").write_text("sinks: {postgres: {main: {dsn: 'postgresql://db/x', pool_min: 1}}}\n")
    with pytest.raises(ConfigError) as err:
        load_config(tmp_path / "knarr.yaml", env={"KNARR_SINKS__POSTGRES__MAIN__DSN": ""})
    assert "sinks.postgres.main.dsn" in str(err.value)
    with pytest.raises(ConfigError) as err:
        load_config(tmp_path / "knarr.yaml", env={"KNARR_KAFKA__EXTRA__sasl.password": "hunter2", "KNARR_KAFKA__EXTRA__enable.auto.commit": "true"})
    assert "'enable.auto.commit' may not be set here" in str(err.value) and "hunter2" not in str(err.value)


@pytest.mark.parametrize(
    "key", ["password", "sasl.password", "ssl.key.password", "ssl.keystore.password", "ssl.key.pem",
            "sasl.oauthbearer.client.secret", "Authorization", "X-Api-Key", "GITHUB_TOKEN", "Cookie",
            "PGPASSWORD", "MYSQL_PWD", "AWS_SECRET_ACCESS_KEY", "X-Auth-Token"],
)
def test_keys_that_always_hold_secrets(key):
    assert is_secret_key(key)


@pytest.mark.parametrize(
    "key", ["sasl.mechanism", "security.protocol", "ssl.ca.location", "ssl.key.location", "Content-Type", "PATH", "dsn",
            "TOKENIZER_MODEL", "sasl.oauthbearer.token.endpoint.url", "GOOGLE_APPLICATION_CREDENTIALS"],
)
def test_keys_that_do_not_always_hold_secrets(key):
    assert not is_secret_key(key)


@pytest.mark.parametrize(
    ("value", "secret"),
    [
        ("postgresql://app:pw@db/x", True),
        ("host=db user=app password=pw dbname=x", True),
        ("redis://:pw@cache:6379/0", True),
        ("postgresql://app@db/x", False),
        ("redis://cache:6379/0", False),
        ("https://example.com/hook", False),
    ],
)
def test_connection_strings_with_a_password_are_secrets(value, secret):
    assert has_credentials(value) is secret


def test_a_config_is_shown_with_its_secrets_masked():
    data = {
        "kafka": {"brokers": "b:9092", "extra": {"sasl.mechanism": "PLAIN", "sasl.password": "pw", "client.rack": "a"}},
        "sinks": {"http": {"api": {"url": "https://u:pw@h/x", "headers": {"Authorization": "Bearer t", "Accept": "json"}}}},
    }
    assert masked(data) == {
        "kafka": {"brokers": "b:9092", "extra": {"sasl.mechanism": "***", "sasl.password": "***", "client.rack": "a"}},
        "sinks": {"http": {"api": {"url": "***", "headers": {"Authorization": "***", "Accept": "json"}}}},
    }
