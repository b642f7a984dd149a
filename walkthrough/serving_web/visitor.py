"""One visitor's app process: started in a process group of its own, ended when the visitor leaves.

textual-serve's `AppService` runs the command through a shell, asks the app to quit when the websocket
closes and waits for it forever (a busy app never reads the request), and copies the app's stderr,
tracebacks included, to the server's console. `Visitor` keeps its packet protocol but
- runs the command's words directly, in a new session, so the whole group can be signalled, and (Linux)
  with a parent-death signal, so that a server killed with SIGKILL takes its visitors' apps with it;
- `end()`: SIGTERM to the group, SIGKILL after END_GRACE seconds, then waits for the app;
- keeps only the last STDERR_KEPT bytes of the app's stderr, and reports its last line in one log line.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import functools
import os
import shlex
import signal
import sys
from collections import deque

from textual_serve.app_service import AppService

END_GRACE = 2.0  # seconds between SIGTERM and SIGKILL
STDERR_KEPT = 8192  # bytes of the app's stderr kept for the log line
PRELUDE = b"__GANGLION__\n"  # what Textual's web driver writes before its first packet
PRELUDE_LINES = 10  # lines read while waiting for it (textual-serve reads as many)
PR_SET_PDEATHSIG = 1  # prctl option (linux/prctl.h): a signal the kernel sends when the parent dies


def _load_libc() -> ctypes.CDLL | None:
    """The C library, loaded in the server before any fork (Linux only), or None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None


_LIBC = _load_libc()


def _die_with_the_server(server_pid: int) -> None:
    """Run in the app's process before it executes: SIGKILL it when the server dies, however it dies."""
    if _LIBC is not None:
        _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != server_pid:  # the server died before the signal was set
        os._exit(1)


class Visitor(AppService):
    """A visitor's app process: its packets to the page, its group ended with `end()`."""

    def __init__(self, command: str, *, number: int, **service_options) -> None:
        super().__init__(command, **service_options)
        self.number = number
        self._stderr: deque[bytes] = deque()
        self._stderr_bytes = 0
        self._ending: asyncio.Task[str] | None = None

    async def _open_app_process(self, width: int = 80, height: int = 24):
        """Start the app in a session (and process group) of its own, without a shell."""
        self._process = process = await asyncio.create_subprocess_exec(
            *shlex.split(self.command),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env=self._build_environment(width=width, height=height), start_new_session=True,
            preexec_fn=functools.partial(_die_with_the_server, os.getpid()),
        )
        self._stdin = process.stdin
        return process

    def _keep_stderr(self, data: bytes) -> None:
        self._stderr.append(data)
        self._stderr_bytes += len(data)
        while self._stderr_bytes - len(self._stderr[0]) >= STDERR_KEPT:
            self._stderr_bytes -= len(self._stderr.popleft())

    async def _read_stderr(self, stderr: asyncio.StreamReader) -> None:
        while data := await stderr.read(4096):
            self._keep_stderr(data)

    def last_stderr_line(self) -> str:
        """The last non-empty line the app wrote to stderr ("" if none)."""
        lines = b"".join(self._stderr).decode("utf-8", "replace").splitlines()
        return next((line.strip() for line in reversed(lines) if line.strip()), "")

    async def run(self) -> None:
        """Relay the app's packets to the page until its stdout ends (called by `start`)."""
        process = self._process
        assert process is not None and process.stdout is not None and process.stderr is not None
        stderr_task = asyncio.create_task(self._read_stderr(process.stderr))
        stdout = process.stdout
        try:
            for _ in range(PRELUDE_LINES):
                line = await stdout.readline()
                if not line or line == PRELUDE:
                    break
            handlers = {b"D": self.on_data, b"M": self.on_meta, b"P": self.on_packed}
            while True:
                kind = await stdout.readexactly(1)
                size = int.from_bytes(await stdout.readexactly(4), "big")
                payload = await stdout.readexactly(size)
                if kind in handlers:
                    await handlers[kind](payload)
        except (asyncio.IncompleteReadError, ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            await asyncio.wait([stderr_task], timeout=1.0)
            stderr_task.cancel()

    async def stop(self) -> None:
        """textual-serve's name for ending the app."""
        await self.end()

    async def end(self) -> str:
        """End the app's whole process group (idempotent); returns how it ended, for the log line."""
        if self._ending is None:
            self._ending = asyncio.ensure_future(self._end())
        return await asyncio.shield(self._ending)

    async def _end(self) -> str:
        await self._download_manager.cancel_app_downloads(app_service_id=self.app_service_id)
        process = self._process
        if process is None:
            return "app never started"
        how = f"app had exited (code {process.returncode})" if process.returncode is not None else ""
        if not how:
            _signal_group(process.pid, signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), END_GRACE)
                how = "app ended by SIGTERM"
            except asyncio.TimeoutError:
                how = f"app killed by SIGKILL ({END_GRACE:g} s after SIGTERM)"
        _signal_group(process.pid, signal.SIGKILL)  # the app's own children, if any are left
        await process.wait()
        if self._task is not None:
            await asyncio.wait([self._task], timeout=1.0)
            self._task.cancel()
        if process.returncode not in (0, -signal.SIGTERM, -signal.SIGKILL) and self.last_stderr_line():
            how += f"; its last error line: {self.last_stderr_line()}"
        return how


def _signal_group(pgid: int, signum: int) -> None:
    """Send `signum` to process group `pgid`; a group already gone is fine."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)
