"""KEDA's Kafka scaler signs in from the workers' kafka.extra: the same Secrets, KEDA's parameter names."""

from __future__ import annotations

import pytest

from knarr_operator.credentials import SecretRef
from knarr_operator.keda_auth import KedaAuthError, KedaKafkaAuth, keda_kafka_auth


def ref(prop: str, secret: str = "kafka", key: str | None = None) -> SecretRef:
    return SecretRef(env_name=f"KNARR_KAFKA__EXTRA__{prop}", secret=secret, key=key or prop, path=("kafka", "extra", prop))


def test_a_plaintext_broker_needs_no_sign_in():
    auth = keda_kafka_auth({}, [])
    assert auth == KedaKafkaAuth()
    assert not auth.needs_trigger_authentication


def test_scram_over_tls_with_credentials_from_a_secret_maps_to_kedas_parameters():
    extra = {"security.protocol": "SASL_SSL", "sasl.mechanisms": "SCRAM-SHA-256"}
    auth = keda_kafka_auth(extra, [ref("sasl.username", key="user"), ref("sasl.password", key="pass")])
    assert auth.metadata == {"tls": "enable", "sasl": "scram_sha256"}
    assert auth.from_secrets == {"username": ("kafka", "user"), "password": ("kafka", "pass")}
    assert auth.plain == {}


def test_a_plain_user_name_and_ca_certificate_are_auth_parameters_from_a_config_map():
    extra = {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.username": "search", "ssl.ca.pem": "-----BEGIN CERTIFICATE-----"}
    auth = keda_kafka_auth(extra, [ref("sasl.password")])
    assert auth.metadata == {"tls": "enable", "sasl": "plaintext"}
    assert auth.plain == {"username": "search", "ca": "-----BEGIN CERTIFICATE-----"}
    assert auth.from_secrets == {"password": ("kafka", "sasl.password")}


def test_mutual_tls_takes_the_certificate_and_key_from_secrets():
    auth = keda_kafka_auth({"security.protocol": "SSL"}, [ref("ssl.ca.pem"), ref("ssl.certificate.pem"), ref("ssl.key.pem"), ref("ssl.key.password")])
    assert auth.metadata == {"tls": "enable"}
    assert sorted(auth.from_secrets) == ["ca", "cert", "key", "keyPassword"]


def test_turning_off_certificate_verification_carries_over():
    auth = keda_kafka_auth({"security.protocol": "SSL", "enable.ssl.certificate.verification": "false"}, [])
    assert auth.metadata == {"tls": "enable", "unsafeSsl": "true"}


def test_oidc_client_credentials_become_kedas_oauthbearer_parameters_with_comma_separated_scopes():
    extra = {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.method": "oidc",
        "sasl.oauthbearer.client.id": "search", "sasl.oauthbearer.token.endpoint.url": "https://idp.example/token",
        "sasl.oauthbearer.scope": "kafka.read kafka.describe",
    }
    auth = keda_kafka_auth(extra, [ref("sasl.oauthbearer.client.secret")])
    assert auth.metadata["sasl"] == "oauthbearer"
    assert auth.plain == {"username": "search", "oauthTokenEndpointUri": "https://idp.example/token", "scopes": "kafka.read,kafka.describe"}
    assert auth.from_secrets == {"password": ("kafka", "sasl.oauthbearer.client.secret")}


def test_a_certificate_file_in_the_workers_pod_is_refused_naming_the_key_and_what_to_write_instead():
    with pytest.raises(KedaAuthError) as err:
        keda_kafka_auth({"security.protocol": "SSL", "ssl.ca.location": "/etc/kafka/ca.pem"}, [])
    assert "kafka.extra.ssl.ca.location: names a file in the worker's pod" in str(err.value)
    assert "give the PEM text as ssl.ca.pem (from a Secret) instead" in str(err.value)


def test_kerberos_is_refused_for_keda():
    with pytest.raises(KedaAuthError, match=r"kafka.extra.sasl.mechanism GSSAPI: KEDA's Kafka scaler supports PLAIN, SCRAM-SHA-256"):
        keda_kafka_auth({"security.protocol": "SASL_PLAINTEXT"}, [])  # librdkafka's default mechanism


def test_oauthbearer_without_oidc_client_credentials_is_refused():
    with pytest.raises(KedaAuthError, match="only with OIDC client credentials"):
        keda_kafka_auth({"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER"}, [])


def test_the_protocol_from_a_secret_is_refused_because_keda_needs_it_to_choose_its_mode():
    with pytest.raises(KedaAuthError, match="kafka.extra.security.protocol: KEDA needs it as a plain value"):
        keda_kafka_auth({}, [ref("security.protocol")])
