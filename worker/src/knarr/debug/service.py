"""Starting the flight recorder and the debug UI for a worker (``debug.enabled``)."""

from __future__ import annotations

import errno
import sqlite3
from typing import Any

from knarr.config.masking import masked
from knarr.config.root import dump_config
from knarr.debug.overview import Throughput, overview
from knarr.debug.recorder import FlightRecorder
from knarr.debug.server import DebugServer
from knarr.errors import UnavailableError


async def start_debug(worker: Any) -> tuple[FlightRecorder, DebugServer]:
    """Open the recorder, then listen; the server's URL goes into worker_config so peers can link to it."""
    cfg = worker.config
    throughput = Throughput()

    def state() -> dict[str, Any]:
        return overview(worker, throughput)

    recorder = FlightRecorder(cfg.debug, worker.worker_id, cluster=worker.cluster,
                              consumer_group=cfg.kafka.consumer_group, masked_config=masked(dump_config(cfg)),
                              state=state)
    server = DebugServer(cfg, recorder, state, handler=worker.handler)
    try:
        await server.start()
    except OSError as exc:
        why = "is taken by another process" if exc.errno == errno.EADDRINUSE else f"cannot be used ({exc.strerror})"
        raise UnavailableError(f"debug.port {cfg.debug.port} on {cfg.debug.host} {why}; choose another debug.port "
                               "(0 picks a free one) or turn debug.enabled off") from None
    recorder.debug_url = cfg.debug.debug_url or server.url
    try:
        await recorder.start()
    except (OSError, sqlite3.Error) as exc:
        await server.stop()
        raise UnavailableError(f"debug.db_dir {cfg.debug.db_dir!r}: the flight recorder cannot write its database there "
                               f"({exc}); point it at a writable directory, or set it to '' to keep events in memory") from None
    except Exception:
        await server.stop()
        raise
    return recorder, server
