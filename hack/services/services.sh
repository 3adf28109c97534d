#!/usr/bin/env bash
# The sink servers the tests and local development use, each a throwaway instance on a free
# loopback port: every hack/services/<name>.sh next to this script (postgres, redis, mongo, ...).
#
#   hack/services/services.sh up     start (or reuse) each one; prints its NAME=value line(s)
#   hack/services/services.sh down   stop each one (idempotent)
#
# Each script takes up|down|status|logs, prints only its NAME=value lines on stdout and its
# progress on stderr, and keeps its state under <repo>/.cache/<name> and its downloads and
# builds under ${XDG_CACHE_HOME:-~/.cache}/knarr.
set -euo pipefail

HERE=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
action=${1:?usage: services.sh up|down|status}

status=0
for script in "$HERE"/*.sh; do
    [[ $(basename "$script") == services.sh ]] && continue
    "$script" "$action" || { echo "services.sh: $(basename "$script" .sh) $action failed" >&2; status=1; }
done
exit $status
