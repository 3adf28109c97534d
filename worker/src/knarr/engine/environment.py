"""The environment a task runs with: an allow-list of the worker's variables, then config, then the task's own.

The worker's environment holds credentials — the sink DSNs and Kafka passwords the operator
injects from Secrets — that a task has no business seeing. So a task inherits only the
variables ``executor.env_inherit`` names (a trailing ``*`` matches a prefix, as in ``LC_*``);
``executor.env`` and the task's ``env`` are added on top, the task's winning. The default
list lives in the config model (``executor.env_inherit``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping


def inherited(names: Iterable[str], worker_env: Mapping[str, str]) -> dict[str, str]:
    """The worker's variables that ``names`` allow, exact names or ``PREFIX*`` patterns."""
    exact = {n for n in names if not n.endswith("*")}
    prefixes = tuple(n[:-1] for n in names if n.endswith("*"))
    return {k: v for k, v in worker_env.items() if k in exact or (prefixes and k.startswith(prefixes))}


def task_environment(
    inherit: Iterable[str], worker_env: Mapping[str, str], config_env: Mapping[str, str],
    task_env: Mapping[str, str] | None = None, always: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Allowed worker variables < ``executor.env`` < the task's env; ``always`` (the worker's own markers) last."""
    env = inherited(inherit, worker_env)
    env.update(config_env)
    if task_env:
        env.update(task_env)
    if always:
        env.update(always)
    return env
