"""A real HTTP server for the http sink's tests: records every request, answers 200, or fails on demand.

    python http_sink_server.py --record requests.jsonl [--port 0]

Prints ``PORT=<n>`` on stdout once it listens. Every request outside ``/_control/`` is appended to
the record file as one JSON line: method, path, headers, body, the status it was answered with,
and when it was received and answered. The file is kept across restarts (the tests stop the
server and start it again on the same port).

Control endpoints:

- ``POST /_control/faults`` with ``{"status": 503, "count": 3, "retry_after": "2", "match": "...",
  "hang": 0, "body": "..."}``: answer the next ``count`` requests (-1: every one) whose body contains
  ``match`` (default: any) with ``status`` (and ``Retry-After`` when given); with ``hang``, wait
  that many seconds before answering. ``"method": "OPTIONS"`` makes a rule apply to that method
  only (rules skip OPTIONS requests otherwise). Rules are tried in the order they were added.
- ``POST /_control/reset``: forget every fault rule.
- ``GET /_control/requests``: the recorded requests as a JSON list.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


class State:
    def __init__(self, record: Path) -> None:
        self.record = record
        self.lock = threading.Lock()
        self.rules: list[dict[str, Any]] = []

    def fault_for(self, method: str, body: str) -> dict[str, Any] | None:
        with self.lock:
            for rule in self.rules:
                if method != rule.get("method", method if method != "OPTIONS" else ""):
                    continue
                if rule.get("match", "") in body and rule.get("count", 1) != 0:
                    if rule.get("count", 1) > 0:
                        rule["count"] = rule.get("count", 1) - 1
                    return dict(rule)
        return None

    def append(self, entry: dict[str, Any]) -> None:
        with self.lock, self.record.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(entry) + "\n")

    def recorded(self) -> list[dict[str, Any]]:
        with self.lock:
            if not self.record.exists():
                return []
            return [json.loads(line) for line in self.record.read_text(encoding="utf-8").splitlines() if line]


class Handler(BaseHTTPRequestHandler):
    state: State
    protocol_version = "HTTP/1.1"
    # The status line, headers and body go out in separate writes: with Nagle's algorithm on, each
    # answer on a kept-alive connection would wait ~40 ms for the client's delayed ACK.
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:  # quiet: the record file says it all
        pass

    def _reply(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _body(self) -> str:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length).decode("utf-8", errors="replace") if length else ""

    def _control(self, body: str) -> None:
        if self.path == "/_control/faults" and self.command == "POST":
            with self.state.lock:
                self.state.rules.append(json.loads(body))
            self._reply(200, b"{}")
        elif self.path == "/_control/reset" and self.command == "POST":
            with self.state.lock:
                self.state.rules.clear()
            self._reply(200, b"{}")
        elif self.path == "/_control/requests" and self.command == "GET":
            self._reply(200, json.dumps(self.state.recorded()).encode())
        else:
            self._reply(404, b'{"error": "unknown control endpoint"}')

    def _handle(self) -> None:
        received = time.time()
        body = self._body()
        if self.path.startswith("/_control/"):
            self._control(body)
            return
        fault = self.state.fault_for(self.command, body)
        status, headers, reply = 200, {}, b'{"ok": true}'
        if fault:
            if fault.get("hang"):
                time.sleep(float(fault["hang"]))
            status = int(fault.get("status", 200))
            if fault.get("retry_after") is not None:
                headers["Retry-After"] = str(fault["retry_after"])
            reply = str(fault.get("body", json.dumps({"error": f"told to answer {status}"}))).encode()
        self.state.append({"method": self.command, "path": self.path, "headers": dict(self.headers.items()),
                           "body": body, "status": status, "received": received, "answered": time.time()})
        self._reply(status, reply, headers)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = do_HEAD = _handle


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record", type=Path, required=True)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    Handler.state = State(args.record)
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    print(f"PORT={server.server_address[1]}", flush=True)
    sys.stdout.close()
    server.serve_forever()


if __name__ == "__main__":
    main()
