"""Credentials in a Pipeline: read from Secrets by reference, never written in plain text, hashed to roll pods."""

from __future__ import annotations

import base64

import pytest
import yaml
from knarr.config import load_config

from knarr_operator.credentials import kafka_extra_with_secrets, referenced_secrets, secrets_digest
from knarr_operator.spec import split_spec
from knarr_operator.worker_config import InvalidConfig, render_worker_config


def ref(name: str, key: str) -> dict:
    return {"valueFrom": {"secretKeyRef": {"name": name, "key": key}}}


def rendered(spec):
    _, worker = split_spec(spec)
    return render_worker_config(worker)


@pytest.fixture
def spec_with_every_credential(sample_spec):
    sample_spec["kafka"]["extra"] = {"security.protocol": "SASL_SSL", "sasl.username": "app", "sasl.password": ref("kafka", "password")}
    sample_spec["sinks"]["kafka"]["results"]["extra"] = {"ssl.key.password": ref("kafka", "key-password")}
    sample_spec["sinks"]["http"] = {"Hook": {"url": ref("hook", "url"), "headers": {"Authorization": ref("hook", "auth"), "Accept": "application/json"}}}
    sample_spec["executor"]["env"] = {"GITHUB_TOKEN": ref("gh", "token"), "MODE": "fast"}
    return sample_spec


def test_every_credential_becomes_a_secret_env_override_named_with_its_keys_case(spec_with_every_credential):
    config = rendered(spec_with_every_credential)
    assert {r.env_name: (r.secret, r.key) for r in config.secrets} == {
        "KNARR_KAFKA__EXTRA__sasl.password": ("kafka", "password"),
        "KNARR_SINKS__KAFKA__results__EXTRA__ssl.key.password": ("kafka", "key-password"),
        "KNARR_SINKS__HTTP__Hook__URL": ("hook", "url"),
        "KNARR_SINKS__HTTP__Hook__HEADERS__Authorization": ("hook", "auth"),
        "KNARR_SINKS__POSTGRES__main__DSN": ("pg", "dsn"),
        "KNARR_EXECUTOR__ENV__GITHUB_TOKEN": ("gh", "token"),
    }


def test_the_config_file_holds_no_credential_and_no_reference(spec_with_every_credential):
    text = rendered(spec_with_every_credential).to_yaml()
    assert "valueFrom" not in text and "secretKeyRef" not in text
    data = yaml.safe_load(text)
    assert data["kafka"]["extra"] == {"security.protocol": "SASL_SSL", "sasl.username": "app"}
    assert data["sinks"]["http"]["Hook"] == {"headers": {"Accept": "application/json"}}
    assert data["executor"]["env"] == {"MODE": "fast"}


def test_the_worker_reads_each_secret_back_into_the_right_key(spec_with_every_credential, tmp_path):
    config = rendered(spec_with_every_credential)
    (tmp_path / "config.yaml").write_text(config.to_yaml())
    values = {r.env_name: f"value-of-{r.secret}-{r.key}" for r in config.secrets}
    values["KNARR_SINKS__HTTP__Hook__URL"] = "https://hook.example/in"
    loaded = load_config(tmp_path / "config.yaml", env=values)
    assert loaded.kafka.extra["sasl.password"] == "value-of-kafka-password"
    assert loaded.sinks.kafka["results"].extra == {"ssl.key.password": "value-of-kafka-key-password"}
    assert loaded.sinks.http["Hook"].headers == {"Authorization": "value-of-hook-auth", "Accept": "application/json"}
    assert loaded.sinks.postgres["main"].dsn == "value-of-pg-dsn"
    assert loaded.executor.env == {"GITHUB_TOKEN": "value-of-gh-token", "MODE": "fast"}


@pytest.mark.parametrize(
    ("section", "value", "key"),
    [
        ({"kafka": {"extra": {"sasl.password": "hunter2"}}}, "hunter2", "kafka.extra.sasl.password"),
        ({"sinks": {"http": {"api": {"url": "https://h/in", "headers": {"Authorization": "Bearer hunter2"}}}}}, "hunter2", "sinks.http.api.headers.Authorization"),
        ({"sinks": {"postgres": {"main": {"dsn": "postgresql://app:hunter2@db/x"}}}}, "hunter2", "sinks.postgres.main.dsn"),
        ({"executor": {"env": {"API_KEY": "hunter2"}}}, "hunter2", "executor.env.API_KEY"),
        ({"cache": {"shared": {"url": "redis://:hunter2@cache:6379/0"}}}, "hunter2", "cache.shared.url"),
    ],
)
def test_a_secret_written_inline_is_refused_naming_the_key_without_its_value(sample_spec, section, value, key):
    for name, part in section.items():
        for sub, content in part.items():
            sample_spec.setdefault(name, {})[sub] = {**sample_spec.get(name, {}).get(sub, {}), **content}
    with pytest.raises(InvalidConfig) as err:
        rendered(sample_spec)
    assert f"{key}: " in str(err.value) and "put it in a Secret" in str(err.value)
    assert value not in str(err.value)


def test_a_connection_string_without_a_password_may_be_written_inline(sample_spec):
    sample_spec["sinks"]["postgres"]["main"]["dsn"] = "postgresql://app@db/x"
    assert rendered(sample_spec).data["sinks"]["postgres"]["main"]["dsn"] == "postgresql://app@db/x"


def test_a_mixed_case_sink_name_takes_its_dsn_from_a_secret(sample_spec, tmp_path):
    sample_spec["sinks"]["postgres"] = {"Main": sample_spec["sinks"]["postgres"]["main"]}
    config = rendered(sample_spec)
    (tmp_path / "config.yaml").write_text(config.to_yaml())
    loaded = load_config(tmp_path / "config.yaml", env={config.secrets[0].env_name: "postgresql://u:p@db/x"})
    assert loaded.sinks.postgres["Main"].dsn == "postgresql://u:p@db/x"


def test_a_key_that_cannot_be_an_env_name_cannot_come_from_a_secret(sample_spec):
    sample_spec["sinks"]["http"] = {"api": {"url": "https://h", "headers": {"X Token": ref("s", "k")}}}
    with pytest.raises(InvalidConfig, match=r"sinks\.http\.api\.headers\.X Token: from a Secret, it reaches the worker as env"):
        rendered(sample_spec)


# --- the digest that rolls the pods ------------------------------------------------------------


def secret(uid: str, **data: str) -> dict:
    return {"metadata": {"uid": uid}, "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}}


WANTED = [("pg", "dsn"), ("kafka", "password")]


def test_the_digest_changes_when_a_referenced_value_changes():
    before = secrets_digest(WANTED, {"pg": secret("u1", dsn="a"), "kafka": secret("u2", password="p")})
    after = secrets_digest(WANTED, {"pg": secret("u1", dsn="b"), "kafka": secret("u2", password="p")})
    assert before != after


def test_the_digest_ignores_keys_no_worker_reads():
    before = secrets_digest(WANTED, {"pg": secret("u1", dsn="a", other="x"), "kafka": secret("u2", password="p")})
    after = secrets_digest(WANTED, {"pg": secret("u1", dsn="a", other="y"), "kafka": secret("u2", password="p")})
    assert before == after


def test_the_digest_changes_when_a_missing_secret_appears():
    missing = secrets_digest(WANTED, {"pg": None, "kafka": secret("u2", password="p")})
    present = secrets_digest(WANTED, {"pg": secret("u1", dsn="a"), "kafka": secret("u2", password="p")})
    assert missing != present


def test_the_digest_cannot_be_recomputed_without_the_secrets_uid():
    # The same value under another Secret object (another uid) gives another digest: guessing
    # a weak password from the annotation needs the uid, which only Secret readers see.
    assert secrets_digest(WANTED[:1], {"pg": secret("u1", dsn="a")}) != secrets_digest(WANTED[:1], {"pg": secret("u9", dsn="a")})


def test_secrets_named_in_the_users_env_entries_count_too(spec_with_every_credential):
    spec_with_every_credential["env"].append({"name": "EXTRA_SECRET", "valueFrom": {"secretKeyRef": {"name": "misc", "key": "k"}}})
    operator, worker = split_spec(spec_with_every_credential)
    wanted = referenced_secrets(render_worker_config(worker).secrets, operator.env)
    assert ("misc", "k") in wanted and ("pg", "dsn") in wanted and ("kafka", "password") in wanted


def test_the_operators_own_kafka_client_gets_the_credentials_from_their_secrets(spec_with_every_credential):
    config = rendered(spec_with_every_credential)
    secrets = {"kafka": secret("u2", password="s3cret")}
    extra = kafka_extra_with_secrets(config.validated.kafka.extra, config.secrets, secrets)
    assert extra == {"security.protocol": "SASL_SSL", "sasl.username": "app", "sasl.password": "s3cret"}


def test_an_unreadable_credential_is_left_out_of_the_operators_kafka_client_not_sent_as_a_placeholder(spec_with_every_credential):
    config = rendered(spec_with_every_credential)
    extra = kafka_extra_with_secrets(config.validated.kafka.extra, config.secrets, {"kafka": None})
    assert "sasl.password" not in extra


def test_the_shared_cache_url_comes_from_a_secret(sample_spec, tmp_path):
    sample_spec["cache"] = {"enabled": True, "shared": {"url": ref("cache", "url")}}
    config = rendered(sample_spec)
    [secret] = [s for s in config.secrets if s.config_path == "cache.shared.url"]
    assert secret.env_name == "KNARR_CACHE__SHARED__URL"
    (tmp_path / "config.yaml").write_text(config.to_yaml())
    values = {s.env_name: f"value-of-{s.key}" for s in config.secrets} | {secret.env_name: "redis://:p@cache:6379/0"}
    loaded = load_config(tmp_path / "config.yaml", env=values)
    assert loaded.cache.shared.url == "redis://:p@cache:6379/0"
