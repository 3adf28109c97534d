"""Which partitions count as stranded: unowned in a stable group, in every look, for longer than a rebalance takes.

The fault itself, and the rejoin that mends it, run on the real broker in tests/worker/test_static_membership.py.
"""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from knarr.config.models import KafkaConfig
from knarr.kafka.ownership import GroupLook, StrandWatch, assigned_partitions, grace_seconds, unowned
from knarr.sources.kafka import _group_check


def test_a_partition_in_nobodys_assignment_of_a_stable_group_is_unowned():
    assert unowned(GroupLook(stable=True, partitions=4, assigned=frozenset({2, 3}))) == {0, 1}
    assert unowned(GroupLook(stable=True, partitions=4, assigned=frozenset(range(4)))) == set()


def test_nothing_is_unowned_while_the_group_rebalances():
    assert unowned(GroupLook(stable=False, partitions=4, assigned=frozenset())) == set()


def test_only_the_topics_own_partitions_count_among_the_members_assignments():
    pairs = [("in", 0), ("other", 1), ("in", 3)]
    assert assigned_partitions("in", pairs) == {0, 3}


def test_the_grace_outlasts_a_revoking_members_drain_and_a_silent_members_session():
    assert grace_seconds(session_timeout_s=45, revoke_wait_s=40, interval_s=15) == 60
    assert grace_seconds(session_timeout_s=6, revoke_wait_s=12, interval_s=1) == 13


def test_a_partition_unowned_in_every_look_for_the_grace_is_stranded():
    watch = StrandWatch(grace=10)
    assert watch.observe(0, frozenset({0, 1})) == set()
    assert watch.observe(5, frozenset({0, 1})) == set()
    assert watch.observe(10, frozenset({0, 1})) == {0, 1}


def test_a_partition_owned_in_between_starts_again():
    watch = StrandWatch(grace=10)
    watch.observe(0, frozenset({0, 1}))
    watch.observe(6, frozenset({1}))  # 0 had an owner: the second phase of a rebalance handed it out
    assert watch.observe(12, frozenset({0, 1})) == {1}
    assert watch.observe(22, frozenset({0, 1})) == {0, 1}


def test_a_rejoin_forgets_what_was_seen_before_it():
    watch = StrandWatch(grace=10)
    watch.observe(0, frozenset({0}))
    watch.reset()
    assert watch.observe(10, frozenset({0})) == set()


def test_the_looks_run_with_static_membership_only_and_can_be_turned_off():
    static = {"group.instance.id": "pod-0"}
    assert _group_check(KafkaConfig(), revoke_wait=40) is None
    assert _group_check(KafkaConfig(extra=static, ownership_check_seconds=0), revoke_wait=40) is None
    check = _group_check(KafkaConfig(extra=static, consumer_group="g", source_topic="t"), revoke_wait=40)
    assert (check.group, check.topic, check.interval) == ("g", "t", 15)


def test_a_negative_interval_is_refused_naming_the_field():
    with pytest.raises(ValidationError, match="ownership_check_seconds"):
        KafkaConfig(ownership_check_seconds=-1)
