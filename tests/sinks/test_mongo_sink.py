"""The mongo sink against a real MongoDB-wire server (FerretDB): what it writes, what it refuses, how it fails."""

from __future__ import annotations

import asyncio
import time

import pytest
from pymongo import MongoClient

from knarr.api.payloads import MongoPayload
from knarr.config.models import MongoSinkConfig
from knarr.sinks.base import PermanentSinkError, SinkConnectError, TransientSinkError
from knarr.sinks.mongo import MongoSink
from tests.services.mongo import PrivateMongo, documents


def without_ids(docs: list[dict]) -> list[dict]:
    return [{k: v for k, v in d.items() if k != "_id"} for d in docs]


@pytest.fixture
async def sink(mongo_uri: str, mongo_database: str):
    sink = MongoSink("docs", MongoSinkConfig(uri=mongo_uri, database=mongo_database, timeout_seconds=5))
    await sink.connect()
    yield sink
    await sink.close()


async def test_a_delivery_writes_each_payload_as_one_document_of_its_collection(sink, mongo_uri, mongo_database):
    await sink.deliver([MongoPayload(collection="results", data={"i": 0}),
                        MongoPayload(collection="audit", data={"event": "seen"}),
                        MongoPayload(collection="results", data={"i": 1, "nested": {"a": [1, 2]}})])

    assert without_ids(documents(mongo_uri, mongo_database, "results")) == [{"i": 0}, {"i": 1, "nested": {"a": [1, 2]}}]
    assert without_ids(documents(mongo_uri, mongo_database, "audit")) == [{"event": "seen"}]


async def test_the_handlers_data_object_is_not_given_an_id(sink):
    data = {"i": 0}
    await sink.deliver([MongoPayload(collection="results", data=data)])
    assert data == {"i": 0}


async def test_json_text_and_pydantic_models_become_documents_too(sink, mongo_uri, mongo_database):
    from pydantic import BaseModel

    class Result(BaseModel):
        word: str
        count: int

    await sink.deliver([MongoPayload(collection="results", data='{"word": "a", "count": 1}'),
                        MongoPayload(collection="results", data=Result(word="b", count=2))])
    assert without_ids(documents(mongo_uri, mongo_database, "results")) == [{"word": "a", "count": 1},
                                                                            {"word": "b", "count": 2}]


async def test_payloads_with_upsert_keys_replace_the_matching_document_instead_of_adding_one(sink, mongo_uri, mongo_database):
    await sink.deliver([MongoPayload(collection="words", data={"word": "a", "count": 1}, upsert_keys=["word"]),
                        MongoPayload(collection="words", data={"word": "b", "count": 1}, upsert_keys=["word"])])
    await sink.deliver([MongoPayload(collection="words", data={"word": "a", "count": 5}, upsert_keys=["word"])])

    assert sorted(without_ids(documents(mongo_uri, mongo_database, "words")), key=lambda d: d["word"]) == [
        {"word": "a", "count": 5}, {"word": "b", "count": 1}]


async def test_upserts_of_one_key_delivered_side_by_side_leave_one_document_given_a_unique_index(
    sink, mongo_uri, mongo_database
):
    with MongoClient(mongo_uri) as client:
        client[mongo_database].words.create_index("word", unique=True)
    await asyncio.gather(*(sink.deliver([MongoPayload(collection="words", data={"word": "a", "n": n},
                                                      upsert_keys=["word"])]) for n in range(6)))
    [doc] = documents(mongo_uri, mongo_database, "words")
    assert doc["word"] == "a" and doc["n"] in range(6)


async def test_a_document_the_server_refuses_is_named_and_the_documents_around_it_are_written(sink, mongo_uri, mongo_database):
    bad = MongoPayload(collection="results", data={"$set": 1})
    with pytest.raises(PermanentSinkError) as raised:
        await sink.deliver([MongoPayload(collection="results", data={"i": 0}), bad,
                            MongoPayload(collection="results", data={"i": 2})])

    assert raised.value.payloads == [bad]
    assert "refused 1 of 3 document(s): collection 'results': invalid key: \"$set\"" in str(raised.value)
    assert without_ids(documents(mongo_uri, mongo_database, "results")) == [{"i": 0}, {"i": 2}]


@pytest.mark.parametrize(("collection", "why"), [
    ("", "the collection name is empty"),
    ("a$b", "a collection name must not contain '$'"),
    ("a\x00b", "a collection name must not contain NUL"),
    ("system.users", "collections named system.* are the server's own"),
    ("a..b", "a collection name must not start or end with '.' or contain '..'"),
])
async def test_an_invalid_collection_name_refuses_its_payloads_naming_it(sink, collection, why):
    bad = MongoPayload(collection=collection, data={"i": 1})
    with pytest.raises(PermanentSinkError) as raised:
        await sink.deliver([bad, MongoPayload(collection="ok", data={"i": 2})])
    assert raised.value.payloads == [bad]
    assert f"collection {collection!r}: {why}" in str(raised.value)


async def test_a_document_larger_than_the_bson_limit_is_refused_before_it_is_sent(sink):
    big = MongoPayload(collection="results", data={"blob": "x" * (16 * 1024 * 1024)})
    with pytest.raises(PermanentSinkError, match=r"exceeds MongoDB's limit of 16777216 bytes") as raised:
        await sink.deliver([big])
    assert raised.value.payloads == [big]


async def test_data_that_is_not_an_object_or_misses_an_upsert_key_is_refused(sink):
    listed = MongoPayload(collection="results", data=[1, 2])
    keyless = MongoPayload(collection="results", data={"a": 1}, upsert_keys=["word"])
    with pytest.raises(PermanentSinkError) as raised:
        await sink.deliver([listed, keyless])
    assert raised.value.payloads == [listed, keyless]
    assert "data must be a JSON object (a dict or a pydantic model), not list" in str(raised.value)
    assert "upsert key(s) 'word' missing from the document" in str(raised.value)


async def test_a_duplicate_id_is_a_refusal_when_the_document_was_never_in_flight(sink):
    await sink.deliver([MongoPayload(collection="results", data={"_id": "k1", "v": 1})])
    again = MongoPayload(collection="results", data={"_id": "k1", "v": 2})
    with pytest.raises(PermanentSinkError, match="E11000 duplicate key error") as raised:
        await sink.deliver([again])
    assert raised.value.payloads == [again]


async def test_a_stopped_server_is_an_outage_after_the_timeout_and_the_retry_stores_each_document_once(
    private_mongo: PrivateMongo,
):
    """The write that timed out was stored when the server continued; the retry's duplicate keys say so."""
    database = f"partial_{time.monotonic_ns()}"
    sink = MongoSink("docs", MongoSinkConfig(uri=private_mongo.uri, database=database, timeout_seconds=1))
    await sink.connect()
    payloads = [MongoPayload(collection="results", data={"i": i}) for i in range(50)]
    client = MongoClient(private_mongo.uri)
    try:
        private_mongo.pause()
        started = time.monotonic()
        try:
            with pytest.raises(TransientSinkError, match="timed out"):
                await sink.deliver(payloads)
        finally:
            private_mongo.resume()
        assert time.monotonic() - started < 5
        deadline = time.monotonic() + 10
        while client[database].results.count_documents({}) < 50 and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert client[database].results.count_documents({}) == 50, "the broken-off write was not stored"

        await sink.deliver(payloads)

        assert sorted(d["i"] for d in client[database].results.find()) == list(range(50))
    finally:
        client.drop_database(database)
        client.close()
        await sink.close()


async def test_an_unreachable_server_fails_connect_naming_the_sink_without_the_password():
    sink = MongoSink("docs", MongoSinkConfig(uri="mongodb://knarr:s3cret@127.0.0.1:1/", database="x",
                                             timeout_seconds=1))
    with pytest.raises(SinkConnectError) as raised:
        await sink.connect()
    await sink.close()
    assert str(raised.value) == (
        "mongo sink 'docs' (mongodb://knarr:***@127.0.0.1:1/, database 'x'): cannot reach the server within 1s: "
        "127.0.0.1:1: [Errno 111] Connect call failed ('127.0.0.1', 1); check the URI and the network, "
        "or raise sinks.mongo.docs.timeout_seconds")
