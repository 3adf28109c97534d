"""The fan-out search demo (`knarr demo`)."""
