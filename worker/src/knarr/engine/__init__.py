"""The processing engine: windows, tasks, groups, watermark (no Kafka in here)."""
