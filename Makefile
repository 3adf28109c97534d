# Developer entry points. Each target is a thin wrapper around a script in hack/ or a uv command.
# Two commands on a fresh machine: `make demo` (no services needed) and `make test` (starts real services).
# Targets work in any order and in any new shell: none needs uv on PATH.

SHELL := /bin/bash
# uv, wherever it is: on PATH, or in ~/.local/bin where `make setup` installs it (hack/uv.sh finds it,
# and installs it when it is nowhere). Expanded only by the targets that use it.
UV ?= $(shell hack/uv.sh)
PYTEST_ARGS ?=
# The Python of .venv: the distribution's when it is 3.11 or newer (built with PGO and LTO, like the
# worker image's; hack/python.sh says why), else uv's choice. Set UV_PYTHON to choose another.
ifndef UV_PYTHON
export UV_PYTHON := $(shell hack/python.sh)
ifeq ($(UV_PYTHON),)
unexport UV_PYTHON
endif
endif

.PHONY: setup demo demo-kafka test test-unit

# Install uv (from PyPI) if missing, then the whole workspace from the lock file into .venv
setup:
	$(UV) sync --all-packages --frozen

# Run the fan-out search demo on the embedded JSONL source (no Kafka needed); results under out/demo
demo: setup
	$(UV) run knarr demo --out out/demo

# The same demo on the local Kafka broker (started if needed)
demo-kafka: setup
	@bootstrap=$$(hack/kafka/kafka.sh up | sed -n 's/^KAFKA_BOOTSTRAP=//p'); \
	$(UV) run knarr demo --out out/demo-kafka --kafka "$$bootstrap"

# Everything: install, start Kafka, the Kubernetes test control plane and the sink servers, install the
# headless browser of the debug UI's tests, run every test
test: setup
	hack/kafka/kafka.sh up
	hack/envtest/envtest.sh up
	hack/services/services.sh up
	hack/browser/browser.sh up
	$(UV) run pytest $(PYTEST_ARGS)

# Only the tests that need no service (fast feedback)
test-unit: setup
	$(UV) run pytest tests/unit $(PYTEST_ARGS)

.PHONY: tools envtest-up envtest-down kafka-up kafka-down services-up services-down

# Build/fetch the pinned kube-apiserver, kube-controller-manager, etcd, helm and hadolint into ~/.cache/knarr/bin
tools:
	hack/envtest/build.sh

# Start (or reuse) the local envtest control plane; prints KUBECONFIG=<path>
envtest-up:
	hack/envtest/envtest.sh up

# Stop the local envtest control plane (idempotent)
envtest-down:
	hack/envtest/envtest.sh down

# Start (or reuse) the local single-node Kafka 4.x broker (KRaft); prints KAFKA_BOOTSTRAP=127.0.0.1:<port>
kafka-up:
	hack/kafka/kafka.sh up

# Stop the local Kafka broker (idempotent)
kafka-down:
	hack/kafka/kafka.sh down

# Start (or reuse) the sink servers (PostgreSQL, Redis, MongoDB wire); prints one NAME=value line each
services-up:
	hack/services/services.sh up

# Stop the sink servers (idempotent)
services-down:
	hack/services/services.sh down

.PHONY: screenshots

# The debug UI's browser tests, keeping their screenshots as the README's (docs/screenshots/*.png)
screenshots: setup
	hack/kafka/kafka.sh up
	hack/browser/browser.sh up
	KNARR_DOCS_SCREENSHOTS=1 $(UV) run pytest tests/debug_ui $(PYTEST_ARGS)

.PHONY: bench-fairness

# A trickling partition's task latency beside a partition flooded with 10,000 tasks, vs the trickle alone (local Kafka)
bench-fairness: setup
	hack/kafka/kafka.sh up
	$(UV) run python bench/fairness.py $(BENCH_ARGS)

.PHONY: bench

# Engine throughput vs the C spawn floor and persistent mode vs spawn mode (medians of rounds), worker CPU per task, event-loop lag p99, the flight recorder off vs on, and a profile of the hot path (local Kafka)
bench: setup
	hack/kafka/kafka.sh up
	$(UV) run python bench/engine.py $(BENCH_ARGS)

.PHONY: bench-persistent

# Tiny tasks end to end in spawn and persistent mode, then one task per 10 and per 100 messages, then a worker per core (local Kafka)
bench-persistent: setup
	hack/kafka/kafka.sh up
	$(UV) run python bench/persistent.py $(BENCH_ARGS)

.PHONY: bench-processes

# `knarr run` pods as people start them: spawn mode, persistent mode, and persistent mode with --processes N
# (one per core by default), rates in steady state from committed offsets, in rounds (local Kafka)
bench-processes: setup
	hack/kafka/kafka.sh up
	$(UV) run python bench/processes.py $(BENCH_ARGS)

.PHONY: bench-spawners

# Ways to start task processes off the event loop, side by side: tasks/s, CPU/task, loop lag p99, ratio to C
bench-spawners: setup
	$(UV) run python bench/spawners.py $(BENCH_ARGS)

.PHONY: bench-sinks

# Payloads/s per sink (PostgreSQL, Redis, MongoDB wire, HTTP) through knarr's delivery path vs the raw client, as a ratio
bench-sinks: setup
	hack/services/services.sh up
	$(UV) run python bench/sinks.py $(BENCH_ARGS)

.PHONY: bench-backfill

# Messages per second of one workload: the streaming worker vs a Spark backfill on local[2] (local Kafka), and the ratio
bench-backfill: setup
	hack/kafka/kafka.sh up
	$(UV) run python bench/backfill.py $(BENCH_ARGS)

.PHONY: bench-compare

# knarr vs Drakkar 2.4.0 (py-drakkar in its own venv under ~/.cache/knarr, knarr in another on the same Python): W1 echo
# and W2 grep fan-out, defaults and same limits, then knarr's persistent mode on W1; one markdown table
# (BENCH_ARGS: --messages N --rows ... --engines ...)
bench-compare: setup
	hack/kafka/kafka.sh up
	@drakkar_python=$$(bench/compare/drakkar_venv.sh) && \
	knarr_python=$$(bench/compare/knarr_venv.sh "$$drakkar_python") && \
	$(UV) run python bench/compare/race.py --drakkar-python "$$drakkar_python" --knarr-python "$$knarr_python" \
		$(BENCH_ARGS)

# --- operator (operator/README.md) --------------------------------------------
.PHONY: crds docs images kind-up kind-down

# Regenerate the Pipeline CRD (crds/ and the chart's crds/) from the worker's config models
crds: setup
	$(UV) run python -m knarr_operator.crd

# Regenerate the README's configuration reference and exit-code table from the code
docs: setup
	$(UV) run python -m knarr.config.reference --write README.md
	$(UV) run python -m knarr_operator.settings --write

# Build the operator and worker images with docker or podman, whichever is there
CONTAINER_TOOL ?= $(shell command -v docker 2>/dev/null || command -v podman 2>/dev/null)
images:
	@if [ -z "$(CONTAINER_TOOL)" ] || ! $(CONTAINER_TOOL) info >/dev/null 2>&1; then \
		echo "make images: no working docker or podman here (install one, or start its daemon); nothing built" >&2; exit 1; fi
	$(CONTAINER_TOOL) build -f Dockerfile.operator -t knarr-operator:0.1.0 .
	$(CONTAINER_TOOL) build -f Dockerfile.worker -t knarr-worker:0.1.0 .
	$(CONTAINER_TOOL) build -f Dockerfile.worker --target spark -t knarr-worker:0.1.0-spark .

# A local kind cluster with the operator chart, a demo Kafka and examples/pipeline.yaml (needs Docker, kind, helm)
kind-up: images
	operator/scripts/kind.sh up

kind-down:
	operator/scripts/kind.sh down

.PHONY: bench-backlog

# A worker started behind a backlog, knarr's Kafka read-ahead against librdkafka's defaults: RSS, msgs/s, partitions moved
bench-backlog: setup
	hack/kafka/kafka.sh up
	$(UV) run python bench/backlog.py $(BENCH_ARGS)

.PHONY: bench-instructions

# The worker's instructions per task in spawn mode, counted by valgrind's callgrind (local Kafka):
# a cost a shared host's pace does not move, for judging changes to the engine (BENCH_ARGS: --messages N --runs N --mode ...)
bench-instructions: setup
	hack/kafka/kafka.sh up
	@command -v valgrind >/dev/null || NAME=bench bash -c '. hack/services/_common.bash && apt_install valgrind'
	$(UV) run python bench/instructions.py $(BENCH_ARGS)

.PHONY: bench-bytecodes

# The bytecodes the worker's Python executes per task, by function, counted (local Kafka): where the engine's
# interpreted work goes, in spawn or persistent mode, the flight recorder off or on (BENCH_ARGS: --mode ...
# --recorder --messages N --base N --top N)
bench-bytecodes: setup
	hack/kafka/kafka.sh up
	$(UV) run python bench/bytecodes.py $(BENCH_ARGS)

.PHONY: bench-recorder

# The flight recorder's cost: engine throughput with debug off and on, alternating, in one run (local Kafka)
bench-recorder: setup
	hack/kafka/kafka.sh up
	$(UV) run python bench/recorder.py $(BENCH_ARGS)
