# Developer entry points. Each target is a thin wrapper around a script in hack/.

.PHONY: tools envtest-up envtest-down kafka-up kafka-down

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
