#!/usr/bin/env bash
# Print the Python of a venv with py-drakkar (Drakkar, the system the spec describes) installed,
# creating or repairing it first. The venv lives outside the checkout and is reused while it
# holds the pinned version on Python 3.13.
#
#   bench/compare/drakkar_venv.sh     the venv's python on stdout; progress on stderr
#
# Drakkar needs Python >= 3.13 and knarr's workspace runs on an older one, so the two cannot
# share a venv: the benchmark runs each engine as its own process anyway.
# Exits non-zero, saying why, when Python 3.13 or the package cannot be had.
set -euo pipefail

VERSION=${DRAKKAR_VERSION:-2.4.0}
VENV=${DRAKKAR_VENV:-$HOME/.cache/knarr/drakkar-venv}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
UV=$("$HERE/../../hack/uv.sh")

log() { printf 'drakkar_venv.sh: %s\n' "$*" >&2; }

# The venv is right when its python is 3.13 and imports the pinned Drakkar.
venv_ok() {
    [[ -x $VENV/bin/python ]] && "$VENV/bin/python" - "$VERSION" >/dev/null 2>&1 <<'EOF'
import sys
import drakkar
assert sys.version_info[:2] == (3, 13), sys.version
assert drakkar.__version__ == sys.argv[1], drakkar.__version__
EOF
}

# A Python 3.13 interpreter that actually runs: what uv already knows (no download), then
# pyenv's installs (its shim refuses to run a version that is not selected), then PATH.
find_python313() {
    local candidate
    if candidate=$(UV_PYTHON_DOWNLOADS=never "$UV" python find 3.13 2>/dev/null); then
        echo "$candidate"
        return 0
    fi
    for candidate in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.13*/bin/python3.13 \
                     "$(command -v python3.13 2>/dev/null || true)"; do
        if [[ -n $candidate && -x $candidate ]] && "$candidate" -c 'import sys; assert sys.version_info[:2] == (3, 13)' 2>/dev/null; then
            echo "$candidate"
            return 0
        fi
    done
    # Last: let uv fetch a managed 3.13 (needs network access to its Python builds).
    if candidate=$("$UV" python find 3.13 2>/dev/null) || { "$UV" python install 3.13 >&2 2>/dev/null && candidate=$("$UV" python find 3.13 2>/dev/null); }; then
        echo "$candidate"
        return 0
    fi
    return 1
}

if venv_ok; then
    echo "$VENV/bin/python"
    exit 0
fi

if ! python=$(find_python313); then
    log "error: Drakkar $VERSION needs Python 3.13 and none was found (not through uv, not in pyenv, not on PATH), and uv could not download one."
    log "       Install Python 3.13 (e.g. 'pyenv install 3.13' or 'uv python install 3.13'), then run make bench-compare again."
    exit 1
fi
log "creating $VENV with $python and py-drakkar==$VERSION"
rm -rf "$VENV"
mkdir -p "$(dirname "$VENV")"
"$UV" venv --quiet --python "$python" "$VENV" >&2
if ! "$UV" pip install --quiet --python "$VENV/bin/python" "py-drakkar==$VERSION" >&2; then
    log "error: could not install py-drakkar==$VERSION from the package index into $VENV (see uv's message above)."
    log "       The race against Drakkar needs it; nothing was measured."
    exit 1
fi
if ! venv_ok; then
    log "error: $VENV was created but does not import drakkar $VERSION on Python 3.13"
    exit 1
fi
echo "$VENV/bin/python"
