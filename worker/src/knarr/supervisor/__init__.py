"""Several worker processes under one `knarr run` (``processes`` in the config, ``--processes``).

One Python interpreter runs one core's worth of Python at a time. A worker whose event loop is
its bound (persistent executors with tiny tasks) cannot use a second core, however many the pod
has; a worker per core can. ``knarr run`` with ``processes: N`` becomes a supervisor of N
ordinary worker processes, each a consumer of the same group (Kafka shares the partitions among
them as among replicas) with its part of ``executor.max_executors``:

- ``plan.py``: what each process is given (name, share of the pool, ports, environment); pure.
- ``exposition.py``: the processes' Prometheus texts as one, each sample labelled with its process.
- ``outcome.py``: the pod's exit code and termination message, from how its processes ended; pure.
- ``processes.py``: starting them, watching them, stopping them, and the pod's probe server.
- ``machine.py``: the CPUs a process may use; a worker process's tie to its supervisor.

What the pod sees is one worker: one ``/metrics`` (every process's metrics, ``process="0"``...,
the supervisor's own as ``process="supervisor"``), ``/healthz`` and ``/readyz`` answering for
all of them, SIGTERM/SIGINT passed to each (once), one exit code and termination message.
A process a signal killed (the OOM killer) is started again with backoff while the others go
on; a process that exits by itself (a fatal error, a service unreachable at start) stops them
all, and the pod exits with its code and reason, as a single worker would. A supervisor that
dies (SIGKILL) takes its processes with it: each asks the kernel for SIGHUP when it does, and
drains as on any stop.
"""
