"""knarr: Kafka -> subprocess stream processing."""
