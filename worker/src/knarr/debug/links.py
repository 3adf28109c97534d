"""The debug UI's links: Prometheus graphs of this worker, and the configured custom links. Pure."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from knarr.config.models import DebugConfig

# (title, PromQL with {sel} for the label selector and {rate} for the range)
PROMETHEUS_GRAPHS = (
    ("Messages consumed per second", "sum(rate(knarr_messages_consumed_total{sel}[{rate}]))"),
    ("Task outcomes per second", "sum by (status) (rate(knarr_tasks_total{sel}[{rate}]))"),
    ("Task duration, 95th percentile", "histogram_quantile(0.95, sum by (le) (rate(knarr_task_duration_seconds_bucket{sel}[{rate}])))"),
    ("Consumer lag", "sum by (partition) (knarr_consumer_lag{sel})"),
    ("Pool slots in use", "sum(knarr_pool_active{sel})"),
    ("Sink delivery errors per second", "sum by (sink) (rate(knarr_sink_delivery_errors_total{sel}[{rate}]))"),
    ("Dead letters per second", "sum by (sink) (rate(knarr_sink_dlq_messages_total{sel}[{rate}]))"),
    ("Event loop lag, 99th percentile", "histogram_quantile(0.99, sum by (le) (rate(knarr_event_loop_lag_seconds_bucket{sel}[{rate}])))"),
    ("Event loop's share of time waiting for a CPU", "sum(rate(knarr_event_loop_cpu_wait_seconds_total{sel}[{rate}]))"),
)


def links(config: DebugConfig, worker: str, cluster: str) -> dict[str, list[dict[str, Any]]]:
    prometheus = []
    if config.prometheus_url:
        labels = []
        if config.prometheus_worker_label:
            labels.append(f'{config.prometheus_worker_label}="{_escape(worker)}"')
        if config.prometheus_cluster_label and cluster:
            labels.append(f'{config.prometheus_cluster_label}="{_escape(cluster)}"')
        selector = "{" + ",".join(labels) + "}" if labels else ""
        base = config.prometheus_url.rstrip("/")
        for title, expr in PROMETHEUS_GRAPHS:
            query = expr.replace("{sel}", selector).replace("{rate}", config.prometheus_rate_interval)
            prometheus.append({"title": title, "query": query,
                               "url": f"{base}/graph?g0.expr={quote(query, safe='')}&g0.tab=0"})
    return {"prometheus": prometheus, "custom": [link.model_dump() for link in config.custom_links]}


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')
