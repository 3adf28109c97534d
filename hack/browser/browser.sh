#!/usr/bin/env bash
# The headless browser the debug UI's tests drive: Debian's chromium and chromium-driver.
#
#   hack/browser/browser.sh up       install them with apt-get when missing (once per machine);
#                                    prints exactly CHROMIUM=<path of the chromium executable>
#   hack/browser/browser.sh status   exit 0 and print CHROMIUM=<path> if it is installed and starts
#
# The tests point Playwright's Python API at this executable (they never download Playwright's own
# browsers). Nothing runs in the background: there is nothing to stop, so there is no `down`.
# KNARR_CHROMIUM names another chromium executable (it must exist; nothing is installed then).
set -euo pipefail

SCRIPT_DIR=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd -- "$SCRIPT_DIR/../.." && pwd)

NAME=browser
STATE_DIR=$ROOT/.cache/browser
LOCK_FILE=$STATE_DIR/lock

# From the sink servers' shared helpers: log, die, take_lock, apt_install (not their server commands).
# shellcheck source=hack/services/_common.bash
source "$ROOT/hack/services/_common.bash"

usage() {
    sed -n '4,7p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

# The chromium executable, or nothing (exit 1) when it is not installed.
chromium_path() {
    if [[ -n ${KNARR_CHROMIUM:-} ]]; then
        [[ -x $KNARR_CHROMIUM ]] || die "KNARR_CHROMIUM=$KNARR_CHROMIUM is not an executable file"
        echo "$KNARR_CHROMIUM"
        return 0
    fi
    local candidate
    for candidate in /usr/bin/chromium "$(command -v chromium 2>/dev/null || true)"; do
        [[ -n $candidate && -x $candidate ]] && { echo "$candidate"; return 0; }
    done
    return 1
}

# A broken install (missing shared libraries) shows here, not as a timeout in a test.
check_starts() {
    local out
    if ! out=$("$1" --headless --no-sandbox --disable-gpu --version 2>&1 | tail -n 1); then
        printf '%s\n' "$out" >&2
        die "$1 does not start (output above); reinstall it: apt-get install --reinstall -y chromium chromium-driver"
    fi
    log "$out"
}

browser_up() {
    take_lock
    [[ -z ${KNARR_CHROMIUM:-} || -x $KNARR_CHROMIUM ]] || die "KNARR_CHROMIUM=$KNARR_CHROMIUM is not an executable file"
    if [[ -z ${KNARR_CHROMIUM:-} ]] && { ! chromium_path >/dev/null || ! command -v chromedriver >/dev/null; }; then
        apt_install chromium chromium-driver
    fi
    local path
    path=$(chromium_path) || die "chromium is installed, yet neither /usr/bin/chromium nor chromium is on PATH"
    check_starts "$path"
    echo "CHROMIUM=$path"
}

browser_status() {
    local path
    path=$(chromium_path) || { log "chromium is not installed (run: hack/browser/browser.sh up)"; exit 1; }
    check_starts "$path"
    echo "CHROMIUM=$path"
}

case ${1:-} in
    up) browser_up ;;
    status) browser_status ;;
    *) usage ;;
esac
