#!/usr/bin/env bash
# Print the path of uv, installing it first if it is nowhere to be found.
#
#   hack/uv.sh          the path of uv (installs it into ~/.local/bin if missing)
#   hack/uv.sh --find   the path of uv, or exit 1 (never installs)
#
# Every Makefile target and hack script finds uv through this script, so they work in a
# new shell whether or not ~/.local/bin (where `make setup` puts uv) is on PATH.
# uv comes from PyPI with pip (`pip install --user uv`); where pip refuses to install into
# the user site (an "externally managed" Python), into a small venv of its own instead.
set -euo pipefail

log() { printf 'uv.sh: %s\n' "$*" >&2; }

find_uv() {
    local candidate user_base
    if candidate=$(command -v uv 2>/dev/null); then
        echo "$candidate"
        return 0
    fi
    user_base=$(python3 -m site --user-base 2>/dev/null || true)
    for candidate in "$HOME/.local/bin/uv" ${user_base:+"$user_base/bin/uv"}; do
        if [[ -x $candidate ]]; then
            echo "$candidate"
            return 0
        fi
    done
    return 1
}

install_uv() {
    command -v python3 >/dev/null || { log "error: python3 not found (knarr needs Python 3.11 or newer)"; exit 1; }
    log "uv not found; installing it from PyPI into ~/.local/bin"
    if python3 -m pip install --user --quiet uv >&2 2>/dev/null; then
        return 0
    fi
    local venv=$HOME/.local/share/knarr/uv-venv
    log "pip cannot install into the user site here; using a venv of its own ($venv)"
    python3 -m venv "$venv" >&2
    "$venv/bin/python" -m pip install --quiet uv >&2
    mkdir -p "$HOME/.local/bin"
    ln -sf "$venv/bin/uv" "$HOME/.local/bin/uv"
}

if find_uv; then
    exit 0
fi
if [[ ${1:-} == --find ]]; then
    exit 1
fi
install_uv
find_uv || { log "error: installed uv but cannot find it; see https://docs.astral.sh/uv/ to install it by hand"; exit 1; }
