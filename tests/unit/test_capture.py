"""Keeping task output to a cap: when to look again, and how a cut head is decoded."""

from __future__ import annotations

from knarr.engine.capture import (
    FAST_GROWTH_BYTES,
    FIRST_CHECK_SECONDS,
    LAST_CHECK_SECONDS,
    decode_head,
    next_check_delay,
)


def test_output_flooding_in_is_checked_again_soon():
    assert next_check_delay(0.64, grown=FAST_GROWTH_BYTES) == FIRST_CHECK_SECONDS


def test_quiet_or_trickling_output_is_checked_ever_less_often_up_to_a_limit():
    delays = [FIRST_CHECK_SECONDS]
    for grown in [0, 80, 0, 4096, 0, 0, 0, 0, 0, 0, 0, 0]:
        delays.append(next_check_delay(delays[-1], grown))
    assert delays[:4] == [0.005, 0.01, 0.02, 0.04]
    assert delays[-1] == LAST_CHECK_SECONDS


def test_a_cut_through_a_multibyte_character_drops_the_partial_character():
    data = "ab✓".encode()[:-1]  # the check mark cut after two of its three bytes
    assert decode_head(data, truncated=True) == "ab"


def test_complete_output_keeps_replacement_characters_for_invalid_bytes():
    assert decode_head(b"a\xffb", truncated=False) == "a\ufffdb"
    assert decode_head("ab✓".encode()[:-1], truncated=False) == "ab\ufffd"
