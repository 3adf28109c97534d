#!/usr/bin/env bash
# Print the Python the workspace's venv is made with, or nothing to leave the choice to uv.
#
#   hack/python.sh      a path on stdout (the Makefile passes it to uv as UV_PYTHON), or nothing
#
# The distribution's CPython comes first when it is 3.11 or newer: Debian, Ubuntu, Fedora and
# Arch build it with profile-guided optimization and link-time optimization, as the worker
# image's (python:3.11-slim) is. A Python built from source by pyenv or asdf has neither unless
# asked for (PYTHON_CONFIGURE_OPTS="--enable-optimizations --with-lto"), and runs Python code
# 1.6-1.8x slower: tests take longer and the benchmarks measure an interpreter no worker runs
# on. uv itself would take the first python3 on PATH, often such a build.
#
# UV_PYTHON, when set, wins: the Makefile does not call this script then.
set -euo pipefail

for candidate in /usr/bin/python3.13 /usr/bin/python3.12 /usr/bin/python3.11 /usr/bin/python3; do
    if [[ -x $candidate ]] && "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
        echo "$candidate"
        exit 0
    fi
done
