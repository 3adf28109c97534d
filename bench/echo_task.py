"""The persistent program of bench/persistent.py: echo the task's arguments, as /bin/echo would (knarr.task).

``--delay-us N``: wait N microseconds in each task first (sleeping, no CPU), to hold the engine
to a pace (bench/engine.py's paced row).
``--poll-us N``: after each answer, look for the next request for N microseconds before blocking
(knarr.task's ``poll_seconds``; bench/engine.py's polling row).
"""

import sys
import time

from knarr.task import serve



def _option(name: str) -> float:
    return float(sys.argv[sys.argv.index(name) + 1]) / 1e6 if name in sys.argv else 0.0


delay = _option("--delay-us")


def echo(request):
    if delay:
        time.sleep(delay)
    return " ".join(request.args) + "\n"


serve(echo, poll_seconds=_option("--poll-us"))
