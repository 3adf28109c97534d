"""Keeping task output to a cap: when to look again, and how a cut head is decoded."""

from __future__ import annotations

from knarr.engine.capture import FIRST_CHECK_SECONDS, LAST_CHECK_SECONDS, decode_head, next_check_delay


def test_output_that_grew_is_checked_again_soon():
    assert next_check_delay(0.64, grew=True) == FIRST_CHECK_SECONDS


def test_quiet_output_is_checked_ever_less_often_up_to_a_limit():
    delays = [FIRST_CHECK_SECONDS]
    for _ in range(10):
        delays.append(next_check_delay(delays[-1], grew=False))
    assert delays[:3] == [0.02, 0.04, 0.08]
    assert delays[-1] == LAST_CHECK_SECONDS


def test_a_cut_through_a_multibyte_character_drops_the_partial_character():
    data = "ab✓".encode()[:-1]  # the check mark cut after two of its three bytes
    assert decode_head(data, truncated=True) == "ab"


def test_complete_output_keeps_replacement_characters_for_invalid_bytes():
    assert decode_head(b"a\xffb", truncated=False) == "a\ufffdb"
    assert decode_head("ab✓".encode()[:-1], truncated=False) == "ab\ufffd"
