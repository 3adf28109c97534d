"""event_loop.run: the loop and garbage collector of a process knarr starts, and the process as it was afterwards."""

from __future__ import annotations

import gc

from knarr.engine import event_loop


def test_run_sets_the_collector_while_main_runs_and_puts_it_back_after():
    before = gc.get_threshold()

    async def main():
        return gc.get_threshold(), gc.get_freeze_count()

    (threshold, frozen) = event_loop.run(main(), "asyncio", gc_threshold=12_345)
    assert threshold == (12_345, *before[1:]) and frozen > 0
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


def test_the_collector_is_put_back_when_main_raises():
    before = gc.get_threshold()

    async def main():
        raise RuntimeError("handler bug")

    try:
        event_loop.run(main(), "uvloop")
    except RuntimeError:
        pass
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0
