"""KEDA's Kafka scaler signs in as the workers do: from the same ``kafka.extra``, the same Secrets. Pure.

The workers speak librdkafka; KEDA's scaler (sarama) takes its own parameter names, some
only as trigger metadata, some only from a TriggerAuthentication:

=========================================================  ==========================================
``kafka.extra`` (librdkafka)                               KEDA kafka scaler
=========================================================  ==========================================
``security.protocol`` SSL, SASL_SSL                        ``tls: enable`` (trigger metadata)
``sasl.mechanism(s)`` PLAIN, SCRAM-SHA-256/512, OAUTHBEARER ``sasl: plaintext|scram_sha256|scram_sha512|oauthbearer``
``sasl.username``, ``sasl.password``                       ``username``, ``password``
``sasl.oauthbearer.client.id``, ``….client.secret``        ``username``, ``password`` (client credentials)
``sasl.oauthbearer.token.endpoint.url``                    ``oauthTokenEndpointUri``
``sasl.oauthbearer.scope``, ``….extensions``               ``scopes``, ``oauthExtensions``
``ssl.ca.pem``, ``ssl.certificate.pem``, ``ssl.key.pem``   ``ca``, ``cert``, ``key``
``ssl.key.password``                                       ``keyPassword``
``enable.ssl.certificate.verification: false``             ``unsafeSsl: true`` (trigger metadata)
=========================================================  ==========================================

A value from a Secret stays in that Secret (the TriggerAuthentication's ``secretTargetRef``);
a plain one that KEDA takes only as an auth parameter goes through a ConfigMap
(``configMapTargetRef``). What KEDA cannot use the way the workers do — a file in the worker's
pod (``ssl.ca.location``), Kerberos, OAUTHBEARER without OIDC client credentials — is
refused before anything rolls out, naming the key: with it the ScaledObject could never
read the lag, and would leave the workers at whatever count they had.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from knarr_operator.credentials import SecretRef
from knarr_operator.worker_config import WorkerConfig

# librdkafka property -> KEDA auth parameter, for values passed through unchanged.
AUTH_PARAMS = {
    "sasl.username": "username",
    "sasl.password": "password",
    "sasl.oauthbearer.client.id": "username",
    "sasl.oauthbearer.client.secret": "password",
    "sasl.oauthbearer.token.endpoint.url": "oauthTokenEndpointUri",
    "sasl.oauthbearer.extensions": "oauthExtensions",
    "sasl.oauthbearer.scope": "scopes",
    "ssl.ca.pem": "ca",
    "ssl.certificate.pem": "cert",
    "ssl.key.pem": "key",
    "ssl.key.password": "keyPassword",
}
SASL_MECHANISMS = {"PLAIN": "plaintext", "SCRAM-SHA-256": "scram_sha256", "SCRAM-SHA-512": "scram_sha512", "OAUTHBEARER": "oauthbearer"}
# Properties that decide the mode: KEDA wants them as words of its own, so they must be plain values.
MODE_KEYS = ("security.protocol", "sasl.mechanism", "sasl.mechanisms", "sasl.oauthbearer.method", "enable.ssl.certificate.verification")
# Files in the worker's pod: KEDA runs elsewhere and takes the PEM text itself.
_FILE_INSTEAD = {"ssl.ca.location": "ssl.ca.pem", "ssl.certificate.location": "ssl.certificate.pem", "ssl.key.location": "ssl.key.pem"}


class KedaAuthError(ValueError):
    """KEDA's Kafka scaler cannot sign in the way ``kafka.extra`` says the workers do."""


@dataclass(frozen=True)
class KedaKafkaAuth:
    metadata: dict[str, str] = field(default_factory=dict)  # trigger metadata: tls, sasl, unsafeSsl
    from_secrets: dict[str, tuple[str, str]] = field(default_factory=dict)  # auth parameter -> (secret, key)
    plain: dict[str, str] = field(default_factory=dict)  # auth parameter -> value, read from a ConfigMap

    @property
    def needs_trigger_authentication(self) -> bool:
        return bool(self.from_secrets or self.plain)


def keda_kafka_auth(extra: Mapping[str, Any], refs: Iterable[SecretRef]) -> KedaKafkaAuth:
    """The KEDA side of ``kafka.extra``: ``extra`` holds the plain values, ``refs`` the credentials.

    Raises :class:`KedaAuthError` listing every property KEDA cannot be given.
    """
    plain = {str(k).strip().lower(): ("" if v is None else str(v)) for k, v in extra.items()}
    secret = {ref.path[2].strip().lower(): (ref.secret, ref.key) for ref in refs if ref.path[:2] == ("kafka", "extra") and len(ref.path) == 3}
    problems: list[str] = []
    for key in MODE_KEYS:
        if key in secret:
            problems.append(f"kafka.extra.{key}: KEDA needs it as a plain value to choose its mode; write it inline (it is no secret)")
    for key, instead in _FILE_INSTEAD.items():
        if key in plain or key in secret:
            problems.append(f"kafka.extra.{key}: names a file in the worker's pod, which KEDA cannot read; "
                            f"give the PEM text as {instead} (from a Secret) instead")
    protocol = plain.get("security.protocol", "PLAINTEXT").upper()
    metadata: dict[str, str] = {}
    if protocol in ("SSL", "SASL_SSL"):
        metadata["tls"] = "enable"
    if plain.get("enable.ssl.certificate.verification", "true").lower() == "false":
        metadata["unsafeSsl"] = "true"
    if protocol.startswith("SASL_"):
        mechanism = (plain.get("sasl.mechanisms") or plain.get("sasl.mechanism") or "GSSAPI").upper()
        if mechanism not in SASL_MECHANISMS:
            problems.append(f"kafka.extra.sasl.mechanism {mechanism}: KEDA's Kafka scaler supports "
                            f"{', '.join(SASL_MECHANISMS)} from a Pipeline (Kerberos needs a keytab file); use engine builtin")
        elif mechanism == "OAUTHBEARER" and plain.get("sasl.oauthbearer.method", "default").lower() != "oidc":
            problems.append("kafka.extra.sasl.oauthbearer.method: KEDA's Kafka scaler fetches OAUTHBEARER tokens only with "
                            "OIDC client credentials; set it to oidc with sasl.oauthbearer.client.id/.client.secret "
                            "and sasl.oauthbearer.token.endpoint.url, or use engine builtin")
        else:
            metadata["sasl"] = SASL_MECHANISMS[mechanism]
    if problems:
        raise KedaAuthError("scaling.engine keda: KEDA reads the lag with its own Kafka client, signed in from kafka.extra:\n"
                            + "\n".join(f"  {p}" for p in problems))
    from_secrets: dict[str, tuple[str, str]] = {}
    plain_params: dict[str, str] = {}
    for key, parameter in AUTH_PARAMS.items():
        if key in secret:
            from_secrets[parameter] = secret[key]
        elif plain.get(key):
            plain_params[parameter] = _scopes(plain[key]) if parameter == "scopes" else plain[key]
    return KedaKafkaAuth(metadata=metadata, from_secrets=from_secrets, plain=plain_params)


def workers_kafka_auth(config: WorkerConfig) -> KedaKafkaAuth:
    """The KEDA side of the workers' ``kafka.extra`` (credentials by reference, the rest as written)."""
    from_secrets = {ref.path[2] for ref in config.secrets if ref.path[:2] == ("kafka", "extra") and len(ref.path) == 3}
    plain = {k: v for k, v in config.validated.kafka.extra.items() if k not in from_secrets}
    return keda_kafka_auth(plain, config.secrets)


def _scopes(value: str) -> str:
    """librdkafka sends the scope as written (OAuth separates scopes by spaces); KEDA splits on commas."""
    return ",".join(part for part in re.split(r"[\s,]+", value) if part)
