"""Time to first token from a cold start (a fresh process opening the file) and from a warm one.

Opening a model costs something before any token: starting Python and
importing the engine, reading the header and mapping the file, then the first
pass, which dequantizes every weight it touches from the mapped bytes (and
faults those pages in). A server that keeps the model loaded (ollama's
`keep_alive`, a llama.cpp server left running) pays that once; a model that
was unloaded pays it again.

`cold_start` measures it for real: it starts this module in a new process
(`python -m walkthrough.engine.serving.coldstart MODEL`, prompt ids on stdin), which
opens the file, runs the prompt and prints its timings as one JSON line;
the parent adds the wall time from spawning the process to reading that line.
`warm_start` runs the same prompt in this process on a model already loaded
(weights dequantized, nothing in the KV cache). What neither can undo is the
operating system's page cache: a file read recently stays in memory, so
"cold" here is a cold process on a warm disk cache (dropping that cache
needs root and touches every program on the machine).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from walkthrough.errors import WalkthroughError

COLD_TIMEOUT = 600.0  # seconds a cold start may take before it is given up
CHECK_EVERY = 0.1  # seconds between checks whether the cold start was stopped
_CHILDREN: set[subprocess.Popen] = set()  # cold starts running now (kill_children ends them)


@dataclass(frozen=True)
class StartTimes:
    """Seconds to the first token of one prompt, split where the time went."""

    first_token: float  # total: from the start (spawn, or the call) to the first chosen token
    imports: float = 0.0  # importing the engine (cold only)
    open: float = 0.0  # header, mmap, model (cold only)
    passes: float = 0.0  # the prompt's passes and the first draw (dequantizing weights on a cold start)
    held: int = 0  # bytes of dequantized weights the fresh process held at its first token (cold only)
    budget: int = 0  # its budget for them (--max-memory; cold only)

    def to_json(self) -> dict[str, float]:
        return {k: round(v, 4) for k, v in self.__dict__.items()}


def _first_token(model, ids: list[int], *, chunk: int | None, kv_type: str, session=None,
                 cancelled: Callable[[], bool] | None = None) -> float:
    """Seconds from sending `ids` to `session` (a new one by default) to its first chosen token."""
    from walkthrough.engine.glassbox.session import Session, stop_when
    from walkthrough.engine.sampler import Sampler

    began = time.perf_counter()
    session = session or Session(model, kv_type=kv_type, auto_checkpoints=False)
    for _ in session.request(ids, chunk=chunk, sampler=Sampler.greedy(), progress=stop_when(cancelled)):
        pass
    return time.perf_counter() - began


def warm_start(model, ids: list[int], *, chunk: int | None = None, kv_type: str = "f16",
               cancelled: Callable[[], bool] | None = None) -> StartTimes:
    """First token of `ids` on a model this process has loaded and used (no KV cache kept).

    Raises:
        Cancelled: `cancelled()` said so, checked at every layer.
    """
    seconds = _first_token(model, ids, chunk=chunk, kv_type=kv_type, cancelled=cancelled)
    return StartTimes(first_token=seconds, passes=seconds)


def kept_start(model, ids: list[int], *, chunk: int | None = None, kv_type: str = "f16",
               cancelled: Callable[[], bool] | None = None) -> StartTimes:
    """First token of `ids` sent again to a session that holds them (a server that kept its KV cache).

    Raises:
        Cancelled: `cancelled()` said so, checked at every layer.
    """
    from walkthrough.engine.glassbox.session import Session

    session = Session(model, kv_type=kv_type)
    _first_token(model, ids, chunk=chunk, kv_type=kv_type, session=session, cancelled=cancelled)
    seconds = _first_token(model, ids, chunk=chunk, kv_type=kv_type, session=session, cancelled=cancelled)
    return StartTimes(first_token=seconds, passes=seconds)


def cold_start(path: str | Path, ids: list[int], *, chunk: int | None = None, kv_type: str = "f16",
               max_memory: int | None = None, cancelled: Callable[[], bool] = lambda: False) -> StartTimes:
    """First token of `ids` in a fresh process that opens `path`.

    Args:
        max_memory: the fresh process's budget for dequantized weights (the app's --max-memory; None: the
            engine's default there, a share of the free memory).
        cancelled: checked every `CHECK_EVERY` seconds; when it says so, the child is killed (an app that
            quits does not wait for a cold start to finish).

    Raises:
        WalkthroughError: the child failed or took longer than COLD_TIMEOUT.
        Cancelled: `cancelled()` said so (the child was killed).
    """
    argv = [sys.executable, "-m", "walkthrough.engine.serving.coldstart", str(path), "--kv-type", kv_type]
    if chunk:
        argv += ["--chunk", str(chunk)]
    if max_memory:
        argv += ["--max-memory", str(max_memory)]
    began = time.perf_counter()
    with subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True) as child:
        _CHILDREN.add(child)
        try:
            given: str | None = json.dumps(ids)
            while True:
                try:
                    stdout, stderr = child.communicate(given, timeout=CHECK_EVERY)
                    break
                except subprocess.TimeoutExpired:
                    given = None  # sent with the first call; a retry carries on where it stopped
                    late = time.perf_counter() - began > COLD_TIMEOUT
                    if late or cancelled():
                        child.kill()
                        child.communicate()
                        if not late:
                            from walkthrough.engine.glassbox.session import Cancelled

                            raise Cancelled() from None
                        raise WalkthroughError(f"the cold start took over {COLD_TIMEOUT:.0f} s; try a smaller prompt") \
                            from None
        finally:
            _CHILDREN.discard(child)
    wall = time.perf_counter() - began
    lines = stdout.strip().splitlines()
    if child.returncode != 0 or not lines:
        last = (stderr.strip().splitlines() or ["no output"])[-1]
        raise WalkthroughError(f"the cold-start process failed: {last}")
    times = json.loads(lines[-1])
    return StartTimes(first_token=wall, imports=times["imports"], open=times["open"], passes=times["passes"],
                      held=times["held"], budget=times["budget"])


def child_parser() -> argparse.ArgumentParser:
    """The child's options (`cold_start` writes them), spelled in full only."""
    parser = argparse.ArgumentParser(prog="python -m walkthrough.engine.serving.coldstart", allow_abbrev=False)
    parser.add_argument("model")
    parser.add_argument("--chunk", type=int, default=None)
    parser.add_argument("--kv-type", default="f16")
    parser.add_argument("--max-memory", type=int, default=None)  # bytes
    return parser


def main(argv: list[str] | None = None) -> int:
    """The child: open the file, run the prompt read from stdin, print the timings."""
    began = time.perf_counter()
    from walkthrough.engine.engines import load_model
    from walkthrough.inspect.gguf import open_gguf

    imported = time.perf_counter()
    args = child_parser().parse_args(argv)
    ids = [int(i) for i in json.loads(sys.stdin.read())]
    opened_at = time.perf_counter()
    model = load_model("numpy", open_gguf(args.model), max_memory=args.max_memory)
    opened = time.perf_counter() - opened_at
    passes = _first_token(model, ids, chunk=args.chunk, kv_type=args.kv_type)
    print(json.dumps({"imports": imported - began, "open": opened, "passes": passes,
                      "held": model.weights.cached_bytes, "budget": model.weights.max_cache_bytes}))
    return 0


if __name__ == "__main__":
    sys.exit(main())


def kill_children() -> None:
    """Kill every cold start still running (the app calls it as it ends: a child is not left behind)."""
    for child in list(_CHILDREN):
        child.kill()
