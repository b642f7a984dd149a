"""`walkthrough serve` as a visitor or an attacker meets it: a real server process and its websocket protocol.

`served(...)` starts `python -m walkthrough serve` on a free port in a session (process group) of its
own, waits for the line saying where it serves, and always stops it: SIGTERM to its group, SIGKILL
after a grace, and SIGKILL to any visitor's app still alive (each runs in a group of its own). The
server's stdout and stderr go to files, read back as `Served.console()`.

The page speaks textual-serve's protocol: JSON text packets (`["stdin", text]`, `["resize", {"width":
w, "height": h}]`, `["ping", x]`), and the app's screen back as binary terminal output, which
`screen_size` measures (Textual writes each line of a full redraw after a cursor move to its row).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

REPO_ROOT = Path(__file__).resolve().parents[1]
START_TIMEOUT = 60.0  # seconds for the server to say where it serves (imports on a busy 2-core machine)
STOP_GRACE = 10.0  # seconds between SIGTERM and SIGKILL when the test stops the server
SCREEN_TIMEOUT = 30.0  # seconds for a visitor's app to draw its first screen
SERVING = re.compile(r"serving on (http://\S+)")
MOVE_TO_ROW = re.compile(r"\x1b\[(\d+);1H([^\x1b\n]*)")
STYLE = re.compile(r"\x1b\[[0-9;]*m")


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def descendants(pid: int, depth: int | None = None) -> list[int]:
    """Live processes below `pid` (children, grandchildren... to `depth` levels), from /proc."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            if fields[0] != "Z":
                parents[int(entry.name)] = int(fields[1])
    found, frontier, level = [], [pid], 0
    while frontier and (depth is None or level < depth):
        children = [child for child, parent in parents.items() if parent in frontier]
        found += children
        frontier, level = children, level + 1
    return found


def alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def frame_sizes(output: bytes) -> list[tuple[int, int]]:
    """(columns, rows) of each redraw in `output` that starts at the top-left cell (Textual's full frames)."""
    frames = output.split(b"\x1b[1;1H")[1:]
    return [size for frame in frames if (size := screen_size(b"\x1b[1;1H" + frame))]


def screen_size(output: bytes) -> tuple[int, int] | None:
    """(columns, rows) of the screen Textual drew in `output`: longest line after a move to column 1, last row."""
    plain = STYLE.sub("", output.decode("utf-8", "replace"))
    rows: dict[int, int] = {}
    for match in MOVE_TO_ROW.finditer(plain):
        row = int(match.group(1))
        rows[row] = max(rows.get(row, 0), len(match.group(2)))
    return (max(rows.values()), max(rows)) if rows else None


@dataclass
class Served:
    """A running `walkthrough serve`: its URL, process and console files."""

    url: str
    port: int
    process: subprocess.Popen
    out_path: Path
    err_path: Path
    seen: set[int] = field(default_factory=set)  # every process found below the server, to stop after the test

    def console(self) -> str:
        """Everything the server wrote to its stdout and stderr so far."""
        return self.out_path.read_text(errors="replace") + self.err_path.read_text(errors="replace")

    def log_lines(self, needle: str) -> list[str]:
        return [line for line in self.console().splitlines() if needle in line]

    def apps(self) -> list[int]:
        """Process ids of the visitors' apps (the server's children)."""
        found = descendants(self.process.pid, depth=1)
        self.seen.update(found)
        return found

    def processes(self) -> list[int]:
        """Every process below the server: the apps and what they started."""
        found = descendants(self.process.pid)
        self.seen.update(found)
        return found

    def ws_url(self, query: str = "width=80&height=24", token: str | None = None) -> str:
        return f"ws://127.0.0.1:{self.port}/ws" + (f"/{token}" if token else "") + f"?{query}"

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@contextlib.contextmanager
def served(tmp_path: Path, *options: str, host: str = "127.0.0.1"):
    """Run `walkthrough serve --host HOST --port FREE *options` for the block; always stopped after it."""
    port = free_port(host)
    out_path, err_path = tmp_path / f"serve-{port}.out", tmp_path / f"serve-{port}.err"
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        process = subprocess.Popen(
            [sys.executable, "-m", "walkthrough", "serve", "--host", host, "--port", str(port), *options],
            cwd=REPO_ROOT, env=env, stdout=out, stderr=err, stdin=subprocess.DEVNULL, start_new_session=True)
    server = Served(f"http://{host}:{port}/", port, process, out_path, err_path)
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while not _listening(host, port):
            if process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"walkthrough serve did not start: {server.console()[-2000:]}")
            time.sleep(0.2)
        if match := SERVING.search(server.console()):
            server.url = match.group(1)
        yield server
    finally:
        apps = server.seen | set(descendants(process.pid))
        _stop_group(process)
        for pid in apps:  # an app the server failed to end (each runs in a group of its own)
            if alive(pid) and b"walkthrough" in _cmdline(pid):
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _listening(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=1).close()
        return True
    except OSError:
        return False


def _stop_group(process: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=STOP_GRACE)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=STOP_GRACE)


async def read_screen(ws: aiohttp.ClientWebSocketResponse, quiet: float = 1.0,
                      timeout: float = SCREEN_TIMEOUT) -> bytes:
    """The app's output until it has been quiet for `quiet` seconds after drawing (at most `timeout`)."""
    output = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        wait = quiet if screen_size(output) else max(0.1, deadline - time.monotonic())
        try:
            message = await asyncio.wait_for(ws.receive(), wait)
        except asyncio.TimeoutError:
            if screen_size(output):
                break
            continue
        if message.type == aiohttp.WSMsgType.BINARY:
            output += message.data
        elif message.type != aiohttp.WSMsgType.TEXT:
            break  # closed
    return output


async def wait_for_screen(ws: aiohttp.ClientWebSocketResponse, size: tuple[int, int],
                          timeout: float = SCREEN_TIMEOUT) -> list[tuple[int, int]]:
    """Read the app's output until it draws a whole screen of `size` (or `timeout` passes).

    Returns the size of every frame drawn meanwhile, the last one `size` unless it never came (frames
    left over from before the call come first).
    """
    output = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            message = await asyncio.wait_for(ws.receive(), max(0.1, deadline - time.monotonic()))
        except asyncio.TimeoutError:
            break
        if message.type == aiohttp.WSMsgType.BINARY:
            output += message.data
            if size in frame_sizes(output):
                break
        elif message.type != aiohttp.WSMsgType.TEXT:
            break  # closed
    sizes = frame_sizes(output)
    return sizes[: sizes.index(size) + 1] if size in sizes else sizes


async def wait_until(predicate, timeout: float, step: float = 0.1) -> bool:
    """Poll `predicate()` until it is true or `timeout` seconds have passed; returns its last value."""
    deadline = time.monotonic() + timeout
    while not (result := predicate()) and time.monotonic() < deadline:
        await asyncio.sleep(step)
    return bool(result)
