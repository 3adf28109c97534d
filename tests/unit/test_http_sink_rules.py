"""The http sink's pure rules: Retry-After, which statuses are worth waiting for; per-payload progress."""

from __future__ import annotations

import email.utils
import gc

import pytest

from knarr.api.payloads import HttpPayload
from knarr.sinks.http import is_passing, parse_retry_after
from knarr.sinks.progress import PayloadProgress

NOW = 1_800_000_000.0


@pytest.mark.parametrize(("header", "seconds"), [
    ("0", 0.0),
    ("7", 7.0),
    (" 120 ", 120.0),
    (email.utils.formatdate(NOW + 30, usegmt=True), 30.0),
    (email.utils.formatdate(NOW - 30, usegmt=True), 0.0),  # a date in the past: go now
])
def test_retry_after_is_read_as_seconds_or_as_an_http_date(header, seconds):
    assert parse_retry_after(header, NOW) == seconds


@pytest.mark.parametrize("header", [None, "", "-5", "1.5", "soon", "Wed, 99 Foo 2024"])
def test_a_missing_or_unreadable_retry_after_is_ignored(header):
    assert parse_retry_after(header, NOW) is None


@pytest.mark.parametrize("status", [408, 429, 500, 502, 503, 504, 599])
def test_timeouts_rate_limits_and_server_errors_are_worth_waiting_for(status):
    assert is_passing(status)


@pytest.mark.parametrize("status", [300, 301, 400, 401, 403, 404, 405, 409, 413, 422, 501, 505])
def test_refusals_redirects_and_unsupported_features_are_not(status):
    assert not is_passing(status)


def test_progress_is_kept_per_payload_object_until_forgotten():
    progress: PayloadProgress[list] = PayloadProgress(lambda _: [])
    a, b = HttpPayload(data=1), HttpPayload(data=1)  # equal, but two payloads
    progress.of(a).append("sent")
    assert progress.of(a) == ["sent"] and progress.of(b) == []
    progress.forget([a])
    assert progress.of(a) == []


def test_progress_goes_with_its_payload():
    progress: PayloadProgress[list] = PayloadProgress(lambda _: [])
    payload = HttpPayload(data=1)
    progress.of(payload)
    del payload
    gc.collect()
    assert len(progress) == 0
