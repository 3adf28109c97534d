"""W1's task as a persistent program (knarr's executor.persistent): answers each task as /bin/echo would."""

from knarr.task import serve


def echo(request) -> str:
    return " ".join(request.args) + "\n"


if __name__ == "__main__":
    serve(echo)
