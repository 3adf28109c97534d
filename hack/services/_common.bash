# Shared by the sink server scripts in this directory (sourced, never run: services.sh runs *.sh only).
# The sourcing script sets NAME (for messages), STATE_DIR, LOG_FILE and LOCK_FILE first.
#
# Conventions (as hack/kafka/kafka.sh): only NAME=value lines on stdout, progress and errors on
# stderr; one lock per state directory; every child left running closes fd 9 (9>&-).

log() { printf '%s.sh: %s\n' "$NAME" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# Serialise up/down/status across concurrent callers: fd 9 holds an exclusive lock until exit.
take_lock() {
    mkdir -p "$STATE_DIR"
    exec 9>"$LOCK_FILE"
    flock -w "${LOCK_TIMEOUT:-120}" 9 || die "timed out waiting for $LOCK_FILE (another $NAME.sh still running?)"
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# A free loopback port: the one in $1 if it is still free (a restart keeps its address), else a new one.
free_port() {
    local wanted=${1:-}
    if [[ -n $wanted ]] && ! port_open "$wanted"; then
        echo "$wanted"
        return 0
    fi
    if command -v python3 >/dev/null; then
        python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' && return 0
    fi
    local port tries
    for tries in {1..50}; do
        port=$((20000 + RANDOM % 30000))
        port_open "$port" || { echo "$port"; return 0; }
    done
    return 1
}

# Install Debian packages the script needs, quietly. The package's own service must not start
# (it would take the default port and is not ours): policy-rc.d answering 101 forbids it.
apt_install() {
    local as_root=()
    if ((EUID != 0)); then
        command -v sudo >/dev/null || die "$* not installed, and installing needs root: run apt-get install -y $*"
        as_root=(sudo -n)
    fi
    command -v apt-get >/dev/null || die "$* not installed and there is no apt-get here: install $* yourself"
    log "installing $* with apt-get (once per machine)"
    local policy=/usr/sbin/policy-rc.d created="" out
    if [[ ! -e $policy ]]; then
        printf '#!/bin/sh\nexit 101\n' | "${as_root[@]}" tee "$policy" >/dev/null && "${as_root[@]}" chmod 755 "$policy" && created=1
    fi
    out=$(mktemp)
    local apt=("${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -q -y -o DPkg::Lock::Timeout=300)
    if ! "${apt[@]}" install --no-install-recommends "$@" >"$out" 2>&1; then
        # A fresh machine may have no package lists yet.
        "${apt[@]}" update >>"$out" 2>&1 || true
        "${apt[@]}" install --no-install-recommends "$@" >>"$out" 2>&1 || {
            [[ -n $created ]] && "${as_root[@]}" rm -f "$policy"
            tail -n 30 "$out" >&2
            rm -f "$out"
            die "apt-get could not install $* (output above); install it by hand and rerun"
        }
    fi
    [[ -n $created ]] && "${as_root[@]}" rm -f "$policy"
    rm -f "$out"
}

# The pids whose parent is $1 (a /proc scan: procps may be missing on a minimal machine).
children_of() {
    local parent=$1 stat line fields
    for stat in /proc/[0-9]*/stat; do
        { line=$(<"$stat"); } 2>/dev/null || continue
        read -ra fields <<<"${line##*) }"  # after the command name: state ppid ...
        if [[ ${fields[1]:-} == "$parent" ]]; then
            stat=${stat#/proc/}
            echo "${stat%/stat}"
        fi
    done
}

# Stop process $1 with signal $2, then SIGKILL once $3 seconds pass. SIGCONT first (to it and its
# children): a stopped process would otherwise sit on the signal. Waits until it is gone.
stop_process() {
    local pid=$1 signal=$2 timeout=$3 child
    for child in $pid $(children_of "$pid"); do kill -CONT "$child" 2>/dev/null || true; done
    kill "-$signal" "$pid" 2>/dev/null || true
    local deadline=$((SECONDS + timeout))
    while kill -0 "$pid" 2>/dev/null; do
        if ((SECONDS >= deadline)); then
            log "still alive after ${timeout}s, sending SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
            break
        fi
        sleep 0.1
    done
    # It was reparented, so we cannot `wait`: watch it disappear.
    while [[ -e /proc/$pid ]] && [[ $(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) != Z ]]; do sleep 0.05; done
}

log_tail() {
    if [[ -s $LOG_FILE ]]; then
        log "last ${1:-40} lines of $LOG_FILE:"
        tail -n "${1:-40}" "$LOG_FILE" >&2
    else
        log "no server log at $LOG_FILE"
    fi
}

cmd_logs() {
    [[ -f $LOG_FILE ]] || die "no log yet at $LOG_FILE (run: $0 up)"
    case ${1:-} in
        -f) exec tail -n 100 -f "$LOG_FILE" ;;
        '') exec tail -n 100 "$LOG_FILE" ;;
        *[!0-9]*) die "logs takes -f or a line count, got: $1" ;;
        *) exec tail -n "$1" "$LOG_FILE" ;;
    esac
}

cmd_down() {
    take_lock
    stop_server
}

# What a script needs before its server can start or be checked (install or build); none by default.
find_binaries() { :; }

# Our running server's address (ADDRESS_VAR's value), if it answers; a live server that does not
# answer gets $1 seconds of grace first.
running_address() {
    local grace=${1:-0} port
    server_pid >/dev/null || return 1
    [[ -s $PORT_FILE ]] || return 1
    port=$(<"$PORT_FILE")
    local deadline=$((SECONDS + grace))
    until answering "$port"; do
        ((SECONDS < deadline)) || return 1
        sleep 0.5
    done
    address "$port"
}

cmd_up() {
    find_binaries
    take_lock
    local found
    if found=$(running_address "${REUSE_GRACE:-0}"); then
        log "reusing running server (pid $(server_pid))"
    else
        if server_pid >/dev/null; then log "server process is alive but not answering; restarting it"; fi
        stop_server quiet
        start_server
        found=$(address "$(<"$PORT_FILE")")
    fi
    echo "$ADDRESS_VAR=$found"
}

cmd_status() {
    find_binaries
    local pid found
    if ! pid=$(server_pid); then
        log "not running"
        return 1
    fi
    if found=$(running_address 0); then
        log "running: pid $pid, answering at $found"
        echo "$ADDRESS_VAR=$found"
        return 0
    fi
    log "pid $pid is alive but not answering (see: $0 logs)"
    return 1
}

# The entry point of every script: `main "$@"`. The script sets ADDRESS_VAR (the NAME of the one
# NAME=value line up/status print) and defines server_pid, start_server, stop_server,
# answering PORT and address PORT (and usage, and find_binaries when it installs or builds);
# up, down, status and logs are the same for all.
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
