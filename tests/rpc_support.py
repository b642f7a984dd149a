"""For the RPC tests: workers (`walkthrough worker`) on free localhost ports, each in its own process group.

`needs_rpc` skips where llama-cpp-python or its RPC backend is absent, with the reason. `workers(n)` is a
context manager that starts n workers, waits (bounded) until each answers HELLO, yields their endpoints and
always kills their process groups on the way out.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from walkthrough.engine.llama import rpc
from walkthrough.errors import WalkthroughError

REPO = Path(__file__).resolve().parent.parent
START_SECONDS = 30.0


def _rpc_missing() -> str | None:
    try:
        rpc.libraries()
    except WalkthroughError as exc:
        return str(exc)
    return None


_MISSING = _rpc_missing()
needs_rpc = pytest.mark.skipif(_MISSING is not None, reason=f"no RPC backend here: {_MISSING}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_worker(port: int, threads: int = 1) -> subprocess.Popen:
    """`walkthrough worker --port PORT` in a new session (its own process group)."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.Popen([sys.executable, "-m", "walkthrough", "worker", "--port", str(port),
                             "--threads", str(threads)], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True)


def stop(proc: subprocess.Popen) -> None:
    """Kill a worker's process group and reap it (bounded)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


def wait_ready(proc: subprocess.Popen, endpoint: rpc.Endpoint) -> None:
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"worker exited: {proc.stderr.read().decode(errors='replace')}")
        with contextlib.suppress(WalkthroughError):
            rpc.probe(endpoint, timeout=2.0)
            return
        time.sleep(0.2)
    raise RuntimeError(f"worker {endpoint} did not answer within {START_SECONDS} s")


def free_llama_objects() -> None:
    """Close every llama.cpp session and model over RPC workers this process still holds, while the workers
    run: ggml ends the process when it frees a buffer on a worker that is gone. Models on this host alone
    (other tests' cached ones) are left as they are."""
    import gc

    from walkthrough.engine.llama.model import LlamaModel
    from walkthrough.engine.llama.session import LlamaSession

    gc.collect()
    objects = gc.get_objects()
    for o in objects:
        if isinstance(o, LlamaSession) and o.model.rpc:
            o.close()
    for o in objects:
        if isinstance(o, LlamaModel) and o.rpc:
            o.close()


@contextlib.contextmanager
def workers(n: int) -> Iterator[list[tuple[rpc.Endpoint, subprocess.Popen]]]:
    started: list[tuple[rpc.Endpoint, subprocess.Popen]] = []
    try:
        for _ in range(n):
            endpoint = rpc.Endpoint("127.0.0.1", free_port())
            started.append((endpoint, start_worker(endpoint.port)))
        for endpoint, proc in started:
            wait_ready(proc, endpoint)
        yield started
    finally:
        try:
            free_llama_objects()
        finally:  # the workers go even if closing failed
            for _, proc in started:
                stop(proc)
