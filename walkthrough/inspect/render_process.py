"""Chat templates rendered in a helper process that is killed when it runs too long or is cancelled.

The in-process sandbox (`walkthrough.inspect.sandbox`) stops a template between
two lines and refuses the operations it can size beforehand, but a single C-level
operation runs to its end once started: `([a]*16000000) == ([b]*16000000)` compares
for hours, `'%.50000000f'|format(1.0)` allocates before anything measures it. So
every render is sent to a helper process (`python -m walkthrough.inspect.render_process`)
that:

- caps its own address space (`RLIMIT_AS`, `Limits.memory_bytes`), so a template
  that grows memory gets a MemoryError instead of the machine's memory;
- is killed when the render passes its time limit plus `GRACE_SECONDS` (the sandbox
  inside stops most templates at the limit itself, with a better message), when the
  caller's `cancel` event is set, or when `stop_all()` runs (the app calls it on exit).

Helpers are reused between renders (about 0.2 s to start one; a render then costs
a pipe round trip), one per concurrent render. Requests travel as JSON with
`ensure_ascii`, so any Python string (lone surrogates too) arrives unchanged.

Not handled: platforms without `fork`/`resource` (the render then runs in-process,
with the sandbox's limits only).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from datetime import datetime
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from walkthrough.inspect.sandbox import Limits, TemplateError

GRACE_SECONDS = 1.0  # after the time limit, the sandbox's own stop gets this long before the kill
STARTUP_SECONDS = 60.0  # a new helper's Python start and imports (seconds on a loaded machine), not the render's
READY = b'{"ready": true}'  # a new helper's first message: imports done, the render's clock may start
POLL_SECONDS = 0.05  # how often a waiting render looks at its cancel event
MAX_IDLE = 2  # helpers kept for reuse
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])


class _Helper:
    """One helper process and our end of its socket."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "walkthrough.inspect.render_process", str(theirs.fileno())],
            pass_fds=(theirs.fileno(),),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
            close_fds=True,
        )
        theirs.close()
        self.conn = Connection(ours.detach())
        self.ready = False  # set once the helper has said its imports are done

    def wait_ready(self, generation: int, cancel: threading.Event | None, origin: str) -> None:
        """Wait for a new helper's READY, so that its start-up is not counted against the template's time."""
        deadline = time.monotonic() + STARTUP_SECONDS
        while not self.ready:
            try:
                if self.conn.poll(POLL_SECONDS):
                    self.ready = self.conn.recv_bytes() == READY
                    continue
            except (EOFError, OSError):  # it died starting: killed by `stop_all` or a cancel, or it failed
                if _cancelled(generation, cancel):
                    raise TemplateError(f"{origin} rendering was cancelled") from None
                raise TemplateError(f"{origin}: the rendering process could not start") from None
            if _cancelled(generation, cancel):
                raise TemplateError(f"{origin} rendering was cancelled")
            if time.monotonic() > deadline:
                raise TemplateError(f"{origin}: the rendering process did not start within {STARTUP_SECONDS:g} s")

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self.conn.close()


class _Pool:
    """Idle helpers, and the busy ones `stop_all` must be able to kill."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.idle: list[_Helper] = []
        self.busy: set[_Helper] = set()
        self.generation = 0  # bumped by stop_all; a render started before it is cancelled

    def take(self) -> tuple[_Helper, int]:
        with self.lock:
            while self.idle:
                helper = self.idle.pop()
                if helper.alive():
                    self.busy.add(helper)
                    return helper, self.generation
                helper.kill()
            generation = self.generation
        helper = _Helper()
        with self.lock:
            self.busy.add(helper)
        return helper, generation

    def give_back(self, helper: _Helper, keep: bool) -> None:
        with self.lock:
            self.busy.discard(helper)
            if keep and helper.alive() and len(self.idle) < MAX_IDLE:
                self.idle.append(helper)
                return
        helper.kill()

    def stop_all(self) -> None:
        with self.lock:
            self.generation += 1
            helpers = [*self.idle, *self.busy]
            self.idle.clear()
        for helper in helpers:
            if helper.process.poll() is None:
                helper.process.kill()


_POOL = _Pool()


def _cancelled(generation: int, cancel: threading.Event | None) -> bool:
    """Whether a render that began in `generation` was cancelled: by `stop_all` since, or by its caller."""
    return _POOL.generation != generation or (cancel is not None and cancel.is_set())


def stop_all() -> None:
    """Kill every helper, busy or idle; renders waiting on one raise TemplateError("cancelled")."""
    _POOL.stop_all()


def _request(source: str, messages: Any, origin: str, limits: Limits, now: datetime | None,
             variables: dict[str, Any]) -> bytes:
    try:
        return json.dumps(
            {
                "source": source,
                "messages": messages,
                "origin": origin,
                "seconds": limits.seconds,
                "max_chars": limits.max_chars,
                "memory_bytes": limits.memory_bytes,
                "now": None if now is None else now.isoformat(),
                "variables": variables,
            },
            ensure_ascii=True,
        ).encode("ascii")
    except RecursionError:
        raise TemplateError(f"{origin}: the messages are nested too deeply to render") from None
    except (TypeError, ValueError) as exc:
        raise TemplateError(f"{origin}: the template variables are not plain data ({exc})") from None


def render_isolated(source: str, messages: list[dict], variables: dict[str, Any], origin: str,
                    limits: Limits, cancel: threading.Event | None, now: datetime | None) -> str:
    """Render in a helper process; the arguments are `template.render`'s, `variables` the template's own.

    Raises:
        TemplateError: the template failed, ran out of time or memory, or was cancelled.
    """
    payload = _request(source, messages, origin, limits, now, variables)
    try:
        helper, generation = _POOL.take()
    except OSError:  # cannot start a process here: the sandbox's own limits still apply
        from walkthrough.inspect.jinja_env import render_here

        return render_here(source, messages, origin=origin, limits=limits, cancel=cancel, now=now, **variables)
    keep = False
    try:
        reply = _exchange(helper, generation, payload, limits, cancel, origin)
        keep = not reply.get("restart")
    finally:
        _POOL.give_back(helper, keep)
    if "error" in reply:
        raise TemplateError(reply["error"])
    return reply["text"]


def _exchange(helper: _Helper, generation: int, payload: bytes, limits: Limits,
              cancel: threading.Event | None, origin: str) -> dict:
    helper.wait_ready(generation, cancel, origin)
    try:
        helper.conn.send_bytes(payload)
    except OSError:
        if _cancelled(generation, cancel):
            raise TemplateError(f"{origin} rendering was cancelled") from None
        raise TemplateError(f"{origin}: the rendering process could not be reached") from None
    deadline = time.monotonic() + limits.seconds + GRACE_SECONDS
    while True:
        try:
            if helper.conn.poll(POLL_SECONDS):
                return json.loads(helper.conn.recv_bytes())
        except (EOFError, OSError):
            break  # the helper died
        if _cancelled(generation, cancel):
            raise TemplateError(f"{origin} rendering was cancelled")
        if time.monotonic() > deadline:
            raise TemplateError(
                f"{origin} ran longer than {limits.seconds:g} s and was stopped (one operation that does not end?)"
            )
    if _cancelled(generation, cancel):
        raise TemplateError(f"{origin} rendering was cancelled")
    raise TemplateError(
        f"{origin} stopped the rendering process (over {limits.memory_bytes >> 20:,} MiB of memory?)"
    )


# ---- the helper's side ----------------------------------------------------------------
def _serve(conn: Connection) -> None:
    import resource

    from walkthrough.inspect.jinja_env import render_here

    conn.send_bytes(READY)
    capped = 0
    while True:
        try:
            request = json.loads(conn.recv_bytes())
        except EOFError:
            return
        if request["memory_bytes"] != capped:
            capped = request["memory_bytes"]
            resource.setrlimit(resource.RLIMIT_AS, (capped, capped))
        limits = Limits(request["seconds"], request["max_chars"], capped)
        now = request["now"]
        reply: dict[str, Any]
        try:
            text = render_here(
                request["source"],
                request["messages"],
                origin=request["origin"],
                limits=limits,
                now=None if now is None else datetime.fromisoformat(now),
                **request["variables"],
            )
            reply = {"text": text}
        except TemplateError as exc:
            reply = {"error": str(exc), "restart": "out of memory" in str(exc)}
        except MemoryError:
            reply = {"error": f"{request['origin']} ran out of memory", "restart": True}
        except Exception as exc:  # noqa: BLE001 (anything inside untrusted code is the template's fault)
            reply = {"error": f"{request['origin']} failed: {type(exc).__name__}", "restart": True}
        try:
            data = json.dumps(reply, ensure_ascii=True).encode("ascii")
        except MemoryError:
            data = json.dumps({"error": f"{request['origin']} ran out of memory", "restart": True}).encode()
        conn.send_bytes(data)
        if reply.get("restart"):
            return


if __name__ == "__main__":
    _serve(Connection(int(sys.argv[1])))
