"""Debian's chromium, driven by Playwright's Python API, for the debug UI's tests.

The browser comes from ``hack/browser/browser.sh up`` (apt-get installs chromium and chromium-driver
once per machine; ``make test`` runs it first). Playwright never downloads a browser of its own here:
it launches that executable. A machine without the browser fails the tests, saying how to install it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BROWSER_SH = ROOT / "hack" / "browser" / "browser.sh"
SCREENSHOTS = ROOT / "out" / "screenshots"  # test artefacts (out/ is git-ignored)
DOCS_SCREENSHOTS = ROOT / "docs" / "screenshots"  # the README's pictures: refreshed with KNARR_DOCS_SCREENSHOTS=1
MAX_SCREENSHOT_HEIGHT = 1800  # px: the top of a long page says enough, and keeps the PNGs small
INSTALL_HINT = ("install it with `hack/browser/browser.sh up` (apt-get install -y chromium chromium-driver; "
                "`make test` does this first), or point KNARR_CHROMIUM at a chromium executable")


def chromium_executable() -> str:
    """The chromium to launch, from browser.sh; pytest.fail naming the way to install it when there is none."""
    try:
        proc = subprocess.run(["bash", str(BROWSER_SH), "up"], capture_output=True, text=True, timeout=900, check=False)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"hack/browser/browser.sh up did not finish in {exc.timeout:.0f}s; {INSTALL_HINT}", pytrace=False)
    for line in proc.stdout.splitlines():
        if line.startswith("CHROMIUM=") and proc.returncode == 0:
            return line.removeprefix("CHROMIUM=").strip()
    pytest.fail(f"no headless chromium for the debug UI's browser tests (browser.sh exit {proc.returncode}):\n"
                f"{proc.stderr.strip()}\n{INSTALL_HINT}", pytrace=False)


async def launch(playwright, executable: str):
    # --no-sandbox: the tests may run as root (CI containers), where chromium's sandbox refuses to start.
    return await playwright.chromium.launch(executable_path=executable, headless=True,
                                            args=["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"])


async def screenshot(page, name: str, docs: bool = False) -> Path:
    """Save the page as out/screenshots/<name>.png; a ``docs`` one also as docs/screenshots/<name>.png
    when KNARR_DOCS_SCREENSHOTS=1 (`make screenshots`), for the README."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    width, height = await page.evaluate("[document.documentElement.clientWidth, document.documentElement.scrollHeight]")
    clip = {"x": 0, "y": 0, "width": width, "height": min(height, MAX_SCREENSHOT_HEIGHT)}
    await page.screenshot(path=str(path), full_page=True, clip=clip)
    if docs and os.environ.get("KNARR_DOCS_SCREENSHOTS") == "1":
        DOCS_SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, DOCS_SCREENSHOTS / path.name)
    return path


class PageErrors:
    """Console errors and uncaught exceptions of a page: a view that throws fails its test."""

    def __init__(self, page, allowed: tuple[str, ...] = ()) -> None:
        self.errors: list[str] = []
        self.allowed = allowed
        page.on("console", lambda m: self._console(m))
        page.on("pageerror", lambda e: self.errors.append(f"uncaught: {e}"))

    def _console(self, message) -> None:
        if message.type == "error" and not any(a in message.text for a in self.allowed):
            self.errors.append(f"console: {message.text}")

    def check(self) -> None:
        assert not self.errors, "the page reported errors:\n" + "\n".join(self.errors)
