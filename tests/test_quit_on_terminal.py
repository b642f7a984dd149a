"""q on a real terminal: the process ends at once, gives the terminal back as it found it, leaves no child.

On a terminal the app ends the process when a person quits (`walkthrough/app_quit.py`) instead of
letting Textual close every widget in order, which after a storm of keys works through seconds of queued
redraws first. These tests check what that shortcut must still do: restore the terminal (cooked mode,
echo, the main screen, the cursor), exit 0, and kill the processes the app started.
"""

from __future__ import annotations

import fcntl
import os
import pty
import select
import struct
import sys
import termios
import threading
from pathlib import Path

import pytest
from app_support import settle
from tiny_model_support import MODEL_PATH

import walkthrough.app_quit as quit_module
from walkthrough import textual_private
from walkthrough.app import make_app
from walkthrough.engine.serving import coldstart
from walkthrough.errors import WalkthroughError

ROOT = Path(__file__).resolve().parents[1]
LEAVE_ALTERNATE_SCREEN = b"\x1b[?1049l"
SHOW_CURSOR = b"\x1b[?25h"
GIVE_UP_SECONDS = 120  # a hang guard, not a speed check


def _read(master: int, until: bytes | None) -> bytes:
    """Bytes from the terminal until `until` appears, or until the app closes it (until=None)."""
    seen = b""
    while until is None or until not in seen:
        ready, _, _ = select.select([master], [], [], GIVE_UP_SECONDS)
        if not ready:
            raise AssertionError(f"no output for {GIVE_UP_SECONDS} s; last: {seen[-300:]!r}")
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the app ended and its terminal closed
            data = b""
        if not data:
            if until is None:
                return seen
            raise AssertionError(f"the app ended before {until!r}; last: {seen[-300:]!r}")
        seen += data
    return seen


def test_q_on_a_terminal_ends_the_app_and_gives_the_terminal_back():
    pid, master = pty.fork()
    if pid == 0:  # the child: the app on the pseudo-terminal, as a person runs it
        os.chdir(ROOT)
        os.environ["TERM"] = "xterm-256color"
        os.environ["PYTHONPATH"] = str(ROOT)
        os.execv(sys.executable, [sys.executable, "-m", "walkthrough"])
    try:
        fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
        _read(master, b"tiny-clinical-moe.gguf")  # the File stage shows the bundled model
        assert not termios.tcgetattr(master)[3] & termios.ICANON  # the app holds the terminal raw
        os.write(master, b"q")
        tail = _read(master, None)
        flags = termios.tcgetattr(master)[3]
    finally:
        _, status = os.waitpid(pid, 0)
        os.close(master)
    assert os.waitstatus_to_exitcode(status) == 0
    assert flags & termios.ICANON and flags & termios.ECHO, "the terminal was left raw"
    assert LEAVE_ALTERNATE_SCREEN in tail and SHOW_CURSOR in tail, tail[-200:]
    assert b"Traceback" not in tail


@pytest.mark.parametrize("quits_on_a_terminal", [True, False])
async def test_q_releases_what_the_app_started_and_ends_the_process_only_on_a_terminal(
        monkeypatch, quits_on_a_terminal):
    steps: list[str] = []
    monkeypatch.setattr(textual_private.os, "_exit", lambda code: steps.append(f"process ends ({code})"))  # not here
    monkeypatch.setattr(quit_module, "kill_children", lambda: steps.append("cold starts killed"))
    monkeypatch.setattr(quit_module, "stop_renders", lambda: steps.append("render helpers killed"))
    app = make_app(None, None)
    app.end_process_on_quit = quits_on_a_terminal
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        driver = textual_private.driver(app)
        driver_stop = driver.stop_application_mode
        monkeypatch.setattr(driver, "stop_application_mode",
                            lambda: (steps.append("terminal restored"), driver_stop()))
        await pilot.press("q")
    assert app.return_code == 0
    if quits_on_a_terminal:
        assert steps[:4] == ["render helpers killed", "cold starts killed", "terminal restored", "process ends (0)"]
    else:  # Textual closes the app in order; its unmount still kills what the app started
        assert "process ends (0)" not in steps
        assert {"render helpers killed", "cold starts killed", "terminal restored"} <= set(steps)


def test_kill_children_ends_a_cold_start_in_flight():
    ids = list(range(1, 40))
    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(coldstart.cold_start(MODEL_PATH, ids))
        except WalkthroughError as error:
            outcome.append(error)

    worker = threading.Thread(target=run)
    worker.start()
    for _ in range(GIVE_UP_SECONDS * 100):
        if coldstart._CHILDREN or not worker.is_alive():
            break
        threading.Event().wait(0.01)
    children = list(coldstart._CHILDREN)
    assert children, "the cold start ended before it could be killed"
    coldstart.kill_children()
    worker.join(GIVE_UP_SECONDS)
    assert not worker.is_alive()
    assert children[0].returncode == -9  # killed, not finished
    assert isinstance(outcome[0], WalkthroughError) and "failed" in str(outcome[0])
    assert not coldstart._CHILDREN
