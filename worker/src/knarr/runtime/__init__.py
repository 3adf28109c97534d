"""What the engine and its adapters (sinks, the cache, the recorder) share, below all of them.

Retry timing (``backoff``), stopping and cancels (``stopping``), calling a handler's hooks
(``hooks``) and a run's counters (``stats``). Nothing in here imports the engine, a sink or a
source: they import it.
"""
