"""What a `knarr run` process reads from where it runs: the CPUs it may use, whether a supervisor started it, and
a port free for a process to listen on."""

from __future__ import annotations

import ctypes
import os
import random
import signal
import socket
from collections.abc import Mapping

from knarr.config.environment import SUPERVISOR_PID_ENV
from knarr.supervisor.plan import cpus_allowed

_PR_SET_PDEATHSIG = 1


def available_cpus() -> int:
    """CPUs this process may use: its affinity, capped by its cgroup's quota (a container's limit)."""
    try:
        with open("/sys/fs/cgroup/cpu.max", encoding="ascii") as fh:
            cpu_max = fh.read()
    except OSError:
        cpu_max = None
    return cpus_allowed(cpu_max, len(os.sched_getaffinity(0)))


def follow_supervisor(env: Mapping[str, str] | None = None) -> bool:
    """In a worker process a supervisor started: ask for SIGHUP when it dies (the worker stops on it, draining
    as on SIGTERM; the kernel sends it once per thread the supervisor had, so it is not SIGTERM, whose second
    arrival ends a drain). False: the supervisor is gone already."""
    env = os.environ if env is None else env
    pid = env.get(SUPERVISOR_PID_ENV)
    if not pid:
        return True
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGHUP, 0, 0, 0)
    return os.getppid() == int(pid)  # asked after the fact: it may have died before the request


def free_port(host: str) -> int:
    """A port free on ``host`` now, below the kernel's ephemeral range, for a process about to listen there.

    A port the kernel hands out for binding port 0 comes from the ephemeral range, and an outbound
    connection (a Kafka client's) may take it as its local port before the listener binds it; nothing
    takes a port below that range unasked."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range", encoding="ascii") as fh:
            low = int(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    for _ in range(200):
        port = random.randrange(max(1024, low - 16384), low)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue  # someone listens there: another
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:  # everything below taken: the kernel's pick
        s.bind((host, 0))
        return s.getsockname()[1]
