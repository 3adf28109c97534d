"""trusted(): the engine's quick build of its own models gives what model_construct gives."""

from __future__ import annotations

import pytest
from knarr.api.groups import MessageGroup
from knarr.api.messages import SourceMessage
from knarr.api.tasks import ExecutorResult, ExecutorTask
from knarr.api.trusted import trusted, trusted_builder
from pydantic import BaseModel, PrivateAttr


def _same(built: BaseModel, constructed: BaseModel) -> None:
    assert built == constructed
    assert built.model_fields_set == constructed.model_fields_set
    assert list(built.__dict__) == list(constructed.__dict__)  # field order: model_dump and repr follow it
    assert built.model_dump() == constructed.model_dump()


@pytest.mark.parametrize("given", [
    {"exit_code": 0, "stdout": "out", "stderr": "", "duration_seconds": 0.25, "pid": 7, "attempt": 2,
     "stdout_truncated": True, "stderr_truncated": False},
    {"exit_code": 3, "stderr": "boom"},  # the rest from the defaults
])
def test_an_executor_result_is_the_one_model_construct_builds(given):
    task = ExecutorTask(args=["a"])
    _same(trusted(ExecutorResult, task=task, **given), ExecutorResult.model_construct(task=task, **given))


def test_a_message_group_is_the_one_model_construct_builds_and_keeps_the_lists_it_was_given():
    message = SourceMessage(topic="t", partition=0, offset=4, key=None, value=b"v")
    tasks = [ExecutorTask(args=["a"])]
    given = {"source_message": message, "tasks": tasks, "results": [], "errors": [], "started_at": 1.0,
             "finished_at": 2.0}
    group = trusted(MessageGroup, **given)
    _same(group, MessageGroup.model_construct(**given))
    assert group.tasks is tasks and group.total == 1 and group.succeeded == 0


def test_leaving_out_a_field_without_a_plain_default_falls_back_to_model_construct():
    message = SourceMessage(topic="t", partition=0, offset=4, key=None, value=b"v")
    group = trusted(MessageGroup, source_message=message)  # tasks etc. come from default factories
    assert group.tasks == [] and group.results == [] and group.model_fields_set == {"source_message"}
    assert group.tasks is not trusted(MessageGroup, source_message=message).tasks  # a fresh list each time


def test_a_model_with_private_attributes_is_left_to_model_construct():
    class WithPrivate(BaseModel):
        a: int = 1
        _seen: list = PrivateAttr(default_factory=list)

    built = trusted(WithPrivate, a=2)
    assert built.a == 2 and built._seen == []


def test_a_builder_of_a_model_builds_what_trusted_builds_given_every_field():
    task = ExecutorTask(args=["a"])
    given = {"task": task, "exit_code": 0, "stdout": "out", "stderr": "", "duration_seconds": 0.25, "pid": 7,
             "attempt": 2, "stdout_truncated": True, "stderr_truncated": False}
    built = trusted_builder(ExecutorResult)(**given)
    _same(built, ExecutorResult.model_construct(**given))
    _same(built, trusted(ExecutorResult, **given))
    message = {"topic": "t", "partition": 0, "offset": 4, "value": b"v", "key": None, "timestamp": 9, "payload": None,
               "parse_error": None}
    _same(trusted_builder(SourceMessage)(**message), SourceMessage.model_construct(**message))


def test_a_builder_wants_every_field_by_name():
    build = trusted_builder(ExecutorResult)
    with pytest.raises(TypeError, match="missing 7 required keyword-only arguments"):
        build(task=ExecutorTask(args=["a"]), exit_code=0)
    with pytest.raises(TypeError):
        build(ExecutorTask(args=["a"]), 0, "", "", 0.0, None, 1, False, False)


def test_a_model_whose_field_has_a_name_the_builder_uses_gets_no_builder():
    class Shadowing(BaseModel):
        cls: int = 1

    with pytest.raises(ValueError, match=r"Shadowing has fields whose names the builder cannot take \(cls\)"):
        trusted_builder(Shadowing)


def test_a_model_with_private_attributes_gets_no_builder():
    class WithPrivate(BaseModel):
        a: int = 1
        _seen: list = PrivateAttr(default_factory=list)

    with pytest.raises(ValueError, match="WithPrivate has private attributes or extra fields"):
        trusted_builder(WithPrivate)
