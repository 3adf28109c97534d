"""Which sink a payload's ``sink`` name resolves to."""

import pytest

from knarr.sinks.resolution import SinkResolutionError, resolve_sink


def test_an_empty_name_means_the_only_sink_of_that_type():
    assert resolve_sink("kafka", "", ["results"]) == "results"


def test_a_named_sink_resolves_to_itself():
    assert resolve_sink("kafka", "b", ["a", "b"]) == "b"


def test_an_empty_name_with_several_sinks_is_ambiguous_and_lists_them():
    with pytest.raises(SinkResolutionError, match=r"2 kafka sinks are configured \(a, b\)"):
        resolve_sink("kafka", "", ["a", "b"])


def test_an_unknown_name_is_an_error_naming_the_configured_sinks():
    with pytest.raises(SinkResolutionError, match=r"names sink 'nope'.*configured kafka sinks are: a, b"):
        resolve_sink("kafka", "nope", ["b", "a"])


def test_a_payload_for_an_unconfigured_type_says_how_to_add_one():
    with pytest.raises(SinkResolutionError, match=r"no filesystem sink is configured; add one under sinks.filesystem"):
        resolve_sink("filesystem", "", [])
