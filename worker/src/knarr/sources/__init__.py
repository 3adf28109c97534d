"""Where messages come from: Kafka, or a local JSONL file for the embedded mode."""
