"""``python -m knarr_operator`` / ``knarr-operator``: run the operator (kopf) over all namespaces."""

from __future__ import annotations

import sys

from knarr_operator.settings import OperatorSettings, SettingsError

LOG_FLAGS = {"info": [], "verbose": ["--verbose"], "debug": ["--debug"]}


def main(argv: list[str] | None = None) -> int:
    try:
        settings = OperatorSettings.from_env()
    except SettingsError as exc:  # before kopf starts: one line naming the variable, not a traceback
        print(f"knarr-operator: {exc}", file=sys.stderr)
        return 2
    from kopf.cli import main as kopf_main

    args = list(sys.argv[1:] if argv is None else argv)
    # One operator replica (the chart's Deployment uses Recreate), so no peering is needed.
    run = ["run", "--standalone", *LOG_FLAGS[settings.log_level], "-m", "knarr_operator.handlers"]
    return kopf_main([*run, *(args or ["--all-namespaces"])], standalone_mode=False) or 0


if __name__ == "__main__":
    sys.exit(main())
