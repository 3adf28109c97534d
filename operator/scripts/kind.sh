#!/usr/bin/env bash
# A local kind cluster with the operator, a single-node Kafka and the sample Pipeline.
# Usage: operator/scripts/kind.sh up|down      (make kind-up / make kind-down)
# Needs: docker (running), kind, kubectl, helm on PATH; the images from `make images`.
set -euo pipefail
CLUSTER=${KIND_CLUSTER:-knarr}
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OPERATOR_IMAGE=${OPERATOR_IMAGE:-knarr-operator:0.1.0}

need() { command -v "$1" >/dev/null || { echo "kind.sh: '$1' is not installed; $2" >&2; exit 1; }; }

case "${1:-}" in
up)
    need docker "kind runs the cluster in Docker containers"
    docker info >/dev/null 2>&1 || { echo "kind.sh: the Docker daemon is not reachable (is it running?)" >&2; exit 1; }
    need kind "install it from your package manager or 'go install sigs.k8s.io/kind@latest'"
    need kubectl "needed to apply the sample"
    need helm "needed to install the chart"
    kind get clusters | grep -qx "$CLUSTER" || kind create cluster --name "$CLUSTER" --wait 120s
    docker image inspect "$OPERATOR_IMAGE" >/dev/null 2>&1 || { echo "kind.sh: image $OPERATOR_IMAGE missing; run 'make images' first" >&2; exit 1; }
    kind load docker-image --name "$CLUSTER" "$OPERATOR_IMAGE"
    helm upgrade --install knarr-operator "$ROOT/charts/knarr-operator" --namespace knarr-system --create-namespace --wait
    kubectl apply -f "$ROOT/examples/kafka.yaml"
    kubectl apply -f "$ROOT/examples/pipeline.yaml"
    echo "kind.sh: ready. Try: kubectl get kp -A; kubectl describe kp -n knarr-demo search"
    ;;
down)
    need kind "nothing to delete without it"
    kind delete cluster --name "$CLUSTER"
    ;;
*)
    echo "usage: $0 up|down" >&2; exit 2 ;;
esac
