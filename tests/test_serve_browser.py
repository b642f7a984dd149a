"""`walkthrough serve` in a real browser: headless Chromium opens the page, a person's keys move the app.

Two tabs are two visitors: each gets its own app process, so one can step
Prefill while the other still shows the File stage. Every check of the app reads
the screenshot (OCR), so what is asserted is what a visitor sees; the PNGs are
kept in pytest's temporary folder. With `--max-visitors 2`, a third tab is told
the places are taken, and stopping the server tells the open pages why their
session ended (the page's visible text, read from the page). Skipped, with the reason, where textual-serve,
Chromium or Tesseract is missing (`.ci/run` installs all three).
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from app_support import stage_key

from tests.browser_support import Browser, Unavailable, chromium_binary, shows, tesseract_binary

REPO_ROOT = Path(__file__).resolve().parents[1]

# Text each stage shows near the top, which the OCR must find (from the screens themselves).
FILE_STAGE = "Layout on disk"
CHAT_STAGE = "Messages Source Rendered"  # the Chat stage's view tabs
PREFILL_BEFORE = "run the first chunk"
PREFILL_AFTER = "chunk 1 of"


def _requirements() -> None:
    try:
        import textual_serve  # noqa: F401
    except ImportError:
        raise Unavailable("textual-serve is not installed (pip install '.[serve]')") from None
    chromium_binary()
    tesseract_binary()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def server():
    try:
        _requirements()
    except Unavailable as exc:
        pytest.skip(str(exc))
    port = _free_port()
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    process = subprocess.Popen([sys.executable, "-m", "walkthrough", "serve", "--port", str(port),
                                "--max-visitors", "2"],
                               cwd=REPO_ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                pytest.fail(f"walkthrough serve did not start: {process.stderr.read().decode()[-2000:]}")
            time.sleep(0.2)
    yield SimpleNamespace(url=f"http://localhost:{port}/", process=process)
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()


async def _visible_text(page, selector: str, wanted: str, timeout: float = 60.0) -> str:
    """The visible text of `selector` on `page` once it contains `wanted` (or after `timeout` s)."""
    deadline = time.monotonic() + timeout
    while True:
        text = await page.evaluate(f"document.querySelector({selector!r})?.innerText ?? ''") or ""
        if wanted in text or time.monotonic() > deadline:
            return text
        await asyncio.sleep(0.5)


async def test_two_visitors_walk_their_own_apps_in_a_browser(server, tmp_path):
    async with Browser() as browser:
        first = await browser.open(server.url)
        second = await browser.open(server.url)

        text = await first.wait_for_text(FILE_STAGE, tmp_path / "1-file.png")
        assert shows(text, FILE_STAGE), f"first screen is not the File stage: {text[:400]}"

        await first.press("n")
        text = await first.wait_for_text(CHAT_STAGE, tmp_path / "2-chat.png")
        assert shows(text, CHAT_STAGE), f"n did not move to the Chat stage: {text[:400]}"

        await first.press(stage_key("prefill"))
        text = await first.wait_for_text(PREFILL_BEFORE, tmp_path / "3-prefill.png")
        assert shows(text, PREFILL_BEFORE), f"4 did not open the Prefill stage: {text[:400]}"

        await first.press(" ")
        text = await first.wait_for_text(PREFILL_AFTER, tmp_path / "4-prefill-step.png")
        assert shows(text, PREFILL_AFTER), f"a step did not change the live panel: {text[:400]}"

        # The second visitor's app is its own: still on the File stage, untouched by the first's keys.
        text = await second.wait_for_text(FILE_STAGE, tmp_path / "5-second-visitor.png")
        assert shows(text, FILE_STAGE), f"second visitor does not see its own File stage: {text[:400]}"
        assert not shows(text, PREFILL_AFTER)

        # Both places are taken: a third visitor is told so, and no app starts for it.
        third = await browser.open(server.url)
        text = await _visible_text(third, "body", "--max-visitors 2")
        assert "--max-visitors 2" in text and "try again" in text, text

        # Stopping the server ends the sessions, and the page says why.
        server.process.terminate()
        text = await _visible_text(first, ".ended", "the server stopped")
        assert "Session ended" in text and "the server stopped" in text, text
