"""tests/programs/behave as a persistent program (knarr.task): the same arguments, the same output.

Arguments, read left to right, as behave reads them:
  out=TEXT  err=TEXT  sleep=SECS  exit=CODE  stdin  env=NAME  bytes=N  failfile=F
and some only a long-lived program has:
  pidfile=F    write this program's pid to F
  hold=F       the first time (F does not exist): write the pid to F and sleep for a minute (a test
               kills the program meanwhile); once F exists, go on
  leak=MB      keep MB more of memory for the rest of the program's life
  garbage      write bytes that are no frame to the real stdout
  exit-now     end the program (exit code 3) without answering
  quit         end the program with exit code 0 without answering
  count        print how many tasks this program has run, itself included

Started with ``--poll-seconds S``, it looks for its next request for S seconds after each answer
before it blocks (knarr.task's ``poll_seconds``).
"""

import os
import sys
import time

from knarr.task import Result, serve

_leaked: list[bytes] = []
_runs = 0


def run(request):
    global _runs
    _runs += 1
    out, err, code = [], [], 0
    env = request.environ()
    for arg in request.args:
        name, _, value = arg.partition("=")
        if name == "out":
            out.append(value + "\n")
        elif name == "err":
            err.append(value + "\n")
        elif name == "sleep":
            time.sleep(float(value))
        elif name == "exit":
            code = int(value)
        elif arg == "stdin":
            out.append(request.text)
        elif name == "env":
            out.append(env.get(value, "") + "\n")
        elif name == "bytes":
            out.append("x" * int(value) + "\n")
        elif name == "failfile":
            try:
                left = int(open(value).read().strip() or 0)
            except FileNotFoundError:
                left = 0
            if left > 0:
                open(value, "w").write(f"{left - 1}\n")
                return Result(exit_code=3, stdout="".join(out), stderr="".join(err) + f"failing, {left - 1} left\n")
        elif name == "pidfile":
            with open(value + ".tmp", "w") as fh:
                fh.write(str(os.getpid()))
            os.rename(value + ".tmp", value)
        elif name == "hold":
            if not os.path.exists(value):
                with open(value + ".tmp", "w") as fh:
                    fh.write(str(os.getpid()))
                os.rename(value + ".tmp", value)
                time.sleep(60)
        elif name == "leak":
            _leaked.append(b"\1" * (int(value) * 1024 * 1024))  # written, so resident
        elif arg == "garbage":
            os.write(FRAMES_FD, b"this is no frame\n")
        elif arg == "exit-now":
            os._exit(3)
        elif arg == "quit":
            os._exit(0)
        elif arg == "count":
            out.append(f"{_runs}\n")
    return Result(exit_code=code, stdout="".join(out), stderr="".join(err))


FRAMES_FD = 1
if __name__ == "__main__":
    FRAMES_FD = os.dup(1)  # the frames' stream, kept for `garbage`; fd 1 then points at stderr, as serve() does
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    poll = float(sys.argv[sys.argv.index("--poll-seconds") + 1]) if "--poll-seconds" in sys.argv else 0.0
    serve(run, out=os.fdopen(FRAMES_FD, "wb"), poll_seconds=poll)
