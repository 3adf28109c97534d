"""Hiding credentials when a configuration is shown to people (``knarr check``). Pure.

A value is hidden when its key names a credential (password, secret, token, key, auth,
``sasl.jaas.config`` …) or it is a connection string with a password in it
(``postgresql://user:pw@host`` keeps everything but ``pw``).
"""

from __future__ import annotations

import re
from typing import Any

MASK = "***"
_SECRET_KEY = re.compile(r"(pass(word|wd)?|secret|token|credential|api[._-]?key|private[._-]?key|authorization|"
                         r"jaas|\bauth\b|x-api-key|cookie)", re.I)
_URL_PASSWORD = re.compile(r"(?P<head>[a-z][a-z0-9+.-]*://[^:/@\s]*:)(?P<password>[^@/\s]+)(?P<tail>@)", re.I)
_DSN_PASSWORD = re.compile(r"(?P<head>\bpassword\s*=\s*)(?P<password>\S+)", re.I)


def is_secret_key(key: str) -> bool:
    return bool(_SECRET_KEY.search(key))


def mask_value(value: str) -> str:
    value = _URL_PASSWORD.sub(lambda m: m["head"] + MASK + m["tail"], value)
    return _DSN_PASSWORD.sub(lambda m: m["head"] + MASK, value)


def masked(data: Any, key: str = "") -> Any:
    """A copy of ``data`` (plain config data) with every credential replaced by ``***``."""
    if isinstance(data, dict):
        return {k: masked(v, str(k)) for k, v in data.items()}
    if isinstance(data, list):
        return [masked(v, key) for v in data]
    if key and is_secret_key(key) and data not in (None, "", {}):
        return MASK
    if isinstance(data, str):
        return mask_value(data)
    return data
