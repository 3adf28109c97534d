#!/usr/bin/env bash
# Local single-node Apache Kafka (KRaft, broker+controller in one JVM) for the
# test suite and local development. No Docker and no apache.org downloads
# here, so the broker's jars come from Maven Central via hack/kafka/pom.xml.
#
#   hack/kafka/kafka.sh up       start, or reuse the broker this script started;
#                                prints exactly KAFKA_BOOTSTRAP=127.0.0.1:PORT
#   hack/kafka/kafka.sh down     stop it (SIGTERM, then SIGKILL after a deadline)
#   hack/kafka/kafka.sh status   exit 0 and print the address if it answers
#   hack/kafka/kafka.sh logs [-f|N]   tail the broker log
#
# Only the KAFKA_BOOTSTRAP line goes to stdout; progress and errors go to
# stderr, so `eval "$(hack/kafka/kafka.sh up)"` works.
#
# Jars:  ${XDG_CACHE_HOME:-~/.cache}/knarr/kafka/<version>/libs (shared by all
#        checkouts; Maven's own repo stays at ~/.m2).
# State: <repo>/.cache/kafka/ (gitignored): data/, server.properties,
#        log4j2.properties, broker.pid, broker.log, bootstrap.
#        KNARR_KAFKA_STATE_DIR names another state directory: a second,
#        independent broker (fault tests stop and slow their own broker, never
#        the one the rest of the suite shares).
#
# Tunables (env): KAFKA_START_TIMEOUT (s, default 60), KAFKA_STOP_TIMEOUT
# (s, default 30), KAFKA_HEAP_OPTS (default -Xms256m -Xmx512m), JAVA_HOME.
set -euo pipefail

SCRIPT_DIR=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd -- "$SCRIPT_DIR/../.." && pwd)
POM=$SCRIPT_DIR/pom.xml

STATE_DIR=${KNARR_KAFKA_STATE_DIR:-$ROOT/.cache/kafka}
DATA_DIR=$STATE_DIR/data
PROPS=$STATE_DIR/server.properties
LOG4J_CONF=$STATE_DIR/log4j2.properties
PID_FILE=$STATE_DIR/broker.pid
LOG_FILE=$STATE_DIR/broker.log
BOOTSTRAP_FILE=$STATE_DIR/bootstrap
LOCK_FILE=$STATE_DIR/lock

KAFKA_VERSION=$(sed -n 's:.*<kafka\.version>\(.*\)</kafka\.version>.*:\1:p' "$POM")
JAR_CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/knarr/kafka/$KAFKA_VERSION
LIBS=$JAR_CACHE/libs
LIBS_MARKER=$LIBS/.complete

START_TIMEOUT=${KAFKA_START_TIMEOUT:-60}
STOP_TIMEOUT=${KAFKA_STOP_TIMEOUT:-30}
HEAP_OPTS=${KAFKA_HEAP_OPTS:--Xms256m -Xmx512m}
JAVA=${JAVA_HOME:+$JAVA_HOME/bin/}java

BROKER_MAIN=kafka.Kafka                 # KRaft broker/controller entry point
STORAGE_TOOL_MAIN=kafka.tools.StorageTool  # what bin/kafka-storage.sh runs

log() { printf 'kafka.sh: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

usage() {
    sed -n '6,10p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

# The project's venv python has confluent_kafka. Before `make setup` there is
# no venv: create it the way `make setup` does (hack/uv.sh finds or installs uv).
py() {
    if [[ ! -x $ROOT/.venv/bin/python ]]; then
        local uv
        uv=$("$ROOT/hack/uv.sh")
        log "no $ROOT/.venv yet: creating it ($uv sync --all-packages --frozen)"
        (cd "$ROOT" && "$uv" sync --all-packages --frozen >&2)
    fi
    "$ROOT/.venv/bin/python" "$@"
}

require_tools() {
    command -v "$JAVA" >/dev/null || die "java not found (need Java 17+; set JAVA_HOME or put java on PATH)"
    [[ -n $KAFKA_VERSION ]] || die "could not read <kafka.version> from $POM"
}

# Serialise up/down/status across concurrent callers (e.g. pytest-xdist
# workers each calling `up`): fd 9 holds an exclusive lock until exit.
# Every child we leave running must close fd 9 (9>&-), or it would keep the
# lock forever.
take_lock() {
    mkdir -p "$STATE_DIR"
    exec 9>"$LOCK_FILE"
    flock -w "$((START_TIMEOUT + STOP_TIMEOUT))" 9 ||
        die "timed out waiting for $LOCK_FILE (another kafka.sh still running?)"
}

# ---------------------------------------------------------------- jars

pom_digest() { sha256sum "$POM" | cut -d' ' -f1; }

# Fetch the broker classpath once per pom content. The marker holds the pom's
# digest, so editing the pom triggers a re-fetch; fetching into a temp dir and
# renaming means an interrupted fetch never looks complete.
ensure_jars() {
    local digest
    digest=$(pom_digest)
    if [[ -f $LIBS_MARKER && $(<"$LIBS_MARKER") == "$digest" ]]; then
        return 0
    fi
    command -v mvn >/dev/null || die "mvn not found; it is needed once to fetch the Kafka jars into $LIBS"
    mkdir -p "$JAR_CACHE"
    # Other checkouts share this cache: lock it while fetching.
    exec 8>"$JAR_CACHE/.fetch.lock"
    flock -w 600 8 || die "timed out waiting for $JAR_CACHE/.fetch.lock"
    if [[ -f $LIBS_MARKER && $(<"$LIBS_MARKER") == "$digest" ]]; then
        exec 8>&-
        return 0
    fi
    local tmp
    tmp=$(mktemp -d "$JAR_CACHE/libs.tmp.XXXXXX")
    log "fetching Kafka $KAFKA_VERSION jars from Maven Central into $LIBS"
    # Maven output is kept aside and shown only on failure (Debian's mvn 3.8
    # emits colour escapes even in batch mode; strip them).
    local mvn_log=$tmp.mvn.log
    if ! mvn -q -B -f "$POM" dependency:copy-dependencies \
            -DincludeScope=runtime -DoutputDirectory="$tmp" >"$mvn_log" 2>&1; then
        sed 's/\x1b\[[0-9;]*m//g' "$mvn_log" >&2
        rm -rf "$tmp" "$mvn_log"
        die "mvn could not fetch the Kafka $KAFKA_VERSION jars (Maven output above; check network access to Maven Central)"
    fi
    rm -f "$mvn_log"
    [[ -n $(compgen -G "$tmp/kafka_2.13-*.jar") ]] || {
        rm -rf "$tmp"
        die "mvn succeeded but no kafka_2.13 jar landed in $tmp"
    }
    echo "$digest" >"$tmp/.complete"
    rm -rf "$LIBS"
    mv "$tmp" "$LIBS"
    exec 8>&-
}

# ---------------------------------------------------------------- process

# True if $1 is a live broker started by this checkout's script: the command
# line must name both the broker main class and our properties file, so a
# recycled pid or another checkout's broker never matches.
is_our_broker() {
    local pid=$1 cmdline
    [[ -n $pid && -r /proc/$pid/cmdline ]] || return 1
    cmdline=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || return 1
    [[ $cmdline == *" $BROKER_MAIN $PROPS"* ]]
}

# Print the pid of our running broker, if any. Falls back to scanning /proc
# so a lost pid file does not leave an orphan nobody can stop.
broker_pid() {
    local pid
    if [[ -f $PID_FILE ]]; then
        pid=$(<"$PID_FILE")
        if is_our_broker "$pid"; then
            echo "$pid"
            return 0
        fi
    fi
    local dir
    for dir in /proc/[0-9]*; do
        pid=${dir#/proc/}
        if is_our_broker "$pid"; then
            echo "$pid"
            return 0
        fi
    done
    return 1
}

# ---------------------------------------------------------------- probes

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# A metadata round-trip through a real client: proves the broker finished
# starting (listeners open, broker registered with the controller) rather
# than just that the port accepts TCP.
metadata_ok() {
    py - "$1" 2>/dev/null <<'EOF'
import sys
from confluent_kafka.admin import AdminClient
md = AdminClient({"bootstrap.servers": sys.argv[1], "log_level": 0}).list_topics(timeout=3)
sys.exit(0 if md.brokers else 1)
EOF
}

answering() {
    local bootstrap=$1
    port_open "${bootstrap##*:}" && metadata_ok "$bootstrap"
}

# ---------------------------------------------------------------- config

# Two distinct free loopback ports: broker listener and KRaft controller.
# Both sockets are held open until both are chosen so they cannot collide.
pick_ports() {
    py - <<'EOF'
import socket
socks = [socket.socket() for _ in range(2)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))
for s in socks:
    s.close()
EOF
}

# Kafka cluster ids are 16 random bytes, base64url without padding. One in 64 starts with '-',
# which is why format passes it as --cluster-id=ID (as a separate word it reads as an option).
random_cluster_id() {
    py -c 'import base64, uuid; print(base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode())'
}

write_config() {
    local port=$1 cport=$2
    cat >"$PROPS" <<EOF
# Generated by hack/kafka/kafka.sh: single-node KRaft, broker+controller.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$cport
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
advertised.listeners=PLAINTEXT://127.0.0.1:$port
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
log.dirs=$DATA_DIR

# One node: every internal topic must be satisfiable with one replica.
default.replication.factor=1
min.insync.replicas=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
# Fewer internal partitions than the defaults (50) so the first consumer
# group / transaction on a fresh broker does not wait on creating 50 logs.
offsets.topic.num.partitions=4
transaction.state.log.num.partitions=4

# Tests: join groups immediately, create topics on first use.
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=true
num.partitions=1
delete.topic.enable=true
log.segment.bytes=16777216
EOF

    # Everything to stdout, which is redirected into broker.log, so JVM-level
    # failures (bad classpath, OOM) land in the same file as Kafka's logs.
    cat >"$LOG4J_CONF" <<'EOF'
status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
# The storage tool runs with -Dknarr.log.level=WARN: its INFO output is a
# full config dump that would push real errors out of a failure's log tail.
rootLogger.level = ${sys:knarr.log.level:-INFO}
rootLogger.appenderRef.out.ref = OUT
logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.statechange.name = state.change.logger
logger.statechange.level = WARN
EOF
}

format_storage() {
    local cluster_id
    cluster_id=$(random_cluster_id)
    log "formatting $DATA_DIR (cluster id $cluster_id)"
    "$JAVA" -Dlog4j2.configurationFile="$LOG4J_CONF" -Dknarr.log.level=WARN -cp "$LIBS/*" \
        "$STORAGE_TOOL_MAIN" format --cluster-id="$cluster_id" -c "$PROPS" \
        </dev/null >>"$LOG_FILE" 2>&1 9>&- ||
        fail_start "storage format failed"
}

# ---------------------------------------------------------------- commands

fail_start() {
    log "error: $1"
    if [[ -f $LOG_FILE ]]; then
        log "last 60 lines of $LOG_FILE:"
        tail -n 60 "$LOG_FILE" >&2
    fi
    # A half-started broker would only confuse the next `up`.
    stop_broker >/dev/null 2>&1 || true
    log "the broker did not start; fix the cause above, then rerun: hack/kafka/kafka.sh up"
    exit 1
}

start_broker() {
    local port cport
    read -r port cport < <(pick_ports) || true
    [[ -n ${cport:-} ]] || die "could not pick free loopback ports (python: $ROOT/.venv/bin/python)"
    # A fresh cluster every start: ports change, and tests use unique topic
    # names, so there is nothing worth carrying over.
    rm -rf "$DATA_DIR" "$BOOTSTRAP_FILE"
    mkdir -p "$DATA_DIR"
    : >"$LOG_FILE"
    write_config "$port" "$cport"
    format_storage

    log "starting Kafka $KAFKA_VERSION on 127.0.0.1:$port (controller :$cport), log: $LOG_FILE"
    # setsid: own session, so Ctrl-C in the terminal running pytest/make does
    # not reach the broker. The inner shell writes its own pid and then execs
    # java, so the pid file holds the JVM's pid. 9>&- releases our lock fd.
    # shellcheck disable=SC2086,SC2016  # HEAP_OPTS splits on purpose; $$ is the inner shell's
    setsid bash -c 'echo $$ >"$0"; exec "$@"' "$PID_FILE" \
        "$JAVA" $HEAP_OPTS -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
        -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true \
        -Dlog4j2.configurationFile="$LOG4J_CONF" \
        -cp "$LIBS/*" "$BROKER_MAIN" "$PROPS" \
        </dev/null >>"$LOG_FILE" 2>&1 9>&- &

    local bootstrap=127.0.0.1:$port
    local deadline=$((SECONDS + START_TIMEOUT)) pid=""
    while :; do
        # The pid file appears a moment after the fork; once it has, the
        # process must stay alive, or there is no point waiting further.
        if [[ -z $pid && -s $PID_FILE ]]; then pid=$(<"$PID_FILE"); fi
        if [[ -n $pid ]] && ! kill -0 "$pid" 2>/dev/null; then
            fail_start "broker process $pid exited during startup"
        fi
        if [[ -n $pid ]] && answering "$bootstrap"; then
            break
        fi
        if ((SECONDS >= deadline)); then
            fail_start "broker not answering metadata requests on $bootstrap after ${START_TIMEOUT}s"
        fi
        sleep 0.25
    done
    echo "$bootstrap" >"$BOOTSTRAP_FILE"
    log "ready: $bootstrap (pid $pid)"
}

# Stop our broker if running. Prints nothing on stdout; idempotent.
# With "quiet", says nothing when there was nothing to stop.
stop_broker() {
    local pid
    if ! pid=$(broker_pid); then
        rm -f "$PID_FILE" "$BOOTSTRAP_FILE"
        [[ ${1:-} == quiet ]] || log "not running"
        return 0
    fi
    log "stopping broker (pid $pid)"
    # CONT first: a stopped (SIGSTOP/^Z) JVM would otherwise sit on the TERM.
    kill -CONT "$pid" 2>/dev/null || true
    kill -TERM "$pid" 2>/dev/null || true
    local deadline=$((SECONDS + STOP_TIMEOUT))
    while kill -0 "$pid" 2>/dev/null; do
        if ((SECONDS >= deadline)); then
            log "still alive after ${STOP_TIMEOUT}s, sending SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
            break
        fi
        sleep 0.2
    done
    # Wait for the kernel to reap it (it was reparented; we cannot `wait`).
    while [[ -e /proc/$pid ]] && is_our_broker "$pid"; do sleep 0.1; done
    rm -f "$PID_FILE" "$BOOTSTRAP_FILE"
    log "stopped"
}

# If our broker is running and answering, print its address and succeed.
# A live broker that does not answer gets a short grace period (it may be
# busy, e.g. under GC), then is reported as unhealthy.
running_bootstrap() {
    local pid bootstrap grace=${1:-0}
    pid=$(broker_pid) || return 1
    [[ -s $BOOTSTRAP_FILE ]] || return 1
    bootstrap=$(<"$BOOTSTRAP_FILE")
    local deadline=$((SECONDS + grace))
    until answering "$bootstrap"; do
        ((SECONDS < deadline)) || return 1
        sleep 0.5
    done
    echo "$bootstrap"
}

cmd_up() {
    require_tools
    take_lock
    ensure_jars
    local bootstrap
    if bootstrap=$(running_bootstrap 10); then
        log "reusing running broker (pid $(broker_pid))"
    else
        if broker_pid >/dev/null; then
            log "broker process is alive but not answering; restarting it"
        fi
        stop_broker quiet
        start_broker
        bootstrap=$(<"$BOOTSTRAP_FILE")
    fi
    echo "KAFKA_BOOTSTRAP=$bootstrap"
}

cmd_down() {
    take_lock
    stop_broker
}

cmd_status() {
    local pid bootstrap
    if ! pid=$(broker_pid); then
        log "not running"
        return 1
    fi
    if bootstrap=$(running_bootstrap 0); then
        log "running: pid $pid, answering on $bootstrap"
        echo "KAFKA_BOOTSTRAP=$bootstrap"
        return 0
    fi
    log "pid $pid is alive but not answering (see: hack/kafka/kafka.sh logs)"
    return 1
}

cmd_logs() {
    [[ -f $LOG_FILE ]] || die "no broker log yet at $LOG_FILE (run: hack/kafka/kafka.sh up)"
    case ${1:-} in
        -f) exec tail -n 100 -f "$LOG_FILE" ;;
        '') exec tail -n 100 "$LOG_FILE" ;;
        *[!0-9]*) die "logs takes -f or a line count, got: $1" ;;
        *) exec tail -n "$1" "$LOG_FILE" ;;
    esac
}

main() {
    local cmd=${1:-}
    shift || true
    case $cmd in
        up) cmd_up ;;
        down) cmd_down ;;
        status) cmd_status ;;
        logs) cmd_logs "$@" ;;
        *) usage ;;
    esac
}

main "$@"
