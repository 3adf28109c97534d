"""The worker's startup checks that need neither the handler image nor a connection, run by the operator.

A config the worker would refuse at startup must be refused here, before anything rolls out:
the old workers keep running, and the Pipeline says why (``ConfigRejected``) instead of a new
pod crash-looping. So every check ``knarr run`` and ``knarr check`` make before connecting
is run here with the worker's own code, except those that need what only the pod has:

=========================================  ===============================================
run by the operator                        worker code
=========================================  ===============================================
schema, ranges, cross-field rules          ``config_from_dict`` (in :mod:`worker_config`)
``KNARR_*`` overrides in ``spec.env``      ``env_overrides`` (in :mod:`worker_config`)
secrets written inline                     :mod:`knarr_operator.credentials`
every sink type exists in this version     ``build_sinks`` (builds, never connects)
librdkafka accepts the consumer settings   ``check_consumer_settings`` (no bootstrap servers)
=========================================  ===============================================

Left to the worker, so reported from its termination message: the handler (import, hook
contract, ``on_startup``), files named in ``kafka.extra`` (``ssl.*.location``, keytabs: they
are mounted into the pod), ``executor.binary_path`` and ``executor.persistent.command`` in the image, the probe port, and
reaching the broker, the sinks and the DLQ.
"""

from __future__ import annotations

from knarr.config.librdkafka import ConsumerSettingsError, check_consumer_settings
from knarr.errors import KnarrError
from knarr.kafka import settings
from knarr.sinks import build_sinks

from knarr_operator.spec import OperatorSpec
from knarr_operator.worker_config import CONFIG_DIR, InvalidConfig, WorkerConfig

# librdkafka properties naming files or plug-ins: they exist in the worker's pod, not here.
_POD_FILE_SUFFIXES = (".location", ".keytab", "plugin.library.paths")


def preflight(config: WorkerConfig, *, allow_debug: bool = True) -> None:
    """Raise :class:`InvalidConfig` with every problem the worker would report before connecting.

    ``allow_debug`` is the operator's own setting (``operator.allowDebug`` in the chart): without it a
    Pipeline may not turn on the debug UI, which runs messages through the handler on request.
    """
    if config.validated.debug.enabled and not allow_debug:
        raise InvalidConfig(
            "debug.enabled: this operator does not let Pipelines turn on the workers' flight recorder and debug UI "
            "(its chart value operator.allowDebug is false); remove spec.debug.enabled, or ask the cluster's "
            "administrator to set operator.allowDebug=true"
        )
    problems: list[str] = []
    try:
        build_sinks(config.validated)
    except KnarrError as exc:
        problems.append(str(exc))
    kafka = config.validated.kafka
    consumer = {k: v for k, v in settings.source_consumer(kafka, "knarr-operator-preflight").items()
                if not k.strip().lower().endswith(_POD_FILE_SUFFIXES)}
    try:
        check_consumer_settings(consumer, kafka.max_poll_records)
    except ConsumerSettingsError as exc:
        problems.append(str(exc))
    if problems:
        raise InvalidConfig("the worker would refuse to start with this configuration (keys under spec):\n"
                            + "\n".join(f"  {p}" for p in problems))


def check_debug_volume(spec: OperatorSpec, config: WorkerConfig) -> None:
    """Raise :class:`InvalidConfig` when ``spec.debugVolume`` could not hold the recorder's files.

    The shared volume replaces the directory the recorder writes to, so the recorder must be on,
    write files (a ``debug.dbDir``), and have a directory of its own there: /tmp is the pod's scratch
    space, and a mount point must be an absolute path.
    """
    if spec.debug_volume is None:
        return
    claim = spec.debug_volume.claim_name
    debug = config.validated.debug
    db_dir = debug.db_dir.rstrip("/")
    where = f"spec.debugVolume (claim {claim!r})"
    if not debug.enabled:
        raise InvalidConfig(f"{where} holds the flight recorder's files, but spec.debug.enabled is false: "
                            "set spec.debug.enabled: true, or remove spec.debugVolume")
    if not debug.db_dir:
        raise InvalidConfig(f"{where} holds the flight recorder's files, but spec.debug.dbDir is '' (events kept in "
                            "memory only): set spec.debug.dbDir to a directory, e.g. /var/lib/knarr/debug, "
                            "or remove spec.debugVolume")
    if not db_dir.startswith("/"):
        raise InvalidConfig(f"{where} is mounted at spec.debug.dbDir, but {debug.db_dir!r} is a relative path: "
                            "write an absolute one, e.g. /var/lib/knarr/debug")
    if db_dir in ("", "/tmp"):
        raise InvalidConfig(f"{where} would be mounted at spec.debug.dbDir {debug.db_dir!r}, the pod's own scratch "
                            "directory (or its root): set spec.debug.dbDir to a directory of its own, "
                            "e.g. /var/lib/knarr/debug")
    taken = {CONFIG_DIR: "the worker's config", **{s.base_path.rstrip("/"): f"sinks.filesystem.{n}.basePath"
                                                   for n, s in config.validated.sinks.filesystem.items()}}
    if config.validated.cache.enabled and config.validated.cache.db_dir:
        taken[config.validated.cache.db_dir.rstrip("/")] = "cache.dbDir"
    if db_dir in taken:
        raise InvalidConfig(f"{where} would be mounted at spec.debug.dbDir {debug.db_dir!r}, where {taken[db_dir]} "
                            "is mounted already: set spec.debug.dbDir to a directory of its own, e.g. /var/lib/knarr/debug")
