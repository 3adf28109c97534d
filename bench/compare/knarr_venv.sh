#!/usr/bin/env bash
# Print the Python of a venv with this checkout's knarr installed on the same interpreter as
# Drakkar's venv, creating or updating it first, so the race runs both engines on one Python.
#
#   bench/compare/knarr_venv.sh DRAKKAR_PYTHON     the venv's python on stdout; progress on stderr
#
# The workspace's own .venv may be on another interpreter (hack/python.sh prefers the
# distribution's, built with PGO and LTO; Drakkar needs 3.13, which that rarely is): a race
# between two interpreters would measure them as much as the engines. The venv lives outside
# the checkout and uv keeps it in step with the lock file.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
UV=$("$ROOT/hack/uv.sh")
VENV=${KNARR_RACE_VENV:-$HOME/.cache/knarr/race-knarr-venv}

log() { printf 'knarr_venv.sh: %s\n' "$*" >&2; }

if [[ $# -ne 1 || ! -x $1 ]]; then
    log "usage: knarr_venv.sh DRAKKAR_PYTHON (the python of Drakkar's venv, from drakkar_venv.sh)"
    exit 2
fi
# The interpreter Drakkar's venv was made from, not the venv's own python.
base=$("$1" -c 'import sys; print(sys._base_executable)')
log "knarr for the race: $VENV on $base (Drakkar's interpreter)"
if ! (cd "$ROOT" && UV_PROJECT_ENVIRONMENT=$VENV UV_PYTHON_DOWNLOADS=never \
        "$UV" sync --quiet --all-packages --frozen --python "$base" >&2); then
    log "error: could not install knarr into $VENV on $base (see uv's message above); nothing was measured."
    exit 1
fi
echo "$VENV/bin/python"
