"""The ledger alone, under any interleaving (hypothesis state machine).

The machine plays the partition processor: it takes windows, arranges random tasks (fan-out,
fan-in, offsets of no message), and then carries out the pending effects in random order,
giving each task a random outcome — success, failure, failure with retries exhausted (dead-
lettered), or replacement by new tasks — and making on_message_complete raise now and then
(the message is dead-lettered). Now and then the partition is revoked and a new assignment
starts. After every step: every closed group obeys ``total == succeeded + failed + replaced``,
no offset is complete before every task that works for it has settled and its group's hook
and deliveries are done, and the watermark never passes an incomplete offset.
"""

from __future__ import annotations

import itertools

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from knarr.api.messages import SourceMessage
from knarr.api.tasks import ExecutorError, ExecutorResult, ExecutorTask
from knarr.engine.ledger import (
    MESSAGE_OUTCOMES, ArrangeRefused, CloseGroup, DeadLetter, Failed, FinishWindow, GroupState, Ledger, Replaced,
    RunTask, Succeeded,
)
import pytest


def _message(offset: int) -> SourceMessage:
    return SourceMessage.model_construct(topic="t", partition=0, offset=offset, value=b"{}", key=None,
                                         timestamp=None, payload=None, parse_error=None)


def _error(task: ExecutorTask) -> ExecutorError:
    return ExecutorError.model_construct(task=task, exit_code=1, stderr="boom", exception=None, pid=1,
                                         reason="failed", attempt=1, result=None)


def _outcome_seen_by_the_handler(view) -> str:
    """What the handler's MessageGroup says became of the message: what the metric must count."""
    if view.is_empty:
        return "empty"
    if view.all_succeeded:
        return "succeeded"
    return "failed" if view.succeeded == 0 else "partial"


def _works_for(run) -> set[int]:
    """The messages of its window a task names, worked out from the task itself, not the ledger's records.

    While a window is split, a task answers for its part only; replacements inherit that."""
    part = getattr(run, "part", None)
    return set(run.task.source_offsets) & set(run.window.groups) & (part if part is not None else set(run.window.groups))


class LedgerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.offsets = itertools.count(0)
        self._new_ledger()

    def _new_ledger(self) -> None:
        self.ledger = Ledger(0, max_tasks_per_window=50)
        self.pending: list = []  # effects not yet carried out
        self.unsettled: dict[int, set[int]] = {}  # offset -> ids of runs working for it, not yet settled
        self.closing_done: set[int] = set()  # offsets whose CloseGroup/DeadLetter was carried out
        self.messages: dict[int, SourceMessage] = {}
        self.closed_groups: list = []

    def _accept(self, effects) -> None:
        for effect in effects:
            if isinstance(effect, RunTask):
                for offset in _works_for(effect.run):
                    self.unsettled.setdefault(offset, set()).add(effect.run.id)
            self.pending.append(effect)

    # --- rules --------------------------------------------------------------------------------
    @rule(size=st.integers(1, 5), plan=st.lists(st.tuples(st.lists(st.integers(-1, 6), max_size=3)), max_size=8),
          refuse=st.booleans(), split=st.integers(0, 5), fail_first_part=st.booleans())
    def take_and_arrange(self, size, plan, refuse, split, fail_first_part):
        messages = [_message(next(self.offsets)) for _ in range(size)]
        for m in messages:
            self.messages[m.offset] = m
        window = self.ledger.take(messages)
        if refuse and plan:
            with pytest.raises(ArrangeRefused):
                self.ledger.check_arranged(["not a task"])
            self._accept(self.ledger.arrange_failed(window, "refused"))
            return
        base = messages[0].offset
        tasks = [ExecutorTask(args=[], source_offsets=[base + i if i >= 0 else 10**9 for i in spec])
                 for (spec,) in plan]
        if 0 < split < size:  # the window was split to find a failing message: each part answered alone
            first, rest = messages[:split], messages[split:]
            if fail_first_part:
                self._accept(self.ledger.arrange_failed(window, "raised", first))
            else:
                self._accept(self.ledger.arranged(window, self.ledger.check_arranged(tasks), first))
            self._accept(self.ledger.arranged(window, [], rest))
            return
        self._accept(self.ledger.arranged(window, self.ledger.check_arranged(tasks)))

    @precondition(lambda self: self.pending)
    @rule(pick=st.integers(0, 10**6), outcome=st.sampled_from(["ok", "fail", "exhausted", "replace"]),
          children=st.integers(0, 3), hook_raises=st.booleans())
    def carry_out(self, pick, outcome, children, hook_raises):
        effect = self.pending.pop(pick % len(self.pending))
        if isinstance(effect, RunTask):
            run = effect.run
            for offset in _works_for(run):
                self.unsettled[offset].discard(run.id)
            if outcome == "ok":
                result = ExecutorResult.model_construct(task=run.task, exit_code=0, stdout="", stderr="",
                                                        duration_seconds=0.0, pid=1, attempt=1)
                self._accept(self.ledger.settle(run, Succeeded(result)))
            elif outcome in ("fail", "exhausted"):
                self._accept(self.ledger.settle(run, Failed(_error(run.task), retries_exhausted=outcome == "exhausted")))
            else:
                kids = [ExecutorTask(args=[], source_offsets=list(run.task.source_offsets)) for _ in range(children)]
                self._accept(self.ledger.settle(run, Replaced(_error(run.task), kids)))
        elif isinstance(effect, CloseGroup):
            group = effect.group
            assert group.state is GroupState.CLOSING
            view = group.view()
            assert view.total == view.succeeded + view.failed + view.replaced
            assert group.outcome() == _outcome_seen_by_the_handler(view) and group.outcome() in MESSAGE_OUTCOMES
            assert group.counts() == {"task_count": view.total, "total": view.total, "succeeded": view.succeeded,
                                      "failed": view.failed, "replaced": view.replaced}
            assert not self.unsettled.get(group.offset), "a group closes while a task for it is unsettled"
            self.closed_groups.append(group)
            if hook_raises:  # the shell dead-letters the message, then the letter lets the group close
                self._accept([DeadLetter("on_message_complete", "raised", [group.message], holds=[group])])
            else:
                self.closing_done.add(group.offset)
                self._accept(self.ledger.group_closed(group))
        elif isinstance(effect, DeadLetter):
            if effect.stage != "task":
                self.closing_done.update(g.offset for g in effect.holds)
            self._accept(self.ledger.dead_lettered(effect))
        else:
            assert isinstance(effect, FinishWindow)
            assert all(g.state is GroupState.CLOSED for g in effect.window.groups.values())

    @rule()
    def revoke(self):
        """The partition goes; what was committable must not pass anything incomplete. A new assignment follows."""
        self._check_watermark()
        self.ledger.forget()
        self._new_ledger()

    # --- invariants ---------------------------------------------------------------------------
    def _check_watermark(self) -> None:
        mark = self.ledger.watermark.watermark
        if mark is None:
            return
        for offset in self.messages:
            if offset < mark:
                assert offset in self.closing_done, f"watermark {mark} passed offset {offset}, which never closed"

    @invariant()
    def watermark_never_passes_an_incomplete_offset(self):
        self._check_watermark()

    @invariant()
    def completed_offsets_had_every_task_settled_and_their_hook_done(self):
        for offset in self.messages:
            if offset in self.closing_done:
                assert not self.unsettled.get(offset), f"offset {offset} complete with a task still unsettled"

    @invariant()
    def in_flight_counts_exactly_the_unsettled_runs(self):
        unsettled_runs = {e.run.id for e in self.pending if isinstance(e, RunTask)}
        assert self.ledger.in_flight == len(unsettled_runs)

    @invariant()
    def every_closed_group_adds_up(self):
        for group in self.closed_groups:
            view = group.view()
            assert view.total == view.succeeded + view.failed + view.replaced

    def teardown(self):
        # Carry everything out: every window must finish and every offset complete.
        while self.pending:
            effect = self.pending.pop(0)
            if isinstance(effect, RunTask):
                for offset in _works_for(effect.run):
                    self.unsettled[offset].discard(effect.run.id)
                result = ExecutorResult.model_construct(task=effect.run.task, exit_code=0, stdout="", stderr="",
                                                        duration_seconds=0.0, pid=1, attempt=1)
                self._accept(self.ledger.settle(effect.run, Succeeded(result)))
            elif isinstance(effect, CloseGroup):
                self.closing_done.add(effect.group.offset)
                self._accept(self.ledger.group_closed(effect.group))
            elif isinstance(effect, DeadLetter):
                if effect.stage != "task":
                    self.closing_done.update(g.offset for g in effect.holds)
                self._accept(self.ledger.dead_lettered(effect))
        assert self.ledger.settled and self.ledger.in_flight == 0
        assert self.ledger.watermark.all_done


LedgerMachine.TestCase.settings = settings(max_examples=300, stateful_step_count=40, deadline=None)
test_any_interleaving_keeps_the_ledger_consistent = LedgerMachine.TestCase


def test_a_replacement_is_registered_before_the_replaced_task_lets_go_of_its_group():
    ledger = Ledger(0)
    window = ledger.take([_message(0)])
    [first] = [e.run for e in ledger.arranged(window, [ExecutorTask(source_offsets=[0])])]
    effects = ledger.settle(first, Replaced(_error(first.task), [ExecutorTask(source_offsets=[0])]))
    assert [type(e) for e in effects] == [RunTask]  # the group is not closed: its successor runs
    assert effects[0].run.task.parent_task_id == first.task.task_id


def test_a_task_whose_outputs_went_to_the_sinks_counts_as_delivering_not_as_work_until_it_settles():
    ledger = Ledger(0)
    window = ledger.take([_message(0), _message(1)])
    first, second = [e.run for e in ledger.arranged(window, [ExecutorTask(source_offsets=[0]),
                                                            ExecutorTask(source_offsets=[1])])]
    assert (ledger.in_flight, ledger.working, ledger.delivering) == (2, 2, 0)
    ledger.delivering_from(first)
    ledger.delivering_from(first)  # handed over twice (a redelivery): still one
    assert (ledger.in_flight, ledger.working, ledger.delivering) == (2, 1, 1)
    ledger.settle(first, Succeeded(ExecutorResult(task=first.task, exit_code=0)))
    assert (ledger.in_flight, ledger.working, ledger.delivering) == (1, 1, 0)
    ledger.delivering_from(second)
    ledger.forget()  # revoked: nothing is counted any more
    assert (ledger.in_flight, ledger.working, ledger.delivering) == (0, 0, 0)


def test_a_task_that_exhausts_its_retries_holds_its_offset_until_the_dead_letter_is_written():
    ledger = Ledger(0)
    window = ledger.take([_message(0)])
    [run] = [e.run for e in ledger.arranged(window, [ExecutorTask(source_offsets=[0])])]
    [letter] = ledger.settle(run, Failed(_error(run.task), retries_exhausted=True))
    assert isinstance(letter, DeadLetter) and letter.stage == "task"
    assert ledger.watermark.committable() is None
    [close] = ledger.dead_lettered(letter)
    assert isinstance(close, CloseGroup) and close.group.view().failed == 1
    ledger.group_closed(close.group)
    assert ledger.watermark.committable() == 1


def test_with_discard_an_exhausted_task_is_only_counted_failed():
    ledger = Ledger(0, dead_letter_exhausted=False)
    window = ledger.take([_message(0)])
    [run] = [e.run for e in ledger.arranged(window, [ExecutorTask(source_offsets=[0])])]
    [close] = ledger.settle(run, Failed(_error(run.task), retries_exhausted=True))
    assert isinstance(close, CloseGroup)


def test_an_arrange_result_over_the_bound_is_refused_naming_the_setting():
    ledger = Ledger(0, max_tasks_per_window=3)
    with pytest.raises(ArrangeRefused, match="executor.max_tasks_per_window"):
        ledger.check_arranged([ExecutorTask() for _ in range(4)])


def test_messages_set_aside_by_the_parse_policy_complete_without_arrange():
    ledger = Ledger(0)
    window = ledger.take([_message(0), _message(1)])
    assert ledger.set_aside(window, [window.messages[0]], "bad json", dead_letter=False) == []
    assert ledger.watermark.committable() == 1
    [letter] = ledger.set_aside(window, [window.messages[1]], "bad json", dead_letter=True)
    assert ledger.watermark.committable() == 1  # held until the dead letter is written
    ledger.dead_lettered(letter)
    assert ledger.arranged(window, []) == [] and ledger.watermark.committable() == 2
    assert ledger.settled


def test_a_finished_window_is_freed_by_reference_counting_alone_without_the_garbage_collector():
    import gc
    import weakref

    ledger = Ledger(0)
    gc.disable()  # a reference cycle would keep the window, its messages and results until a collection
    try:
        window = ledger.take([_message(0), _message(1)])
        gone = weakref.ref(window)
        runs = [e.run for e in ledger.arranged(window, [ExecutorTask(source_offsets=[0]), ExecutorTask(source_offsets=[1])])]
        effects = []
        for run in runs:
            result = ExecutorResult.model_construct(task=run.task, exit_code=0, stdout="", stderr="",
                                                    duration_seconds=0.0, pid=1, attempt=1)
            effects += ledger.settle(run, Succeeded(result))
        finished = [f for e in effects if isinstance(e, CloseGroup) for f in ledger.group_closed(e.group)]
        assert [type(f) for f in finished] == [FinishWindow] and ledger.watermark.committable() == 2
        del window, runs, effects, finished, run, result
        assert gone() is None
    finally:
        gc.enable()
