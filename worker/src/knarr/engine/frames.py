"""Frames of the persistent-program protocol: encoding, and decoding in pieces (pure, no I/O).

A frame is a 12-byte prefix — the magic ``KNRF``, the header's length and the body's length,
both unsigned 32-bit big-endian — then the header (a JSON object in UTF-8, with a ``type``)
and the body (raw bytes). ``docs/task-protocol.md`` is the specification; this module is the
worker's and the Python SDK's implementation of its framing.

The body of a ``result`` frame is the task's stdout followed by its stderr, ``stdout_bytes``
in the header saying where one ends. The decoder keeps at most ``keep`` bytes of each part
(the head) and drops the rest as it streams past, so a program that prints a gigabyte costs
the worker at most the cap, as in spawn mode.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field

import orjson

MAGIC = b"KNRF"
PREFIX = struct.Struct(">4sII")
PROTOCOL_VERSION = 1
MAX_HEADER_BYTES = 1024 * 1024
MAX_BODY_BYTES = 0xFFFFFFFF
_NO_LIMIT = 1 << 62
# orjson reads and writes the headers, five to ten times faster than json, on both sides of every
# task. json still writes what orjson refuses (a lone surrogate, an integer past 64 bits) and reads
# what orjson refuses (NaN and infinities, which are no JSON), and says what is wrong with a header
# that is no JSON. One difference remains: an integer past 64 bits in a header reads as a float
# (no field of the protocol holds one).
_encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


class FrameError(ValueError):
    """Bytes that are no frame of this protocol; the message says what was wrong and where."""


def encode(header: dict, body: bytes = b"") -> bytes:
    """One frame. Raises UnicodeEncodeError for text that UTF-8 cannot hold (lone surrogates)."""
    try:
        head = orjson.dumps(header)
    except TypeError:  # orjson.JSONEncodeError: a lone surrogate (UnicodeEncodeError below), an integer past 64 bits
        head = _encode(header).encode()
    if len(head) > MAX_HEADER_BYTES:
        raise FrameError(f"a frame header of {len(head)} bytes is over the protocol's {MAX_HEADER_BYTES}; "
                         "pass bulk data on stdin (the body), not in args or env")
    if len(body) > MAX_BODY_BYTES:
        raise FrameError(f"a frame body of {len(body)} bytes is over the protocol's 4 GiB")
    return PREFIX.pack(MAGIC, len(head), len(body)) + head + body


def check_prefix(prefix: bytes) -> tuple[int, int]:
    """(header length, body length) from a frame's first 12 bytes; FrameError if they are no frame prefix."""
    magic, header_len, body_len = PREFIX.unpack(prefix)
    if magic != MAGIC:
        raise FrameError(
            f"expected a frame starting with {MAGIC!r}, got {bytes(prefix)!r}; a program must write nothing "
            "but frames to its stdout (logs and prints go to stderr)"
        )
    if header_len > MAX_HEADER_BYTES:
        raise FrameError(f"frame header of {header_len} bytes is over the protocol's {MAX_HEADER_BYTES}")
    return header_len, body_len


def _decode(data: bytes) -> object:
    try:
        return json.loads(data)
    except (UnicodeDecodeError, ValueError) as exc:
        raise FrameError(f"frame header is not JSON in UTF-8 ({exc}): {bytes(data[:80])!r}") from None


def parse_header(data: bytes) -> dict:
    """A frame's header: a JSON object with a string ``type``."""
    try:
        header = orjson.loads(data)
    except ValueError:  # orjson.JSONDecodeError; json says why, or takes what orjson refuses (NaN, huge integers)
        header = _decode(data)
    if not isinstance(header, dict) or not isinstance(header.get("type"), str):
        raise FrameError(f"frame header must be a JSON object with a string 'type', got {bytes(data[:80])!r}")
    return header


def body_parts(header: dict, body_len: int) -> list[int]:
    """The lengths of a frame's body parts: stdout and stderr for a result, the body whole otherwise."""
    if header["type"] != "result":
        return [body_len]
    split = header.get("stdout_bytes", body_len)
    if type(split) is not int or not 0 <= split <= body_len:
        raise FrameError(f"result frame's stdout_bytes must be an integer from 0 to the body's {body_len} bytes, "
                         f"got {split!r}")
    return [split, body_len - split]


@dataclass(slots=True)
class Frame:
    header: dict
    parts: list[bytes]  # the body's parts, each cut to the decoder's keep
    truncated: list[bool]  # per part: bytes past the keep were dropped


@dataclass(slots=True)
class _Partial:
    header: dict
    lengths: list[int]
    index: int = 0
    remaining: int = 0
    kept: list[bytearray] = field(default_factory=list)
    truncated: list[bool] = field(default_factory=list)


class Decoder:
    """Frames out of a byte stream fed in arbitrary pieces. Raises FrameError on the first malformed byte."""

    __slots__ = ("keep", "_buf", "_partial")

    def __init__(self, keep: int = _NO_LIMIT) -> None:
        self.keep = keep
        self._buf = bytearray()
        self._partial: _Partial | None = None

    @property
    def idle(self) -> bool:
        """No frame begun: the stream stands between frames."""
        return not self._buf and self._partial is None

    def feed(self, data: bytes) -> list[Frame]:
        if self._partial is None and not self._buf and len(data) >= PREFIX.size:  # between frames
            header_len, body_len = check_prefix(data[:PREFIX.size])
            end = PREFIX.size + header_len
            if len(data) == end + body_len:  # one whole frame, as a program's answer most often comes
                header = parse_header(data[PREFIX.size:end])
                lengths = body_parts(header, body_len)
                if max(lengths) <= self.keep:
                    return [Frame(header, _cut(data, end, lengths), [False] * len(lengths))]
        buf = self._buf
        buf += data
        frames: list[Frame] = []
        while True:
            partial = self._partial
            if partial is None:
                if len(buf) < PREFIX.size:
                    return frames
                header_len, body_len = check_prefix(bytes(buf[:PREFIX.size]))
                end = PREFIX.size + header_len
                if len(buf) < end:
                    return frames
                header = parse_header(bytes(buf[PREFIX.size:end]))
                lengths = body_parts(header, body_len)
                if len(buf) - end >= body_len and max(lengths) <= self.keep:  # the whole frame is here
                    frames.append(Frame(header, _cut(buf, end, lengths), [False] * len(lengths)))
                    del buf[:end + body_len]
                    continue
                del buf[:end]
                partial = self._partial = _Partial(header, lengths, 0, lengths[0],
                                                   [bytearray() for _ in lengths], [False] * len(lengths))
            while partial.index < len(partial.lengths):
                if partial.remaining == 0:
                    partial.index += 1
                    if partial.index < len(partial.lengths):
                        partial.remaining = partial.lengths[partial.index]
                    continue
                if not buf:
                    return frames
                take = min(partial.remaining, len(buf))
                kept = partial.kept[partial.index]
                room = self.keep - len(kept)
                if room > 0:
                    kept += buf[:min(take, room)]
                if take > room:
                    partial.truncated[partial.index] = True
                del buf[:take]
                partial.remaining -= take
            frames.append(Frame(partial.header, [bytes(k) for k in partial.kept], partial.truncated))
            self._partial = None


def _cut(data: bytes | bytearray, start: int, lengths: list[int]) -> list[bytes]:
    """The body's parts (one, or a result's stdout and stderr: body_parts), of ``lengths``, from ``start`` in ``data``."""
    end = start + lengths[0]
    if len(lengths) == 1:
        return [bytes(data[start:end])]
    return [bytes(data[start:end]), bytes(data[end:end + lengths[1]])]
