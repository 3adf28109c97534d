"""What each worker process of a supervised ``knarr run`` is given. Pure: no process is started here."""

from __future__ import annotations

import math
from dataclasses import dataclass

from knarr.config.environment import CONFIG_PATH_ENV, ENV_PREFIX, SUPERVISOR_PID_ENV, TERMINATION_LOG_ENV
from knarr.config.root import KnarrConfig, debug_ports_problem, processes_problem
from knarr.errors import ConfigError
from knarr.kafka.settings import STATIC_MEMBER

LOOPBACK = "127.0.0.1"  # a process's own probe server: only its supervisor asks it


@dataclass(frozen=True, slots=True)
class Member:
    """One worker process: its index, its name and its part of the pool."""

    index: int
    name: str
    max_executors: int
    max_per_partition: int | None
    debug_port: int | None  # None: the debug UI is off

    def env(self, config: KnarrConfig, metrics_port: int, supervisor_pid: int, termination_log: str,
            config_path: str | None) -> dict[str, str]:
        """The variables this process gets on top of the supervisor's environment (config overrides among them)."""
        env = {
            config.worker_name_env: self.name,
            SUPERVISOR_PID_ENV: str(supervisor_pid),
            TERMINATION_LOG_ENV: termination_log,
            f"{ENV_PREFIX}PROCESSES": "1",
            f"{ENV_PREFIX}EXECUTOR__MAX_EXECUTORS": str(self.max_executors),
            # The supervisor serves the pod's probes; each process answers it on loopback, whatever metrics.enabled says.
            f"{ENV_PREFIX}METRICS__ENABLED": "true",
            f"{ENV_PREFIX}METRICS__HOST": LOOPBACK,
            f"{ENV_PREFIX}METRICS__PORT": str(metrics_port),
        }
        if config_path is not None:
            env[CONFIG_PATH_ENV] = config_path
        static_id = config.kafka.extra.get(STATIC_MEMBER)
        if static_id is not None:  # static membership: one id per process, or they would fence each other off
            env[f"{ENV_PREFIX}KAFKA__EXTRA__{STATIC_MEMBER}"] = f"{static_id}-{self.index}"
        if self.max_per_partition is not None:
            env[f"{ENV_PREFIX}EXECUTOR__MAX_PER_PARTITION"] = str(self.max_per_partition)
        if self.debug_port is not None:
            env[f"{ENV_PREFIX}DEBUG__PORT"] = str(self.debug_port)
            if self.index > 0:
                env[f"{ENV_PREFIX}DEBUG__DEBUG_URL"] = ""  # a configured URL is the first process's; the others derive theirs
        return env


def cpus_allowed(cpu_max: str | None, affinity: int) -> int:
    """CPUs this process may use: its CPU affinity, capped by its cgroup's quota (``cpu.max``: "max 100000", "250000 100000")."""
    if cpu_max:
        quota, _, period = cpu_max.strip().partition(" ")
        if quota != "max" and quota.isdigit() and period.isdigit() and int(period) > 0:
            return max(1, min(affinity, math.ceil(int(quota) / int(period))))
    return max(1, affinity)


def process_count(config: KnarrConfig, override: int | None, cpus: int) -> int:
    """How many worker processes to run: the option's, else the config's, 0 meaning one per CPU allowed."""
    configured = config.processes if override is None else override
    count = configured or cpus
    problem = processes_problem(count, config.source.type, config.executor.max_executors)
    if problem is not None:
        where = "--processes" if override is not None else "processes"
        said = f"{where} {configured}" + (f" (one per CPU allowed: {cpus})" if configured == 0 else "")
        raise ConfigError(f"{said}: {problem}")
    return count


def shares(total: int, count: int) -> list[int]:
    """``total`` pool slots dealt among ``count`` processes, the first ones taking the remainder: 10, 3 -> 4, 3, 3."""
    base, extra = divmod(total, count)
    return [base + (1 if i < extra else 0) for i in range(count)]


def members(config: KnarrConfig, count: int, base_name: str) -> list[Member]:
    """Every worker process of the pod, named ``<base_name>-<index>``."""
    problem = debug_ports_problem(config, count)
    if problem is not None:
        raise ConfigError(problem)
    debug = config.debug
    mpp = config.executor.max_per_partition
    return [
        Member(
            index=i,
            name=f"{base_name}-{i}",
            max_executors=share,
            max_per_partition=None if mpp is None else min(mpp, share),
            debug_port=(debug.port + i if debug.port else 0) if debug.enabled else None,
        )
        for i, share in enumerate(shares(config.executor.max_executors, count))
    ]
