"""Persistent programs' waits share one timer: each still fails at its own deadline, and only if unanswered."""

from __future__ import annotations

import asyncio

import uvloop

from knarr.engine.programs import Deadlines


class _Waiting:
    """Stands in for a Program: its loop, and when (and what) expired."""

    def __init__(self, loop: asyncio.AbstractEventLoop, name: str, expired: list) -> None:
        self.loop, self.name, self._expired = loop, name, expired

    def expire(self, waiter: asyncio.Future, timeout: float, what: str) -> None:
        self._expired.append((self.name, round(self.loop.time() - self.started, 3), what))
        waiter.set_result(None)

    def wait(self, deadlines: Deadlines, timeout: float) -> asyncio.Future:
        self.started = self.loop.time()
        waiter = self.loop.create_future()
        deadlines.start(self, waiter, timeout, f"{self.name}'s wait")
        return waiter


def test_each_wait_fails_at_its_own_deadline_whatever_order_they_began_in():
    async def main() -> list:
        loop, expired, deadlines = asyncio.get_running_loop(), [], Deadlines()
        late, early, middle = (_Waiting(loop, name, expired) for name in ("late", "early", "middle"))
        waits = [late.wait(deadlines, 0.30), early.wait(deadlines, 0.05), middle.wait(deadlines, 0.15)]
        await asyncio.gather(*waits)
        return expired

    expired = uvloop.run(main())
    assert [name for name, _, _ in expired] == ["early", "middle", "late"]
    for (name, after, what), due in zip(expired, (0.05, 0.15, 0.30)):
        assert due - 0.002 <= after < due + 0.1, (name, after)  # at its deadline, not at the timer's first
        assert what == f"{name}'s wait"


def test_an_answered_wait_never_expires_and_the_others_keep_their_deadlines():
    async def main() -> tuple[list, bool]:
        loop, expired, deadlines = asyncio.get_running_loop(), [], Deadlines()
        answered, unanswered = _Waiting(loop, "answered", expired), _Waiting(loop, "unanswered", expired)
        first = answered.wait(deadlines, 0.05)
        second = unanswered.wait(deadlines, 0.20)
        await asyncio.sleep(0.01)
        deadlines.stop(answered)  # the answer came: the timer armed for its deadline finds nothing due
        first.set_result(None)
        await second
        await asyncio.sleep(0.1)
        return expired, second.done()

    expired, done = uvloop.run(main())
    assert [name for name, _, _ in expired] == ["unanswered"] and done
    assert 0.198 <= expired[0][1] < 0.3


def test_a_program_waiting_again_replaces_its_earlier_wait():
    async def main() -> list:
        loop, expired, deadlines = asyncio.get_running_loop(), [], Deadlines()
        program = _Waiting(loop, "program", expired)
        program.wait(deadlines, 0.05)
        deadlines.stop(program)
        await program.wait(deadlines, 0.1)
        return expired

    expired = uvloop.run(main())
    assert len(expired) == 1 and 0.098 <= expired[0][1] < 0.2
