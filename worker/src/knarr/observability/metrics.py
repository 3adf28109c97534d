"""Prometheus metrics. One name per thing, the same words as the code and docs.

The nine every task updates are LoopCounter and LoopHistogram (loop_metrics.py): the same
metrics, kept as plain numbers on the event loop's thread and read when scraped.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import Counter, Gauge, Histogram, Info

from knarr.observability.loop_metrics import LoopCounter, LoopHistogram

_LAG_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
_DURATION_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)

worker_info = Info("knarr_worker", "Worker identity")
messages_consumed = Counter("knarr_messages_consumed_total", "Messages taken from the source", ["partition"])
consumer_errors = Counter("knarr_consumer_errors_total", "Errors reported by the consumer")
tasks = LoopCounter("knarr_tasks_total", "Task outcomes", ["status"])  # completed|failed|retried|replaced|expired|precomputed|dead_lettered|discarded
task_labels = LoopCounter("knarr_task_labels_total", "Task outcomes by the task labels listed in executor.metric_labels (values beyond the cap count as 'other')", ["status", "label", "value"])
task_duration = LoopHistogram("knarr_task_duration_seconds", "Subprocess wall-clock time", buckets=_DURATION_BUCKETS)
task_timeouts = Counter("knarr_task_timeouts_total", "Subprocesses killed at their deadline")
task_output_truncated = Counter("knarr_task_output_truncated_total", "Subprocesses whose stdout or stderr passed executor.max_output_bytes")
tasks_in_flight = Gauge("knarr_tasks_in_flight", "Tasks scheduled and not yet terminal")
tasks_delivering = Gauge("knarr_tasks_delivering", "Tasks in flight whose outputs await a sink's confirmation, and "
                         "message and window hooks' outputs that do (bounded by "
                         "executor.backpressure_delivery_multiplier)")
persistent_programs = Gauge("knarr_persistent_programs", "Persistent executor programs alive")
persistent_starts = Counter("knarr_persistent_program_starts_total", "Persistent executor programs started")
persistent_start_failures = Counter("knarr_persistent_program_start_failures_total", "Persistent executor programs that could not start (no exec, an exit or no valid hello in time), whoever needed them")
persistent_stalled = Gauge("knarr_persistent_programs_stalled", "1 while tasks wait because no program of executor.persistent.command can start")
persistent_exits = Counter("knarr_persistent_program_exits_total", "Persistent executor programs stopped or lost, by why", ["reason"])  # max_tasks|max_idle|max_rss|evicted|shutdown|timeout|crash|protocol|cancelled
pool_active = Gauge("knarr_pool_active", "Pool slots running a subprocess")
pool_held = Gauge("knarr_pool_held", "Spawn-mode tasks the native runner holds ready to start when a slot frees (executor.spawn_ahead)")
queue_size = Gauge("knarr_partition_queue_size", "Messages queued in a partition processor", ["partition"])
backpressure = Gauge("knarr_backpressure_active", "1 while backpressure holds consumption or pauses a partition")
backpressure_changes = Counter("knarr_backpressure_changes_total", "Flow changes: hold, release, isolate (a partition flooded by fan-out), rejoin", ["change"])
partitions_paused = Gauge("knarr_partitions_paused", "Partitions paused at the Kafka client: flooded by fan-out, or every partition during a long hold")
offsets_committed = Counter("knarr_offsets_committed_total", "Offset commits", ["partition"])
committed_offset = Gauge("knarr_committed_offset", "Last committed offset", ["partition"])
consumer_lag = Gauge("knarr_consumer_lag", "High watermark minus committed offset", ["partition"])
assigned_partitions = Gauge("knarr_assigned_partitions", "Partitions assigned to this worker")
unowned_partitions = Gauge("knarr_unowned_partitions", "Partitions of the topic in no group member's assignment at the last look (static membership only: kafka.ownership_check_seconds)")
group_rejoins = Counter("knarr_group_rejoins_total", "Times this worker rejoined its group to hand out partitions no member had owned for longer than a rebalance takes")
handler_duration = LoopHistogram("knarr_handler_duration_seconds", "Time spent in the handler's hooks (those it defines; the others are not called)", ["hook"], buckets=_DURATION_BUCKETS)
hook_errors = Counter("knarr_hook_errors_total", "Exceptions raised by handler hooks", ["hook"])
untracked_offsets = Counter("knarr_untracked_offsets_total", "Task source_offsets naming no message of their window")
messages_completed = LoopCounter("knarr_messages_completed_total", "Message groups completed", ["outcome"])  # empty|succeeded|partial|failed
sink_deliveries = LoopCounter("knarr_sink_deliveries_total", "Successful sink deliveries", ["sink", "type"])
sink_payloads = LoopCounter("knarr_sink_payloads_delivered_total", "Payloads delivered", ["sink", "type"])
sink_errors = Counter("knarr_sink_delivery_errors_total", "Failed sink deliveries", ["sink", "type"])
sink_retries = Counter("knarr_sink_delivery_retries_total", "Sink delivery retries", ["sink", "type"])
sink_skipped = Counter("knarr_sink_deliveries_skipped_total", "Deliveries dropped by SKIP", ["sink", "type"])
sink_dlq = Counter("knarr_sink_dlq_messages_total", "Deliveries dead-lettered", ["sink", "type"])
sink_transient_errors = Counter("knarr_sink_transient_errors_total", "Deliveries a sink could not take for now (server down or overloaded); retried, never dead-lettered", ["sink", "type"])
sink_waiting = Gauge("knarr_sink_waiting", "Deliveries waiting for this sink to come back", ["sink", "type"])
sink_duration = LoopHistogram("knarr_sink_deliver_duration_seconds", "Sink delivery time", ["sink", "type"], buckets=_DURATION_BUCKETS)
probe_connections_dropped = Counter(
    "knarr_probe_connections_dropped_total",
    "Connections to the probe/metrics server dropped or refused", ["reason"],  # busy|evicted|slow|oversize
)
flight_events = LoopCounter("knarr_flight_events_total", "Flight events by kind", ["event"])
recorder_dropped = Counter("knarr_recorder_events_dropped_total", "Flight recorder events dropped because its buffer was full (debug.max_buffer)")
dlq_dropped = Counter("knarr_dlq_dropped_total", "Dead letters the DLQ refused and dlq.on_send_failure=drop gave up on")
dlq_stalls = Counter("knarr_dlq_stalls_total", "Times a partition stalled because the DLQ refused a dead letter")
parse_errors = Counter("knarr_parse_errors_total", "Messages that did not parse, by what on_parse_error did", ["policy"])
stalls = Counter("knarr_stalls_total", "Times a partition stalled because a hook failed on every message", ["hook"])
partition_stalled = Gauge("knarr_partition_stalled", "1 while the partition is stalled by a failing hook", ["partition"])
event_loop_lag = Histogram("knarr_event_loop_lag_seconds", "How much later than due the event loop ran a periodic probe (time it was blocked)", buckets=_LAG_BUCKETS)
event_loop_cpu_wait = Counter("knarr_event_loop_cpu_wait_seconds_total", "Time the event loop's thread was ready to run but waited for a CPU (a busy node, a pod at its CPU limit)")
cache_hits = Counter("knarr_cache_hits_total", "Handler cache reads answered, by the tier that had the entry", ["tier"])  # memory|sqlite|shared
cache_misses = Counter("knarr_cache_misses_total", "Handler cache reads no tier could answer, by call (peek: memory only)", ["call"])  # peek|get
cache_evictions = Counter("knarr_cache_evictions_total", "Entries dropped from the cache's memory to stay within cache.max_entries (SQLite keeps them)")
cache_entries = Gauge("knarr_cache_entries", "Entries in the handler cache's memory")
cache_flush_duration = Histogram("knarr_cache_flush_duration_seconds", "Time to write one batch of cache changes to SQLite", buckets=_DURATION_BUCKETS)
cache_flush_errors = Counter("knarr_cache_flush_errors_total", "Cache flushes to SQLite that failed (the changes are kept and tried again)")
cache_shared_errors = Counter("knarr_cache_shared_errors_total", "Reads and writes the shared cache tier did not answer in time or refused")
cache_shared_writes_dropped = Counter("knarr_cache_shared_writes_dropped_total", "Cache writes the shared tier never got (outage, or more than cache.shared.max_pending_writes queued)")
cache_shared_available = Gauge("knarr_cache_shared_available", "1 while the shared cache tier answers, 0 during an outage")
periodic_runs = Counter("knarr_periodic_runs_total", "Runs of the handler's @periodic methods, by outcome", ["task", "outcome"])  # ok|error
processor_failures = Counter("knarr_processor_failures_total", "Partition processors that died unexpectedly", ["partition"])

_children: dict[tuple, Any] = {}


def labelled(metric: Any, *values: str) -> Any:
    """``metric.labels(*values)``, made once and reused.

    labels() validates and takes a lock on every call (about 2 us); the engine asks for the
    same few children for every task, so it looks them up here instead.
    """
    key = (metric, *values)
    child = _children.get(key)
    if child is None:
        child = _children[key] = metric.labels(*values)
    return child
