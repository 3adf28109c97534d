"""The worker image's PID 1: tini, forwarding signals to the worker's whole process group."""

from __future__ import annotations

from tests.operator.test_dockerfile import ROOT, _instructions


def test_the_worker_image_runs_tini_as_pid_1_signalling_the_whole_process_group():
    entrypoints = [arg for op, arg in _instructions(ROOT / "Dockerfile.worker") if op == "ENTRYPOINT"]
    assert entrypoints == ['["/usr/bin/tini", "-g", "--"]']
