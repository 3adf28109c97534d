"""knarr backfills on Spark: the streaming worker's handler and config over a bounded slice of history."""
