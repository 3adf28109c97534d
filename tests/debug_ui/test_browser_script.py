"""hack/browser/browser.sh: the one way the browser tests get their chromium."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.debug_ui.browser import BROWSER_SH, chromium_executable


def run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(BROWSER_SH), *args], capture_output=True, text=True, timeout=900,
                          env={**os.environ, **(env or {})}, check=False)


def test_up_prints_only_the_chromium_line_and_is_the_same_when_run_again():
    first, second = run("up"), run("up")
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines() == second.stdout.splitlines()
    [line] = first.stdout.splitlines()
    path = line.removeprefix("CHROMIUM=")
    assert line.startswith("CHROMIUM=") and os.access(path, os.X_OK)


def test_a_chromium_that_is_not_there_fails_naming_the_variable_to_fix():
    result = run("up", env={"KNARR_CHROMIUM": "/nonexistent/chromium"})
    assert result.returncode != 0 and result.stdout == ""
    assert "KNARR_CHROMIUM=/nonexistent/chromium is not an executable file" in result.stderr


def test_without_a_command_it_prints_its_usage():
    result = run()
    assert result.returncode == 2 and "browser.sh up" in result.stderr


def test_the_browser_tests_fail_saying_how_to_install_chromium_when_there_is_none(monkeypatch):
    monkeypatch.setenv("KNARR_CHROMIUM", "/nonexistent/chromium")
    with pytest.raises(pytest.fail.Exception, match=r"install it with `hack/browser/browser.sh up`"):
        chromium_executable()
