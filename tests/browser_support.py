"""A real browser for tests: headless Chromium driven over the DevTools protocol, and OCR of its screenshots.

`Browser` starts Debian's `chromium` with a private profile and a DevTools port
chosen by the system, and speaks the protocol over a websocket (aiohttp, which
textual-serve already brings). A `Page` opens a URL, focuses the terminal,
types keys as a person would (`Input.dispatchKeyEvent`), and saves PNG
screenshots. The page draws the terminal on a canvas, so its text is read back
from the picture with Tesseract (`screen_text`), which is what a person sees.

Each helper raises `Unavailable` with the reason when a tool is missing, for the
tests to skip with that reason.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import os
import re
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path
from typing import Self

WINDOW = (1280, 860)  # browser viewport in CSS pixels: a 100x30-cell terminal at the page's font size
DEVTOOLS_LINE = re.compile(r"DevTools listening on (ws://\S+)")


class Unavailable(Exception):
    """A tool the browser tests need is not installed (the message says which and how to get it)."""


def chromium_binary() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    raise Unavailable("no Chromium on PATH (Debian: apt-get install chromium)")


def tesseract_binary() -> str:
    path = shutil.which("tesseract")
    if path is None:
        raise Unavailable("no tesseract on PATH to read screenshots (Debian: apt-get install tesseract-ocr)")
    return path


def screen_text(png: Path) -> str:
    """The text Tesseract reads in a screenshot, whitespace folded."""
    out = subprocess.run([tesseract_binary(), str(png), "-", "--psm", "6"], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    return " ".join(out.split())


def squash(text: str) -> str:
    """Lower-case letters and digits only: OCR reads underlines as `_` and spacing loosely."""
    return "".join(c for c in text.lower() if c.isalnum())


def shows(text: str, wanted: str) -> bool:
    """Whether OCR'd `text` contains `wanted`, ignoring case, spacing and punctuation."""
    return squash(wanted) in squash(text)


class Browser:
    """One headless Chromium process and its browser-level DevTools connection."""

    def __init__(self) -> None:
        self._profile = tempfile.TemporaryDirectory(prefix="walkthrough-chromium-")
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future] = {}
        self.process: subprocess.Popen | None = None

    async def __aenter__(self) -> Self:
        import aiohttp

        self.process = subprocess.Popen(  # noqa: ASYNC220 - returns at once; the test waits on the browser
            [chromium_binary(), "--headless=new", "--no-sandbox", "--use-angle=swiftshader", "--enable-unsafe-swiftshader", "--no-first-run",
             "--disable-dev-shm-usage", f"--user-data-dir={self._profile.name}", "--remote-debugging-port=0",
             f"--window-size={WINDOW[0]},{WINDOW[1]}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            start_new_session=True,  # its helper processes share its group, so closing ends them all
        )
        url = await asyncio.wait_for(asyncio.to_thread(self._devtools_url), timeout=60)
        self._http = aiohttp.ClientSession()
        self._socket = await self._http.ws_connect(url, max_msg_size=0)
        self._reader = asyncio.create_task(self._read())
        return self

    def _devtools_url(self) -> str:
        assert self.process is not None and self.process.stderr is not None
        for line in self.process.stderr:
            match = DEVTOOLS_LINE.search(line)
            if match:
                return match.group(1)
        raise RuntimeError("Chromium exited before opening its DevTools port")

    async def _read(self) -> None:
        import json

        async for message in self._socket:
            data = json.loads(message.data)
            future = self._pending.pop(data.get("id"), None)
            if future is not None and not future.done():
                if "error" in data:
                    future.set_exception(RuntimeError(f"DevTools: {data['error']}"))
                else:
                    future.set_result(data.get("result", {}))

    async def send(self, method: str, session: str | None = None, **params) -> dict:
        """Call one DevTools method (on a page's session if given) and return its result."""
        message_id = next(self._ids)
        future = asyncio.get_running_loop().create_future()
        self._pending[message_id] = future
        message = {"id": message_id, "method": method, "params": params}
        if session is not None:
            message["sessionId"] = session
        await self._socket.send_json(message)
        return await asyncio.wait_for(future, timeout=60)

    async def open(self, url: str) -> Page:
        """A new window showing `url`, in a browser context of its own (as a separate visitor would be)."""
        context = await self.send("Target.createBrowserContext")
        target = await self.send("Target.createTarget", url=url, browserContextId=context["browserContextId"],
                                 newWindow=True)
        attached = await self.send("Target.attachToTarget", targetId=target["targetId"], flatten=True)
        page = Page(self, attached["sessionId"])
        await page.call("Page.enable")
        return page

    async def __aexit__(self, *exc) -> None:
        self._reader.cancel()
        await self._socket.close()
        await self._http.close()
        if self.process is not None:
            self._signal_group(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
            self._signal_group(signal.SIGKILL)  # helpers still writing to the profile
            if self.process.stderr is not None:
                self.process.stderr.close()
        for attempt in range(20):  # a helper the kernel has not reaped yet may still add a file
            try:
                self._profile.cleanup()  # again after a failure: it removes what is still there
                break
            except OSError:
                if attempt == 19:
                    raise
                await asyncio.sleep(0.1)

    def _signal_group(self, sig: int) -> None:
        """Send `sig` to Chromium's process group (its own session), if any of it is left."""
        assert self.process is not None
        try:
            os.killpg(self.process.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


class Page:
    """One browser tab."""

    def __init__(self, browser: Browser, session: str) -> None:
        self.browser = browser
        self.session = session

    async def call(self, method: str, **params) -> dict:
        return await self.browser.send(method, self.session, **params)

    async def evaluate(self, expression: str):
        result = await self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return result.get("result", {}).get("value")

    async def press(self, key: str) -> None:
        """Type one printable key into the focused terminal, as a keyboard would."""
        await self.evaluate("document.querySelector('.xterm-helper-textarea')?.focus()")
        await self.call("Input.dispatchKeyEvent", type="keyDown", key=key, text=key, unmodifiedText=key)
        await self.call("Input.dispatchKeyEvent", type="keyUp", key=key)

    async def screenshot(self, path: Path) -> Path:
        await self.call("Page.bringToFront")  # a background tab draws no frames, so it could not be captured
        shot = await self.call("Page.captureScreenshot", format="png")
        path.write_bytes(base64.b64decode(shot["data"]))
        return path

    async def wait_for_text(self, wanted: str, path: Path, *, timeout: float = 120.0) -> str:
        """Screenshot to `path` until OCR finds `wanted` (case-insensitive) or `timeout` s pass; the last text read."""
        deadline = asyncio.get_running_loop().time() + timeout
        text = ""
        while True:
            await self.screenshot(path)
            text = await asyncio.to_thread(screen_text, path)
            if shows(text, wanted) or asyncio.get_running_loop().time() > deadline:
                return text
            await asyncio.sleep(1.0)
