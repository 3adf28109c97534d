"""Seeing what the engine does: the flight recorder, the debug UI, and the message probe."""
