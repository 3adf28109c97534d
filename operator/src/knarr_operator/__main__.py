"""``python -m knarr_operator`` / ``knarr-operator``: run the operator (kopf) over all namespaces."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    from kopf.cli import main as kopf_main

    args = list(sys.argv[1:] if argv is None else argv)
    # One operator replica (the chart's Deployment uses Recreate), so no peering is needed.
    return kopf_main(["run", "--standalone", "-m", "knarr_operator.handlers", *(args or ["--all-namespaces"])], standalone_mode=False) or 0


if __name__ == "__main__":
    sys.exit(main())
