"""The mongo sink's pure rules: collection names, documents, upsert filters, which errors are outages."""

from __future__ import annotations

import pytest
from pydantic import BaseModel
from pymongo.errors import (
    AutoReconnect,
    BulkWriteError,
    DuplicateKeyError,
    ExecutionTimeout,
    NetworkTimeout,
    NotPrimaryError,
    OperationFailure,
    ServerSelectionTimeoutError,
    WriteConcernError,
)

from knarr.sinks.mongo import collection_problem, document_of, is_transient, upsert_filter


@pytest.mark.parametrize("name", ["results", "a.b", "words_2024", "ünïcode"])
def test_ordinary_collection_names_are_accepted(name):
    assert collection_problem(name) is None


@pytest.mark.parametrize("name", ["", "a$b", "$cmd", "a\x00", "system.profile", ".a", "a.", "a..b"])
def test_collection_names_the_server_would_refuse_or_that_are_its_own_are_refused(name):
    assert collection_problem(name) is not None


class Word(BaseModel):
    word: str
    count: int


@pytest.mark.parametrize(("data", "document"), [
    ({"a": 1}, {"a": 1}),
    (Word(word="w", count=2), {"word": "w", "count": 2}),
    ('{"a": [1, 2]}', {"a": [1, 2]}),
    (b'{"a": null}', {"a": None}),
])
def test_dicts_models_and_json_text_become_documents(data, document):
    assert document_of(data) == document


@pytest.mark.parametrize(("data", "why"), [
    ([1, 2], "data must be a JSON object (a dict or a pydantic model), not list"),
    ("[1]", "data must be a JSON object (a dict or a pydantic model), not list"),
    ("nope", "data is text but not JSON"),
    (3, "data must be a JSON object (a dict or a pydantic model), not int"),
])
def test_data_that_is_not_an_object_is_refused_saying_why(data, why):
    with pytest.raises(ValueError, match=why.replace("(", r"\(").replace(")", r"\)")):
        document_of(data)


def test_a_document_is_a_copy_of_the_handlers_dict():
    data = {"a": 1}
    document_of(data)["_id"] = 1
    assert data == {"a": 1}


def test_the_upsert_filter_holds_the_keys_values_and_a_missing_key_is_named():
    assert upsert_filter({"k": 1, "j": "x", "v": 2}, ["k", "j"]) == {"k": 1, "j": "x"}
    with pytest.raises(ValueError, match="upsert key\\(s\\) 'j', 'z' missing from the document"):
        upsert_filter({"k": 1}, ["k", "j", "z"])


@pytest.mark.parametrize("error", [
    AutoReconnect("connection reset"),
    NetworkTimeout("timed out"),
    ServerSelectionTimeoutError("no servers"),
    NotPrimaryError("not primary"),
    ExecutionTimeout("operation exceeded time limit", 50),
    WriteConcernError("waiting for replication timed out", 64),
    OperationFailure("interrupted at shutdown", 11600),
    OperationFailure("the primary stepped down", 189),
    OperationFailure("request rate is large", 16500),
    OperationFailure("retry me", 1, {"errorLabels": ["RetryableWriteError"]}),
])
def test_errors_of_a_server_that_is_away_or_busy_are_outages(error):
    assert is_transient(error)


@pytest.mark.parametrize("error", [
    OperationFailure("not authorized on db to execute command", 13),
    OperationFailure("invalid key", 2),
    DuplicateKeyError("E11000 duplicate key error", 11000),
    BulkWriteError({"writeErrors": [{"index": 0, "code": 11000, "errmsg": "E11000"}]}),
    ValueError("not a pymongo error"),
])
def test_errors_that_refuse_the_documents_are_not_outages(error):
    assert not is_transient(error)
