"""Which configuration values are secrets, and how to show a config without them.

Used wherever configuration is shown to people — validation errors, librdkafka's own
error text, a printed config — and by the operator, which keeps such values out of
ConfigMaps. Two questions, kept apart on purpose:

- :func:`is_secret_key`: does this key *always* hold a secret (a password, a token, an
  ``Authorization`` header)? The operator refuses such a value written inline in a Pipeline.
- :func:`is_masked`: should a value at this path never be printed? Broader: it adds whole
  families (``sasl.*``, ``ssl.key*``) and connection strings (``dsn``, ``uri``, ``url``),
  which may or may not carry credentials — hiding one that does not costs nothing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

MASK = "***"

# Key names that always hold a secret (case-insensitive): a password anywhere in the name
# (PGPASSWORD), "secret", a token as a word of its own (GITHUB_TOKEN, not TOKENIZER), API and
# private keys, credentials-bearing headers, and librdkafka's inline key material.
_SECRET_KEY = re.compile(
    r"passw(or)?d|(^|[^a-z])pwd($|[^a-z])|secret|(^|[^a-z])tokens?($|[^a-z])|api[-_.]?key|private[-_.]?key"
    r"|authorization|cookie|^ssl\.key\.pem$|^ssl_key$|^sasl\.oauthbearer\.config$",
    re.IGNORECASE,
)
# Names that point at a secret rather than hold one (sasl.oauthbearer.token.endpoint.url).
_POINTER_KEY = re.compile(r"(url|uri|endpoint|location|path|file)$", re.IGNORECASE)
# Families of keys whose values are never printed (may be secrets, may not).
_MASKED_KEY = re.compile(r"^sasl\.|^ssl\.key|^ssl\.keystore|credential|^dsn$|^uri$|^url$", re.IGNORECASE)
# `password=...` in key=value connection strings (libpq DSNs, ODBC, JDBC query strings).
_KV_PASSWORD = re.compile(r"(passw(or)?d|pwd)\s*=\s*[^\s;&]+", re.IGNORECASE)


def is_secret_key(key: str) -> bool:
    """True when a value under ``key`` is a secret whatever it looks like."""
    return bool(_SECRET_KEY.search(key)) and not _POINTER_KEY.search(key)


def has_credentials(value: object) -> bool:
    """True when ``value`` is a connection string carrying a password (``scheme://user:pw@host``, ``password=``)."""
    if not isinstance(value, str):
        return False
    if _KV_PASSWORD.search(value):
        return True
    if "://" not in value:
        return False
    try:
        return urlsplit(value.strip()).password is not None
    except ValueError:
        return "@" in value  # unparsable, and it may hold userinfo: count it as a secret


def is_masked(path: Sequence[object], value: object = None) -> bool:
    """True when the value at ``path`` (config keys, outermost first) must not be printed."""
    for part in path:
        key = str(part)
        if is_secret_key(key) or _MASKED_KEY.search(key):
            return True
    return has_credentials(value)


def masked(data: Any, path: tuple[str, ...] = ()) -> Any:
    """A copy of ``data`` (plain config data) with every secret value replaced by ``***``."""
    if isinstance(data, Mapping):
        return {k: masked(v, (*path, str(k))) for k, v in data.items()}
    if isinstance(data, list):
        return [masked(v, path) for v in data]
    if data is None or data == "":
        return data
    return MASK if is_masked(path, data) else data


def redact(text: str, secrets: Sequence[str]) -> str:
    """``text`` with every occurrence of each (non-trivial) secret value replaced by ``***``."""
    for secret in sorted({s for s in secrets if len(s) >= 3}, key=len, reverse=True):
        text = text.replace(secret, MASK)
    return text


def secret_values(data: Any, path: tuple[str, ...] = ()) -> list[str]:
    """Every masked value in ``data`` as text: what :func:`redact` must remove from foreign messages."""
    if isinstance(data, Mapping):
        return [s for k, v in data.items() for s in secret_values(v, (*path, str(k)))]
    if isinstance(data, list):
        return [s for v in data for s in secret_values(v, path)]
    if data is None or isinstance(data, bool):
        return []
    return [str(data)] if is_masked(path, data) else []
