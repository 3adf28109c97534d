"""@periodic refuses what it cannot schedule when the class is defined, not at the first run."""

from __future__ import annotations

import pytest

import knarr
from knarr.api.handler import periodic_methods


def test_a_plain_def_is_refused_with_the_fix():
    with pytest.raises(TypeError, match="needs an async method: make .*tick.* an `async def`"):
        class Handler(knarr.BaseHandler):
            @knarr.periodic(seconds=1)
            def tick(self):
                pass


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"seconds": 0}, "must be positive"),
    ({"seconds": 1, "on_error": "explode"}, "must be 'continue' or 'stop'"),
])
def test_a_schedule_that_cannot_run_is_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        knarr.periodic(**kwargs)


def test_the_worker_finds_every_periodic_method_with_its_schedule():
    class Handler(knarr.BaseHandler):
        @knarr.periodic(seconds=5, on_error="stop")
        async def refresh(self):
            pass

        async def helper(self):
            pass

    [(name, spec, _bound)] = periodic_methods(Handler())
    assert (name, spec.seconds, spec.on_error) == ("refresh", 5, "stop")
