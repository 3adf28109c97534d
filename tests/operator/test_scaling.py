"""The autoscaling decision, property-tested."""

from __future__ import annotations

from hypothesis import assume, given
from hypothesis import strategies as st

from knarr_operator.scaling import clamp_for_spec, consumers_per_pod, decide, plan_replicas
from knarr_operator.spec import Scaling


@st.composite
def policies(draw):
    low = draw(st.integers(0, 20))
    return Scaling(
        min_replicas=low,
        max_replicas=draw(st.integers(max(low, 1), 40)),
        lag_per_replica=draw(st.integers(1, 10_000)),
        scale_down_delay_seconds=draw(st.integers(0, 3600)),
    )


lags = st.integers(0, 10**7)
partitions = st.integers(1, 64)
currents = st.integers(0, 64)
times = st.floats(0, 10**6, allow_nan=False)
since = st.one_of(st.none(), st.floats(0, 10**6, allow_nan=False))


@given(policies(), currents, lags, partitions, st.integers(1, 8), times)
def test_pods_of_several_processes_never_bring_more_consumers_than_partitions_need(policy, current, lag, parts,
                                                                                   per_pod, now):
    pods_needed = -(-parts // per_pod)  # a pod of `processes: per_pod` is that many consumers
    d = decide(policy, current=current, lag=lag, partitions=parts, now=now, low_lag_since=None,
               consumers_per_pod=per_pod)
    assert d.replicas <= pods_needed
    flooded = decide(policy, current=current, lag=10**12, partitions=parts, now=now, low_lag_since=None,
                     consumers_per_pod=per_pod)
    assert flooded.replicas == min(policy.max_replicas, pods_needed)


def test_a_pod_of_one_process_per_cpu_counts_its_cpu_limit_rounded_up_as_the_pod_does():
    assert consumers_per_pod(3, "8") == 3  # a count given is the count
    assert [consumers_per_pod(0, limit) for limit in ("2", 2, "1500m", "500m", "2.5")] == [2, 2, 2, 1, 3]
    assert consumers_per_pod(0, None) == 1  # no limit: the node's CPUs, unknown here
    assert consumers_per_pod(0, "two") == 1  # malformed: the Deployment's apply says so


@given(policies(), currents, lags, partitions, times, since)
def test_replicas_stay_within_the_range_and_never_exceed_partitions(policy, current, lag, parts, now, low_since):
    d = decide(policy, current=current, lag=lag, partitions=parts, now=now, low_lag_since=low_since)
    assert d.replicas <= min(policy.max_replicas, parts)
    assert d.replicas >= min(policy.min_replicas, parts)


@given(policies(), currents, lags, lags, partitions, times, since)
def test_more_lag_never_means_fewer_workers(policy, current, lag_a, lag_b, parts, now, low_since):
    low, high = sorted((lag_a, lag_b))
    kw = dict(current=current, partitions=parts, now=now, low_lag_since=low_since)
    assert decide(policy, lag=low, **kw).replicas <= decide(policy, lag=high, **kw).replicas


@given(policies(), currents, lags, partitions, times)
def test_scale_up_is_immediate(policy, current, lag, parts, now):
    d = decide(policy, current=current, lag=lag, partitions=parts, now=now, low_lag_since=None)
    wanted = max(min(policy.min_replicas, parts), min(policy.max_replicas, parts, -(-lag // policy.lag_per_replica)))
    if wanted > current:
        assert d.replicas == wanted
        assert d.low_lag_since is None


@given(policies(), st.integers(1, 64), partitions, times, st.floats(0, 1, exclude_max=True))
def test_no_scale_down_before_the_delay_has_passed(policy, current, parts, start, fraction):
    current = min(current, policy.max_replicas, parts)
    first = decide(policy, current=current, lag=0, partitions=parts, now=start, low_lag_since=None)
    later = start + fraction * policy.scale_down_delay_seconds
    assume(later - start < policy.scale_down_delay_seconds)  # float rounding may reach the delay itself
    second = decide(policy, current=current, lag=0, partitions=parts, now=later, low_lag_since=first.low_lag_since)
    if policy.scale_down_delay_seconds > 0:
        assert first.replicas == second.replicas == max(current, min(policy.min_replicas, parts))


@given(policies(), st.integers(1, 64), partitions, times)
def test_sustained_low_lag_scales_down_once_the_delay_has_passed(policy, current, parts, start):
    current = min(current, policy.max_replicas, parts)
    first = decide(policy, current=current, lag=0, partitions=parts, now=start, low_lag_since=None)
    # Just past the delay: exactly at it, float rounding of start + delay - start may fall short.
    after = start + policy.scale_down_delay_seconds + 1e-3
    done = decide(policy, current=first.replicas, lag=0, partitions=parts, now=after, low_lag_since=first.low_lag_since)
    assert done.replicas == min(policy.min_replicas, parts)
    assert done.low_lag_since is None


def test_a_lag_burst_resets_the_scale_down_clock():
    policy = Scaling(min_replicas=1, max_replicas=10, lag_per_replica=100, scale_down_delay_seconds=60)
    waiting = decide(policy, current=5, lag=0, partitions=10, now=0, low_lag_since=None)
    burst = decide(policy, current=5, lag=500, partitions=10, now=30, low_lag_since=waiting.low_lag_since)
    calm = decide(policy, current=5, lag=0, partitions=10, now=70, low_lag_since=burst.low_lag_since)
    assert (waiting.replicas, burst.replicas, calm.replicas) == (5, 5, 5)
    assert calm.low_lag_since == 70


@given(policies(), st.integers(0, 40))
def test_suspending_holds_zero_and_resuming_restores_the_count_from_before(scaling, current):
    suspended = plan_replicas(scaling, suspend=True, current=current, remembered=None)
    assert suspended.replicas == 0
    again = plan_replicas(scaling, suspend=True, current=0, remembered=suspended.resume_replicas)
    assert again == suspended  # remembered once, not overwritten by the zero it set
    resumed = plan_replicas(scaling, suspend=False, current=0, remembered=again.resume_replicas)
    expected = clamp_for_spec(scaling, current if current else None)
    assert (resumed.replicas, resumed.resumed_to, resumed.resume_replicas) == (expected, expected, None)


def test_without_suspend_the_count_is_the_scalers_within_the_range():
    plan = plan_replicas(Scaling(min_replicas=1, max_replicas=5), suspend=False, current=7, remembered=None)
    assert (plan.replicas, plan.resume_replicas, plan.resumed_to) == (5, None, None)
