"""The dead-letter queue read back: inspecting it and replaying it (``knarr dlq``).

- :mod:`records`: a DLQ record parsed (any envelope version), times, reasons, filters (pure)
- :mod:`summary`: what ``inspect`` counts and prints (pure)
- :mod:`replay`: what ``replay`` plans for each record, and rebuilding a record's payloads (pure)
- :mod:`store`: where the DLQ is, reading it (topic or file), the replay ledger (I/O)
- :mod:`replaying`: carrying out a plan through the sinks' delivery path or back to the source (I/O)
"""
