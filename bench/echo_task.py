"""The persistent program of bench/persistent.py: echo the task's arguments, as /bin/echo would (knarr.task)."""

from knarr.task import serve

serve(lambda request: " ".join(request.args) + "\n")
