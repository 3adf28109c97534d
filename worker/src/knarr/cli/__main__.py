"""``python -m knarr.cli``: the same as the ``knarr`` command."""

import sys

from knarr.cli import main

sys.exit(main())
