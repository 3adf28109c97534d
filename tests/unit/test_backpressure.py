"""Flow control: the worker holds at the high watermark, isolates partitions flooded by fan-out, bounds
the tasks awaiting the sinks' confirmation apart from the work, and ends a hold early when the pool
would otherwise stand idle; while it holds, it looks whether the hold is over once per round of the
event loop."""

import asyncio

from hypothesis import given
from hypothesis import strategies as st

from knarr.engine.backpressure import Flow, Watermarks, decide_flow, held_load
from knarr.engine.scheduling import SlotScheduler
from knarr.engine.worker import Worker
from knarr.sources.memory import MemorySource

from tests.worker.harness import BEHAVE, local_config

HIGH, LOW, BATCH = 128, 16, 100
FLOODED = HIGH + BATCH
DELIVERY_HIGH, DELIVERY_LOW = 256, 128


def decide(loads: dict[int, int], previous: Flow = Flow(), pool_idle: bool = False, delivering: int = 0) -> Flow:
    return decide_flow(loads, previous, Watermarks(HIGH, LOW), BATCH, pool_idle, delivering,
                       Watermarks(DELIVERY_HIGH, DELIVERY_LOW))


def test_below_the_high_watermark_everything_flows():
    assert decide({0: 60, 1: 60}) == Flow()


def test_the_worker_holds_at_the_high_watermark_and_consumes_again_at_the_low_one():
    held = decide({0: 64, 1: 64})
    assert held == Flow(hold=True)
    assert decide({0: 30, 1: 20}, held).hold  # hysteresis: still above the low watermark
    assert decide({0: 8, 1: 8}, held) == Flow()


def test_an_evenly_loaded_worker_holds_without_pausing_any_partition_at_the_client():
    # A client pause would drop the messages already fetched; a hold keeps them.
    assert decide({0: 40, 1: 40, 2: 40, 3: 40}) == Flow(hold=True)


def test_one_partition_carrying_what_a_poll_can_bring_is_held_not_isolated():
    # high - 1 before the last poll, + one batch: consumption alone can get here.
    assert decide({0: HIGH - 1 + BATCH, 1: 0}) == Flow(hold=True)


def test_a_partition_flooded_by_fan_out_is_isolated_while_a_trickling_one_keeps_flowing():
    flow = decide({0: 10_000, 1: 1})
    assert flow == Flow(hold=False, isolated=frozenset({0}))


def test_an_isolated_partition_rejoins_once_drained_to_the_low_watermark():
    isolated = Flow(isolated=frozenset({0}))
    assert decide({0: 100, 1: 1}, isolated).isolated == {0}
    assert decide({0: LOW, 1: 1}, isolated) == Flow()


def test_the_others_still_hold_together_beside_an_isolated_partition():
    flow = decide({0: 10_000, 1: 70, 2: 70})
    assert flow == Flow(hold=True, isolated=frozenset({0}))
    assert held_load({0: 10_000, 1: 70, 2: 70}, flow) == 140


loads_strategy = st.dictionaries(st.integers(0, 7), st.integers(0, 20_000), min_size=1, max_size=8)


@given(loads_strategy, st.booleans(), st.frozensets(st.integers(0, 7)), st.booleans(), st.integers(0, 1_000))
def test_whatever_flows_is_bounded_by_the_config_not_the_lag(loads, was_holding, was_isolated, pool_idle, delivering):
    flow = decide(loads, Flow(was_holding, was_isolated), pool_idle, delivering)
    flowing = held_load(loads, flow)
    if not flow.hold:
        # Taking messages only while the partitions that take them are under the high
        # watermark (or draining from a hold): one more poll keeps them under high + batch.
        assert flowing < HIGH
        assert delivering < DELIVERY_HIGH  # and the outputs awaiting the sinks under theirs
    for p in flow.isolated:  # isolated only when flooded, kept only until drained
        assert loads[p] >= FLOODED or (p in was_isolated and loads[p] > LOW)
    for p, load in loads.items():
        if load >= FLOODED:
            assert p in flow.isolated


def test_a_hold_ends_above_the_low_watermark_when_the_pool_has_a_slot_nothing_waits_for():
    # What holds the load up then is past the executors (outputs waiting on a sink): holding on
    # would only leave the slot idle.
    held = decide({0: 64, 1: 64})
    assert decide({0: 40, 1: 20}, held, pool_idle=True) == Flow()
    assert decide({0: 40, 1: 20}, held, pool_idle=False).hold


def test_an_idle_pool_does_not_lift_the_high_watermark():
    assert decide({0: 64, 1: 64}, Flow(hold=True), pool_idle=True).hold
    assert decide({0: 64, 1: 64}, Flow(), pool_idle=True).hold


@given(loads_strategy, st.booleans())
def test_a_hold_ends_at_the_low_watermark_or_with_an_idle_pool_under_the_high_one(loads, pool_idle):
    flow = decide(loads, Flow(hold=True), pool_idle)
    load = held_load(loads, flow)
    assert flow.hold == (load >= HIGH if pool_idle else load > LOW)


def test_tasks_awaiting_the_sinks_confirmation_do_not_count_against_the_works_watermark():
    # Tiny tasks at 20,000 a second keep 100-200 tasks waiting on the broker: counted as work,
    # they alone reached the high watermark, and the pool idled through every hold's poll.
    assert decide({0: 60, 1: 60}, delivering=200) == Flow()


def test_the_worker_holds_while_the_sinks_confirmations_reach_their_own_high_watermark():
    # A slow sink: what awaits it stays bounded, however little work is left.
    held = decide({0: 0}, delivering=DELIVERY_HIGH)
    assert held == Flow(hold=True)
    assert decide({0: 0}, held, delivering=DELIVERY_LOW + 1).hold  # hysteresis
    assert decide({0: 0}, held, delivering=DELIVERY_LOW) == Flow()
    # an idle pool ends it under the high watermark, as it does the work's: the slot would only idle
    assert decide({0: 0}, held, pool_idle=True, delivering=DELIVERY_HIGH - 1) == Flow()
    assert decide({0: 0}, held, pool_idle=True, delivering=DELIVERY_HIGH).hold


@given(st.integers(0, 200), st.integers(0, 1_000), st.booleans())
def test_a_hold_ends_only_when_both_the_work_and_the_deliveries_let_it(load, delivering, pool_idle):
    flow = decide({0: load}, Flow(hold=True), pool_idle, delivering)
    work_lets = load <= LOW or (pool_idle and load < HIGH)
    deliveries_let = delivering <= DELIVERY_LOW or (pool_idle and delivering < DELIVERY_HIGH)
    assert flow.hold == (not (work_lets and deliveries_let))


def test_the_scheduler_says_when_a_released_slot_stays_free_with_nothing_waiting():
    scheduler = SlotScheduler(2)
    calls = []
    scheduler.on_free_slot = lambda: calls.append(scheduler.free)
    assert scheduler.take(0) and scheduler.take(0)
    waiter = Waiter()
    scheduler.wait(0, (), waiter)
    scheduler.release(0)  # the waiting task takes it: the pool is not idle
    assert waiter.held is False and calls == []
    scheduler.release(0)
    assert calls == [1]


class Waiter:
    def __init__(self) -> None:
        self.held: bool | None = None

    def done(self) -> bool:
        return self.held is not None

    def set_result(self, held: bool) -> None:
        self.held = held


class _Partition:
    """A partition processor as the worker's flow control sees one: its load, and messages queued."""

    def __init__(self, load: int) -> None:
        self.load, self.queued, self.delivering = load, 0, 0


async def test_tasks_ending_in_one_round_of_the_loop_check_the_hold_once_after_it(tmp_path):
    worker = Worker(local_config(tmp_path, binary_path=BEHAVE), object(), source=MemorySource([]))
    cfg = worker.config.executor
    worker.scheduler = SlotScheduler(2)
    worker.processors = {0: _Partition(cfg.backpressure_high), 1: _Partition(cfg.backpressure_high)}
    worker._flow = Flow(hold=True)
    reads = 0
    loads = worker._loads

    def counted():
        nonlocal reads
        reads += 1
        return loads()

    worker._loads = counted
    for _ in range(5):  # five tasks end in one round, the load still above the low watermark
        worker._on_progress()
    assert reads == 0 and not worker._progress.is_set()  # nothing read while the round goes on
    await asyncio.sleep(0)
    assert reads == 1 and not worker._progress.is_set()  # one check after it: the hold goes on

    for processor in worker.processors.values():  # drained to the low watermark this round
        processor.load = cfg.backpressure_low // 2
    worker._on_progress()
    worker._on_progress()
    await asyncio.sleep(0)
    assert reads == 2 and worker._progress.is_set()  # the held poll loop is woken
    worker._on_progress()
    await asyncio.sleep(0)
    assert reads == 2  # already woken: nothing more to check until the poll loop holds again
