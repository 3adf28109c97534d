"""Metrics, health endpoints, structured logs and flight events."""
