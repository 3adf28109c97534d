"""The persistent-program protocol's frames: what the worker and the Python SDK read and write."""

from __future__ import annotations

import io
import json
import os
import struct
import threading
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from knarr.engine.frames import MAGIC, MAX_HEADER_BYTES, Decoder, FrameError, encode, parse_header
import knarr.task as task_sdk
from knarr.task import Request, Result, read_request, serve, write_result


def result_frame(stdout: bytes, stderr: bytes, **header) -> bytes:
    return encode({"type": "result", "id": "t1", "exit_code": 0, "stdout_bytes": len(stdout), **header}, stdout + stderr)


def test_a_frame_is_the_magic_two_lengths_a_json_header_and_the_body():
    frame = encode({"type": "task", "id": "t1"}, b"body")
    magic, header_len, body_len = struct.unpack(">4sII", frame[:12])
    assert (magic, body_len) == (MAGIC, 4)
    assert json.loads(frame[12:12 + header_len]) == {"type": "task", "id": "t1"}
    assert frame[12 + header_len:] == b"body"


_SCALARS = st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats(allow_nan=False,
                                                                                      allow_infinity=False) | st.text()
_VALUES = st.recursive(_SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner,
                                                                                            max_size=4), max_leaves=12)


@given(st.dictionaries(st.text(), _VALUES, max_size=6))
def test_a_header_reads_back_as_json_would_read_what_json_wrote(extra):
    header = {**extra, "type": "task"}
    frame = encode(header)
    head = frame[12:]
    assert parse_header(head) == json.loads(json.dumps(header, ensure_ascii=False)) == json.loads(head)


def test_what_the_fast_encoder_refuses_is_written_as_before():
    assert json.loads(encode({"type": "task", "n": 2**70})[12:]) == {"type": "task", "n": 2**70}
    with pytest.raises(UnicodeEncodeError):  # a lone surrogate: UTF-8 cannot hold it
        encode({"type": "task", "args": ["\ud800"]})


def test_a_header_with_json_modules_extensions_still_reads():
    assert parse_header(b'{"type":"result","score":NaN}')["score"] != 0  # NaN: not JSON, but Python's json takes it


def test_a_result_body_splits_into_stdout_and_stderr_at_stdout_bytes():
    [frame] = Decoder().feed(result_frame(b"out\n", b"err\n"))
    assert frame.header["exit_code"] == 0
    assert frame.parts == [b"out\n", b"err\n"] and frame.truncated == [False, False]


@given(st.lists(st.tuples(st.binary(max_size=300), st.binary(max_size=300)), min_size=1, max_size=5),
       st.integers(min_value=1, max_value=50))
def test_frames_fed_in_any_pieces_decode_the_same(outputs, piece):
    stream = b"".join(result_frame(out, err) for out, err in outputs)
    decoder = Decoder()
    frames = []
    for start in range(0, len(stream), piece):
        frames += decoder.feed(stream[start:start + piece])
    assert [tuple(f.parts) for f in frames] == outputs
    assert decoder.idle


@given(st.binary(max_size=400), st.binary(max_size=400), st.integers(min_value=1, max_value=500))
def test_a_frame_fed_whole_decodes_as_the_same_frame_fed_byte_by_byte(stdout, stderr, keep):
    frame = result_frame(stdout, stderr)
    whole, pieces = Decoder(keep=keep), Decoder(keep=keep)
    [at_once] = whole.feed(frame)
    [by_bytes] = [decoded for i in range(len(frame)) for decoded in pieces.feed(frame[i:i + 1])]
    assert (at_once.header, at_once.parts, at_once.truncated) == (by_bytes.header, by_bytes.parts, by_bytes.truncated)
    assert at_once.parts == [stdout[:keep], stderr[:keep]]
    assert whole.idle and pieces.idle


@given(st.binary(max_size=400), st.binary(max_size=400), st.integers(min_value=1, max_value=200),
       st.integers(min_value=1, max_value=64))
def test_each_part_keeps_its_head_up_to_the_cap_and_says_when_it_was_cut(stdout, stderr, keep, piece):
    stream = result_frame(stdout, stderr) + result_frame(b"next", b"")
    decoder = Decoder(keep=keep)
    frames = []
    for start in range(0, len(stream), piece):
        frames += decoder.feed(stream[start:start + piece])
    first, second = frames
    assert first.parts == [stdout[:keep], stderr[:keep]]
    assert first.truncated == [len(stdout) > keep, len(stderr) > keep]
    assert second.parts == [b"next"[:keep], b""]


def test_bytes_that_are_no_frame_are_refused_naming_what_came():
    with pytest.raises(FrameError, match=r"expected a frame starting with b'KNRF', got b'hello world!'.*stderr"):
        Decoder().feed(b"hello world!\n")


@pytest.mark.parametrize(("header", "expected"), [
    (b"not json", "not JSON"),
    (b"[1, 2]", "JSON object with a string 'type'"),
    (b'{"id": "t1"}', "JSON object with a string 'type'"),
])
def test_a_header_that_is_no_json_object_with_a_type_is_refused(header, expected):
    with pytest.raises(FrameError, match=expected):
        Decoder().feed(struct.pack(">4sII", MAGIC, len(header), 0) + header)


def test_a_header_over_the_limit_is_refused_before_it_is_buffered():
    with pytest.raises(FrameError, match=f"frame header of {MAX_HEADER_BYTES + 1} bytes"):
        Decoder().feed(struct.pack(">4sII", MAGIC, MAX_HEADER_BYTES + 1, 0))


def test_stdout_bytes_past_the_body_is_refused():
    frame = encode({"type": "result", "id": "t", "exit_code": 0, "stdout_bytes": 9}, b"abc")
    with pytest.raises(FrameError, match="stdout_bytes must be an integer from 0 to the body's 3 bytes, got 9"):
        Decoder().feed(frame)


def test_the_sdk_reads_a_request_and_writes_a_result_the_decoder_reads():
    inp = io.BytesIO(encode({"type": "task", "id": "t7", "args": ["a", "b"], "env": {"X": "1"}}, "stdin ü".encode()))
    request = read_request(inp)
    assert (request.id, request.args, request.env, request.text) == ("t7", ["a", "b"], {"X": "1"}, "stdin ü")
    assert read_request(inp) is None  # end of stdin: the worker wants the program to exit
    out = io.BytesIO()
    write_result(out, request.id, Result(exit_code=2, stdout="o", stderr=b"e"), duration_seconds=0.5)
    [frame] = Decoder().feed(out.getvalue())
    assert frame.header == {"type": "result", "id": "t7", "exit_code": 2, "stdout_bytes": 1, "duration_seconds": 0.5}
    assert frame.parts == [b"o", b"e"]


def test_serve_says_hello_answers_each_request_and_turns_an_exception_into_exit_code_1():
    def run(request: Request):
        if request.args == ["boom"]:
            raise RuntimeError("boom")
        return request.text.upper()

    requests = [encode({"type": "task", "id": "a", "args": []}, b"hi"), encode({"type": "task", "id": "b", "args": ["boom"]})]
    out = io.BytesIO()
    serve(run, inp=io.BytesIO(b"".join(requests)), out=out)
    hello, first, second = Decoder().feed(out.getvalue())
    assert (hello.header["type"], hello.header["protocol"]) == ("hello", 1)
    assert (first.header["id"], first.header["exit_code"], first.parts[0]) == ("a", 0, b"HI")
    assert (second.header["id"], second.header["exit_code"]) == ("b", 1)
    assert b"RuntimeError: boom" in second.parts[1]


def test_a_request_cut_short_is_an_error_not_a_hang():
    frame = encode({"type": "task", "id": "t", "args": []}, b"0123456789")
    with pytest.raises(FrameError, match=r"ended inside a frame \(body: 4 of 10 bytes\)"):
        read_request(io.BytesIO(frame[:-6]))


class _Pipe:
    """The read end of a real pipe, as a stream; the write end fed from a thread, in pieces, with pauses."""

    def __init__(self, pieces: list[tuple[float, bytes]]) -> None:
        self.read_fd, write_fd = os.pipe()
        self.writer = threading.Thread(target=self._feed, args=(write_fd, pieces))
        self.writer.start()

    @staticmethod
    def _feed(fd: int, pieces: list[tuple[float, bytes]]) -> None:
        for pause, data in pieces:
            time.sleep(pause)
            os.write(fd, data)
        os.close(fd)  # end of stdin

    def fileno(self) -> int:
        return self.read_fd


def test_serve_polling_stdin_answers_requests_cut_in_pieces_and_ends_at_end_of_stdin():
    first = encode({"type": "task", "id": "a", "args": []}, b"one")
    second = encode({"type": "task", "id": "b", "args": []}, b"two")
    # Pieces inside the looking (0.05 s) and after it, when the reader has gone to block.
    pipe = _Pipe([(0, first[:5]), (0.01, first[5:]), (0.2, second[:20]), (0.001, second[20:])])
    out = io.BytesIO()
    serve(lambda request: request.text.upper(), inp=pipe, out=out, poll_seconds=0.05)
    pipe.writer.join()
    hello, *answers = Decoder().feed(out.getvalue())
    assert hello.header["type"] == "hello"
    assert [(a.header["id"], a.parts[0]) for a in answers] == [("a", b"ONE"), ("b", b"TWO")]


def test_polled_input_looks_for_data_only_for_its_poll_seconds_then_blocks(monkeypatch):
    checks = []
    real_ready = task_sdk.PolledInput._ready
    monkeypatch.setattr(task_sdk.PolledInput, "_ready", lambda self: checks.append(1) or real_ready(self))
    pipe = _Pipe([(0.5, b"late")])  # nothing for half a second
    polled = task_sdk.PolledInput(pipe.fileno(), poll_seconds=0.02, interval=0.001)
    assert polled.read(4) == b"late"
    assert polled.read(1) == b""  # end of file
    pipe.writer.join()
    # About 0.02 / 0.001 checks while looking (sleeps run long, never short), then one blocking read:
    # had it kept looking for the whole half second, it would have made hundreds.
    assert 2 <= len(checks) <= 40, len(checks)


def test_serve_refuses_a_negative_poll_or_an_interval_of_zero():
    with pytest.raises(ValueError, match="poll_seconds must be 0 or more and poll_interval_seconds more than 0"):
        serve(lambda request: "", inp=io.BytesIO(), out=io.BytesIO(), poll_seconds=-1)
    with pytest.raises(ValueError, match="got 0.002 and 0"):
        serve(lambda request: "", inp=io.BytesIO(), out=io.BytesIO(), poll_seconds=0.002, poll_interval_seconds=0)
