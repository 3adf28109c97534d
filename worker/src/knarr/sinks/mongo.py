"""MongoDB sink: each payload is one document; a delivery is one ordered bulk write per collection.

A payload with ``upsert_keys`` replaces the document whose fields have the same values (inserting
it when there is none), so replaying it does not add a second one. Every other payload inserts.

Delivery is at least once, and a retry never turns into a refusal of its own: a payload without
an ``_id`` gets one (an ObjectId) before its first attempt and keeps it across attempts, so when
a bulk write broke off in an outage after the server had stored part of it, the retry's
duplicate-key error on a document that was in flight says "already stored", and the sink goes on
with the rest. A duplicate key on a document that was never in flight is a real refusal.

Failures: the server away, timing out, stepping down or short of its write concern is an outage
(:class:`TransientSinkError`: the delivery waits); a document the server refuses (a duplicate
key, a field name it rejects, too large, a bad collection name) is a refusal of that payload
alone (:class:`PermanentSinkError` naming it); the documents around it are still written.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import bson
from bson import ObjectId
from bson.errors import InvalidDocument
from pymongo import AsyncMongoClient, InsertOne, ReplaceOne
from pymongo.errors import (
    BulkWriteError,
    ConfigurationError,
    ConnectionFailure,
    ExecutionTimeout,
    InvalidName,
    OperationFailure,
    PyMongoError,
    WriteConcernError,
)

from knarr.config.masking import mask_value
from knarr.config.models import MongoSinkConfig
from knarr.config.root import KnarrConfig
from knarr.sinks.base import PermanentSinkError, SinkConnectError, TransientSinkError
from knarr.sinks.progress import PayloadProgress

_CONFIGURED_TIMEOUTS = re.compile(r" \(configured timeouts: [^)]*\)")
MAX_DOCUMENT_BYTES = 16 * 1024 * 1024  # MongoDB's BSON document limit
DUPLICATE_KEY = 11000
UPSERT_RACES = 3  # an upsert that keeps meeting a duplicate key conflicts on another unique index
# Server error codes that mean "not now" rather than "not this document": shutting down, stepping
# down, not primary, interrupted, over a time limit, a lock or write conflict, rate-limited.
TRANSIENT_CODES = frozenset({
    6, 7, 24, 46, 50, 64, 89, 91, 112, 133, 189, 262, 9001, 10107, 11600, 11602, 13435, 13436, 16500,
})


@dataclass(slots=True)
class _Pending:
    """A payload's document, kept across attempts so its ``_id`` stays the same."""

    document: dict[str, Any] | None = None
    in_flight: bool = False  # sent in an attempt that broke off: the server may have stored it
    done: bool = False


@dataclass(slots=True)
class _Write:
    payload: Any
    pending: _Pending
    upsert_filter: dict[str, Any] | None
    races: int = 0  # duplicate keys met as an upsert (another upsert of the same key was first)

    def operation(self) -> InsertOne | ReplaceOne:
        if self.upsert_filter is None:
            return InsertOne(self.pending.document)
        return ReplaceOne(self.upsert_filter, self.pending.document, upsert=True)


def collection_problem(name: str) -> str | None:
    """Why ``name`` cannot be a collection to write to, or None."""
    if not name:
        return "the collection name is empty"
    if "\x00" in name:
        return "a collection name must not contain NUL"
    if "$" in name:
        return "a collection name must not contain '$'"
    if name.startswith("system."):
        return "collections named system.* are the server's own"
    if name.startswith(".") or name.endswith(".") or ".." in name:
        return "a collection name must not start or end with '.' or contain '..'"
    return None


def document_of(data: Any) -> dict[str, Any]:
    """The document a payload's data becomes: a dict or model as is, JSON text holding an object."""
    if isinstance(data, (str, bytes, bytearray)):
        try:
            data = json.loads(data)
        except ValueError as exc:
            raise ValueError(f"data is text but not JSON ({exc})") from None
    elif hasattr(data, "model_dump"):
        data = data.model_dump(mode="json")
    if not isinstance(data, dict):
        raise ValueError(f"data must be a JSON object (a dict or a pydantic model), not {type(data).__name__}")
    return dict(data)  # our own copy: an _id added to it must not show up in the handler's object


def upsert_filter(document: dict[str, Any], keys: list[str]) -> dict[str, Any]:
    missing = [k for k in keys if k not in document]
    if missing:
        raise ValueError(f"upsert key(s) {', '.join(map(repr, missing))} missing from the document")
    return {k: document[k] for k in keys}


def _refusal(exc: Exception) -> str:
    """The error's own words, without the topology dump, timeout settings and raw reply PyMongo appends."""
    text = _CONFIGURED_TIMEOUTS.sub("", str(exc).split(", Timeout: ")[0].split(", full error: ")[0])
    return mask_value(text)[:1000]


def is_transient(exc: BaseException) -> bool:
    """Whether a PyMongo error means the server cannot take writes now (rather than refusing them)."""
    if isinstance(exc, (ConnectionFailure, ExecutionTimeout, WriteConcernError)):
        return True  # AutoReconnect, NetworkTimeout, NotPrimaryError, ServerSelectionTimeoutError, ...
    if isinstance(exc, OperationFailure):
        return exc.code in TRANSIENT_CODES or exc.has_error_label("RetryableWriteError")
    return isinstance(exc, PyMongoError) and getattr(exc, "timeout", False)


class MongoSink:
    sink_type = "mongo"

    def __init__(self, name: str, config: MongoSinkConfig) -> None:
        self.name = name
        self.config = config
        self._client: AsyncMongoClient | None = None
        self._database: Any = None
        self._progress: PayloadProgress[_Pending] = PayloadProgress(lambda _: _Pending())

    @classmethod
    def from_config(cls, name: str, config: MongoSinkConfig, root: KnarrConfig) -> MongoSink:
        return cls(name, config)

    @property
    def _where(self) -> str:
        return f"mongo sink {self.name!r} ({mask_value(self.config.uri)}, database {self.config.database!r})"

    async def connect(self) -> None:
        timeout_ms = int(self.config.timeout_seconds * 1000)
        try:
            self._client = AsyncMongoClient(
                self.config.uri, serverSelectionTimeoutMS=timeout_ms, connectTimeoutMS=timeout_ms,
                socketTimeoutMS=timeout_ms, appname="knarr",
            )
            self._database = self._client[self.config.database]
            await self._client.admin.command("ping")
        except InvalidName as exc:
            raise SinkConnectError(f"{self._where}: {_refusal(exc)}; fix sinks.mongo.{self.name}.database") from None
        except ConfigurationError as exc:  # a URI PyMongo cannot use (and mongodb+srv:// names that do not resolve)
            raise SinkConnectError(f"{self._where}: the URI cannot be used: {_refusal(exc)}; "
                                   f"fix sinks.mongo.{self.name}.uri") from None
        except PyMongoError as exc:
            if is_transient(exc):
                raise SinkConnectError(
                    f"{self._where}: cannot reach the server within {self.config.timeout_seconds:g}s: {_refusal(exc)}; "
                    f"check the URI and the network, or raise sinks.mongo.{self.name}.timeout_seconds") from None
            raise SinkConnectError(f"{self._where}: the server refused the connection: {_refusal(exc)}; "
                                   "check the URI and the credentials") from None

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None

    async def deliver(self, payloads: list[Any]) -> None:
        refused: list[tuple[Any, str]] = []
        writes: dict[str, list[_Write]] = {}
        for payload in payloads:
            pending = self._progress.of(payload)
            if pending.done:
                continue
            try:
                write = self._prepare(payload, pending)
            except ValueError as exc:
                refused.append((payload, f"collection {payload.collection!r}: {exc}"))
                continue
            writes.setdefault(payload.collection, []).append(write)
        for collection, batch in writes.items():
            await self._write(collection, batch, refused)
        if refused:
            shown = "; ".join(reason for _, reason in refused[:5])
            more = f" (and {len(refused) - 5} more)" if len(refused) > 5 else ""
            raise PermanentSinkError(f"database {self.config.database!r} refused {len(refused)} of {len(payloads)} "
                                     f"document(s): {shown}{more}", payloads=[p for p, _ in refused])
        self._progress.forget(payloads)

    def _prepare(self, payload: Any, pending: _Pending) -> _Write:
        """The write a payload becomes, checked here so one bad document cannot fail the others."""
        problem = collection_problem(payload.collection)
        if problem:
            raise ValueError(problem)
        if pending.document is None:
            document = document_of(payload.data)
            if not payload.upsert_keys:
                document.setdefault("_id", ObjectId())
            try:
                size = len(bson.encode(document))
            except (InvalidDocument, OverflowError) as exc:
                raise ValueError(f"not a valid BSON document: {exc}") from None
            if size > MAX_DOCUMENT_BYTES:
                raise ValueError(f"document of {size} bytes exceeds MongoDB's limit of {MAX_DOCUMENT_BYTES} bytes")
            pending.document = document
        keys = payload.upsert_keys
        return _Write(payload, pending, upsert_filter(pending.document, keys) if keys else None)

    async def _write(self, collection: str, batch: list[_Write], refused: list[tuple[Any, str]]) -> None:
        """One ordered bulk write; after a refused document, the rest of the batch is written on."""
        target = self._database[collection]
        while batch:
            try:
                await target.bulk_write([w.operation() for w in batch], ordered=True)
            except BulkWriteError as exc:
                batch = self._after_error(collection, batch, exc.details, refused)
                continue
            except KeyError:
                # FerretDB's reply to an update that failed lacks nModified, which PyMongo's bulk
                # result needs: what was applied is unknown, so go on one write at a time.
                for w in batch:
                    w.pending.in_flight = True
                await self._write_each(target, collection, batch, refused)
                return
            except PyMongoError as exc:
                self._fail_whole(collection, batch, exc, refused)
                return
            for w in batch:
                w.pending.done = True
            return

    async def _write_each(self, target: Any, collection: str, batch: list[_Write],
                          refused: list[tuple[Any, str]]) -> None:
        for i, w in enumerate(batch):
            while not w.pending.done:
                try:
                    if w.upsert_filter is None:
                        await target.insert_one(w.pending.document)
                    else:
                        await target.replace_one(w.upsert_filter, w.pending.document, upsert=True)
                except OperationFailure as exc:
                    if not is_transient(exc) and exc.code is not None:
                        if self._settle(collection, w, exc.code, str(exc), refused):
                            continue
                        break
                    self._fail_whole(collection, batch[i:], exc, refused)
                    return
                except PyMongoError as exc:
                    self._fail_whole(collection, batch[i:], exc, refused)
                    return
                w.pending.done = True

    def _fail_whole(self, collection: str, batch: list[_Write], exc: PyMongoError,
                    refused: list[tuple[Any, str]]) -> None:
        """An error about the write as a whole: an outage (raised), or a refusal of every document in it."""
        if is_transient(exc):
            for w in batch:
                w.pending.in_flight = True
            raise TransientSinkError(f"collection {collection!r}: {_refusal(exc)}") from None
        # Refused as a whole: not authorised, a collection that cannot be written, ...
        refused.extend((w.payload, f"collection {collection!r}: {_refusal(exc)}") for w in batch)

    def _after_error(self, collection: str, batch: list[_Write], details: dict[str, Any],
                     refused: list[tuple[Any, str]]) -> list[_Write]:
        """What is left to write after an ordered bulk write stopped at its first error."""
        errors = details.get("writeErrors") or []
        if not errors:  # every write applied, but the write concern was not satisfied: an outage
            for w in batch:
                w.pending.in_flight = True
            concern = (details.get("writeConcernErrors") or [{}])[0]
            raise TransientSinkError(f"collection {collection!r}: write concern not satisfied: "
                                     f"{concern.get('errmsg', 'unknown')}")
        error = errors[0]
        index, code, message = error["index"], error.get("code"), error.get("errmsg", "")
        for w in batch[:index]:
            w.pending.done = True
        if code in TRANSIENT_CODES:
            for w in batch[index:]:
                w.pending.in_flight = True
            raise TransientSinkError(f"collection {collection!r}: {message} (code {code})")
        again = self._settle(collection, batch[index], code, message, refused)
        return batch[index:] if again else batch[index + 1:]

    def _settle(self, collection: str, write: _Write, code: int | None, message: str,
                refused: list[tuple[Any, str]]) -> bool:
        """A write the server did not apply: already stored, worth sending again now (True), or refused."""
        if code == DUPLICATE_KEY:
            if write.upsert_filter is None and write.pending.in_flight:
                write.pending.done = True  # stored by the attempt that broke off
                return False
            if write.upsert_filter is not None and write.races < UPSERT_RACES:
                write.races += 1  # another upsert of the same key inserted first: this one now replaces it
                return True
        refused.append((write.payload, f"collection {collection!r}: {mask_value(message)[:1000]} (code {code})"))
        return False
