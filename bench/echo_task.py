"""The persistent program of bench/persistent.py: echo the task's arguments, as /bin/echo would (knarr.task).

``--delay-us N``: wait N microseconds in each task first (sleeping, no CPU), to hold the engine
to a pace (bench/engine.py's paced row).
"""

import sys
import time

from knarr.task import serve

delay = float(sys.argv[sys.argv.index("--delay-us") + 1]) / 1e6 if "--delay-us" in sys.argv else 0.0


def echo(request):
    if delay:
        time.sleep(delay)
    return " ".join(request.args) + "\n"


serve(echo)
