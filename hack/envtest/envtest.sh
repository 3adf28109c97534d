#!/usr/bin/env bash
# shellcheck disable=SC2329 # 0.11 false positive: everything runs via `main "$@"; exit`
# A real, node-less Kubernetes control plane on loopback for tests (envtest-style):
# etcd + kube-apiserver + kube-controller-manager, no kubelet, no scheduler.
# Pods therefore stay Pending, but everything the API server and the
# controller-manager do for real happens: admission, RBAC, server-side
# dry-run, Deployment -> ReplicaSet -> Pod, ownerReference garbage collection,
# namespace deletion, ServiceAccounts.
#
# Usage: hack/envtest/envtest.sh up|down|status|env   (works from any cwd)
#   up      build tools if needed, start (or reuse) the cluster; last stdout
#           line is KUBECONFIG=<abs path>
#   down    stop all components (TERM, then KILL after a deadline); idempotent
#   status  show each component; exit 0 only if all are running and healthy
#   env     print `export KUBECONFIG=...` etc. for `eval "$(envtest.sh env)"`
#
# State (certs, etcd data, logs, pid files, kubeconfig) lives in
# <repo>/.cache/envtest/ (gitignored). etcd data is wiped on every cold start,
# so each `up` after a `down` is a fresh cluster; certs are kept.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$HERE/../.." && pwd)"
# shellcheck source=hack/envtest/versions.sh
source "$HERE/versions.sh"

STATE_DIR="${KNARR_ENVTEST_DIR:-$REPO_ROOT/.cache/envtest}"
PKI="$STATE_DIR/pki"
LOGS="$STATE_DIR/logs"
KUBECONFIG_PATH="$STATE_DIR/kubeconfig"
PORTS_FILE="$STATE_DIR/ports.env"
COMPONENTS=(etcd kube-apiserver kube-controller-manager)

# Deadlines (seconds). A cold apiserver on a fresh etcd bootstraps its RBAC
# roles, priority levels etc. before /readyz turns green.
READY_TIMEOUT="${KNARR_ENVTEST_READY_TIMEOUT:-90}"
STOP_TIMEOUT="${KNARR_ENVTEST_STOP_TIMEOUT:-20}"

log() { printf '[envtest] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# ---------------------------------------------------------------------------
# process bookkeeping

bin_of() {
    case $1 in
        etcd) echo "$ETCD_BIN" ;;
        kube-apiserver) echo "$KUBE_APISERVER_BIN" ;;
        kube-controller-manager) echo "$KUBE_CONTROLLER_MANAGER_BIN" ;;
    esac
}

# pid_of NAME: print the pid of the running component, or fail. The pid file
# alone is not trusted: the process must still exist and be *our* binary
# (guards against pid reuse and against a binary from an older pinned version).
pid_of() {
    local pidfile="$STATE_DIR/$1.pid" pid exe
    [[ -f $pidfile ]] || return 1
    pid=$(<"$pidfile")
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || return 1
    [[ $exe == "$(bin_of "$1")" ]] || return 1
    echo "$pid"
}

# start NAME ARGS...: launch in its own session so it outlives this script and
# the caller (pytest, make) and does not get the terminal's Ctrl-C; stdio goes
# to a log file so a caller capturing our stdout is not held open; fd 9 (our
# lock) is closed so the daemon does not keep the lock forever.
start() {
    local name=$1 bin
    shift
    bin=$(bin_of "$name")
    log "starting $name (log: $LOGS/$name.log)"
    # The pid is written by the process itself just before exec: $! could be
    # a forked setsid wrapper rather than the component.
    rm -f "$STATE_DIR/$name.pid"
    # shellcheck disable=SC2016 # $$ and "$@" are for the inner bash
    setsid bash -c 'echo $$ >"$0"; exec "$@"' "$STATE_DIR/$name.pid" "$bin" "$@" \
        </dev/null >"$LOGS/$name.log" 2>&1 9>&- &
    # Wait until the exec has happened, so pid_of sees the real binary.
    local deadline=$((SECONDS + 10))
    until pid_of "$name" >/dev/null; do
        ((SECONDS < deadline)) || { log "$name did not start (exec of $bin failed?)"; return 1; }
        sleep 0.05
    done
}

stop() {
    local name=$1 pid deadline
    if ! pid=$(pid_of "$name"); then
        rm -f "$STATE_DIR/$name.pid"
        return 0
    fi
    log "stopping $name (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    deadline=$((SECONDS + STOP_TIMEOUT))
    while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
    if kill -0 "$pid" 2>/dev/null; then
        log "$name did not exit within ${STOP_TIMEOUT}s of SIGTERM; sending SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
        while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
    fi
    rm -f "$STATE_DIR/$name.pid"
}

# ---------------------------------------------------------------------------
# health checks (each one quick; callers poll them against a deadline)

admin_curl() {
    curl --silent --show-error --fail --max-time 5 \
        --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" "$@"
}

healthy() {
    case $1 in
        etcd) curl --silent --fail --max-time 5 "http://127.0.0.1:$ETCD_CLIENT_PORT/health" | grep -q '"health":"true"' ;;
        kube-apiserver) [[ $(admin_curl "https://127.0.0.1:$APISERVER_PORT/readyz" 2>/dev/null) == ok ]] ;;
        # Its own /healthz says the process is alive; the "default"
        # ServiceAccount in "default" proves its controllers actually reconcile
        # against the apiserver (created by the serviceaccount controller).
        kube-controller-manager)
            [[ $(curl --silent --insecure --max-time 5 "https://127.0.0.1:$KCM_PORT/healthz") == ok ]] &&
                admin_curl -o /dev/null "https://127.0.0.1:$APISERVER_PORT/api/v1/namespaces/default/serviceaccounts/default" 2>/dev/null
            ;;
    esac
}

# wait_healthy NAME: poll until healthy, the process dies, or the deadline.
wait_healthy() {
    local name=$1 deadline=$((SECONDS + READY_TIMEOUT))
    until healthy "$name"; do
        pid_of "$name" >/dev/null || { log "$name exited during startup"; return 1; }
        ((SECONDS < deadline)) || { log "$name not healthy after ${READY_TIMEOUT}s"; return 1; }
        sleep 0.25
    done
    log "$name healthy"
}

all_healthy() {
    [[ -f $PORTS_FILE && -f $KUBECONFIG_PATH ]] || return 1
    # shellcheck source=/dev/null
    source "$PORTS_FILE"
    local c
    for c in "${COMPONENTS[@]}"; do
        pid_of "$c" >/dev/null && healthy "$c" || return 1
    done
}

dump_logs() {
    local c
    for c in "${COMPONENTS[@]}"; do
        [[ -f $LOGS/$c.log ]] || continue
        printf '\n===== last 60 lines of %s =====\n' "$LOGS/$c.log" >&2
        tail -n 60 "$LOGS/$c.log" >&2
    done
}

# ---------------------------------------------------------------------------
# setup

# Four distinct free loopback ports, chosen by the kernel (bind to port 0).
pick_ports() {
    python3 - <<'EOF' >"$PORTS_FILE"
import socket
names = ["ETCD_CLIENT_PORT", "ETCD_PEER_PORT", "APISERVER_PORT", "KCM_PORT"]
socks = []
for name in names:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
    print(f"{name}={s.getsockname()[1]}")
EOF
    # shellcheck source=/dev/null
    source "$PORTS_FILE"
}

# sign NAME SUBJECT EXTENSIONS: RSA key + cert signed by our CA. The cert is
# renamed into place last, so its presence means the pair is complete.
sign() {
    local name=$1 subj=$2 ext=$3
    log "generating $name certificate in $PKI"
    openssl req -new -newkey rsa:2048 -nodes -keyout "$PKI/$name.key" -subj "$subj" 2>/dev/null |
        openssl x509 -req -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
            -days 3650 -out "$PKI/$name.crt.tmp" -extfile <(printf '%s\n' "$ext") 2>/dev/null
    mv "$PKI/$name.crt.tmp" "$PKI/$name.crt"
}

# Generated once and kept across restarts, so kubeconfigs copied elsewhere
# stay valid. Each file is made only if missing (a new cert added here shows
# up without invalidating the others); a missing CA invalidates everything.
ensure_pki() {
    if [[ ! -f $PKI/ca.crt ]]; then
        log "generating CA in $PKI"
        rm -rf "$PKI"
        mkdir -p "$PKI"
        openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=knarr-envtest-ca" \
            -keyout "$PKI/ca.key" -out "$PKI/ca.crt.tmp" \
            -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
        mv "$PKI/ca.crt.tmp" "$PKI/ca.crt"
    fi
    local client="basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth"
    # Serving cert: loopback plus the in-cluster names of the "kubernetes"
    # Service (10.0.0.1 is the first IP of --service-cluster-ip-range).
    [[ -f $PKI/apiserver.crt ]] || sign apiserver "/CN=kube-apiserver" "$(printf '%s\n' \
        "basicConstraints=CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment" \
        "extendedKeyUsage=serverAuth" \
        "subjectAltName=IP:127.0.0.1,DNS:localhost,IP:10.0.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local")"
    # Admin: group system:masters bypasses RBAC (cluster-admin), so tests can
    # apply anything, including a chart's own RBAC objects.
    [[ -f $PKI/admin.crt ]] || sign admin "/O=system:masters/CN=knarr-admin" "$client"
    # The controller-manager gets the same identity kubeadm gives it; with
    # --use-service-account-credentials each controller then runs as its own
    # ServiceAccount under the bootstrap RBAC roles, like a real cluster.
    [[ -f $PKI/controller-manager.crt ]] ||
        sign controller-manager "/CN=system:kube-controller-manager" "$client"
    # Front-proxy identity: the apiserver uses it to call aggregated API
    # servers, and publishes the request-header CA that delegated authn
    # (the controller-manager's own /metrics etc.) expects to find.
    [[ -f $PKI/front-proxy-client.crt ]] || sign front-proxy-client "/CN=front-proxy-client" "$client"
    # Service-account token signing key pair (apiserver signs/validates
    # tokens; the controller-manager signs legacy token Secrets).
    if [[ ! -f $PKI/sa.pub ]]; then
        openssl genrsa -out "$PKI/sa.key" 2048 2>/dev/null
        openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub.tmp" 2>/dev/null
        mv "$PKI/sa.pub.tmp" "$PKI/sa.pub"
    fi
}

# write_kubeconfig PATH CERT_NAME: certs embedded so the file is self-contained.
write_kubeconfig() {
    local b64="base64 -w0"
    cat >"$1.tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: knarr-envtest
  cluster:
    server: https://127.0.0.1:$APISERVER_PORT
    certificate-authority-data: $($b64 "$PKI/ca.crt")
users:
- name: $2
  user:
    client-certificate-data: $($b64 "$PKI/$2.crt")
    client-key-data: $($b64 "$PKI/$2.key")
contexts:
- name: knarr-envtest
  context:
    cluster: knarr-envtest
    user: $2
    namespace: default
current-context: knarr-envtest
EOF
    chmod 0600 "$1.tmp"
    mv "$1.tmp" "$1"
}

start_etcd() {
    # Fresh data dir: etcd's stored membership would otherwise pin the peer
    # port of the previous run, and tests want a clean cluster anyway.
    rm -rf "$STATE_DIR/etcd"
    # --unsafe-no-fsync: a throwaway test store; fsync is the main cost of
    # every write on a slow disk.
    start etcd \
        --name knarr-envtest \
        --data-dir "$STATE_DIR/etcd" \
        --listen-client-urls "http://127.0.0.1:$ETCD_CLIENT_PORT" \
        --advertise-client-urls "http://127.0.0.1:$ETCD_CLIENT_PORT" \
        --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
        --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
        --initial-cluster "knarr-envtest=http://127.0.0.1:$ETCD_PEER_PORT" \
        --unsafe-no-fsync \
        --log-level warn
}

start_apiserver() {
    # Admission: the defaults already include NamespaceLifecycle, LimitRanger,
    # ServiceAccount, DefaultStorageClass, ResourceQuota, PodSecurity and the
    # webhook/policy plugins; naming the core ones here documents that
    # server-side dry-run of ordinary manifests goes through them.
    # --endpoint-reconciler-type=none: the default reconciler would publish
    # 127.0.0.1 as the "kubernetes" Service endpoint, which validation rejects
    # (loopback), spamming the log.
    start kube-apiserver \
        --bind-address 127.0.0.1 \
        --advertise-address 127.0.0.1 \
        --secure-port "$APISERVER_PORT" \
        --etcd-servers "http://127.0.0.1:$ETCD_CLIENT_PORT" \
        --cert-dir "$STATE_DIR/apiserver-certs" \
        --tls-cert-file "$PKI/apiserver.crt" \
        --tls-private-key-file "$PKI/apiserver.key" \
        --client-ca-file "$PKI/ca.crt" \
        --requestheader-client-ca-file "$PKI/ca.crt" \
        --requestheader-allowed-names front-proxy-client \
        --requestheader-username-headers X-Remote-User \
        --requestheader-group-headers X-Remote-Group \
        --requestheader-extra-headers-prefix X-Remote-Extra- \
        --proxy-client-cert-file "$PKI/front-proxy-client.crt" \
        --proxy-client-key-file "$PKI/front-proxy-client.key" \
        --authorization-mode RBAC \
        --enable-admission-plugins NamespaceLifecycle,LimitRanger,ServiceAccount,DefaultStorageClass,ResourceQuota,MutatingAdmissionWebhook,ValidatingAdmissionWebhook,ValidatingAdmissionPolicy \
        --service-account-issuer https://kubernetes.default.svc.cluster.local \
        --service-account-key-file "$PKI/sa.pub" \
        --service-account-signing-key-file "$PKI/sa.key" \
        --service-cluster-ip-range 10.0.0.0/24 \
        --endpoint-reconciler-type none \
        --allow-privileged=true \
        --profiling=false
}

start_controller_manager() {
    local kc="$STATE_DIR/controller-manager.kubeconfig"
    write_kubeconfig "$kc" controller-manager
    # Controllers that need nodes or a cloud provider cannot do anything here;
    # the rest (garbage collector, deployment, replicaset, namespace,
    # serviceaccount, job, ...) run for real. Leader election is pointless
    # with a single instance and only delays startup.
    start kube-controller-manager \
        --kubeconfig "$kc" \
        --authentication-kubeconfig "$kc" \
        --authorization-kubeconfig "$kc" \
        --bind-address 127.0.0.1 \
        --secure-port "$KCM_PORT" \
        --cert-dir "$STATE_DIR/controller-manager-certs" \
        --leader-elect=false \
        --controllers '*,-node-ipam-controller,-node-route-controller,-service-lb-controller,-cloud-node-lifecycle-controller' \
        --use-service-account-credentials=true \
        --service-account-private-key-file "$PKI/sa.key" \
        --root-ca-file "$PKI/ca.crt" \
        --cluster-signing-cert-file "$PKI/ca.crt" \
        --cluster-signing-key-file "$PKI/ca.key" \
        --cluster-name knarr-envtest \
        --profiling=false
}

# ---------------------------------------------------------------------------
# commands

cmd_up() {
    local t0=$SECONDS
    "$HERE/build.sh" >/dev/null || die "building the tools failed (see messages above); rerun hack/envtest/build.sh"
    if all_healthy; then
        log "already running and healthy, reusing ($((SECONDS - t0))s)"
        echo "KUBECONFIG=$KUBECONFIG_PATH"
        return 0
    fi
    # Anything half-up (one component crashed, stale pid files) is torn
    # down: a clean start is cheaper to reason about than repair.
    cmd_down
    mkdir -p "$LOGS"
    ensure_pki
    pick_ports
    rm -f "$KUBECONFIG_PATH"
    if ! (
        start_etcd && wait_healthy etcd &&
            start_apiserver && wait_healthy kube-apiserver &&
            start_controller_manager && wait_healthy kube-controller-manager
    ); then
        log "envtest failed to start; component logs follow (full logs in $LOGS)"
        dump_logs
        cmd_down
        die "envtest did not come up. Check the logs above; a port clash or a stale process is fixed by 'hack/envtest/envtest.sh down && hack/envtest/envtest.sh up'"
    fi
    write_kubeconfig "$KUBECONFIG_PATH" admin
    log "cluster up in $((SECONDS - t0))s (apiserver https://127.0.0.1:$APISERVER_PORT)"
    echo "KUBECONFIG=$KUBECONFIG_PATH"
}

cmd_down() {
    local i
    # Reverse start order: controllers first, etcd last.
    for ((i = ${#COMPONENTS[@]} - 1; i >= 0; i--)); do stop "${COMPONENTS[i]}"; done
}

cmd_status() {
    local c pid rc=0
    # shellcheck source=/dev/null
    [[ -f $PORTS_FILE ]] && source "$PORTS_FILE"
    for c in "${COMPONENTS[@]}"; do
        if ! pid=$(pid_of "$c"); then
            echo "$c: not running"
            rc=1
        elif healthy "$c"; then
            echo "$c: running (pid $pid), healthy"
        else
            echo "$c: running (pid $pid), NOT healthy (log: $LOGS/$c.log)"
            rc=1
        fi
    done
    ((rc == 0)) && echo "KUBECONFIG=$KUBECONFIG_PATH"
    return "$rc"
}

cmd_env() {
    echo "export KUBECONFIG='$KUBECONFIG_PATH'"
    "$HERE/build.sh" --paths | sed -n "s/^\(HELM\|HADOLINT\)=\(.\+\)$/export KNARR_\1='\2'/p"
}

main() {
    local cmd=${1:-}
    case $cmd in
        up | down | status | env) ;;
        *) die "usage: $0 up|down|status|env" ;;
    esac
    mkdir -p "$STATE_DIR"
    # Serialise up/down across concurrent callers (several pytest-xdist
    # workers may all call `up` at once: the first starts, the rest reuse).
    exec 9>"$STATE_DIR/.lock"
    flock 9
    "cmd_$cmd"
}

# `exit` on the same line: bash reads scripts lazily, so a file edited while
# it runs must not be read past this point.
main "$@"; exit
