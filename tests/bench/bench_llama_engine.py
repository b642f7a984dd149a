"""Seconds per decoded token: the numpy engine, the llama.cpp engine, and plain llama.cpp without the eval callback.

For each MODEL (default: the bundled tiny model and the Qwen3.6-35B-A3B-shaped
file of tests/bench/qwen36_shaped.py, written first if missing), one load, then
in turns so a busy machine slows all of them alike:

- plain: llama-cpp-python's low-level API with no eval callback (llama_decode of
  one token at a time, the same context settings: threads, flash attention auto,
  F16 KV cache); the baseline the callback's cost is measured against;
- llama.cpp engine: `LlamaSession` (the eval callback reading experts, router
  weights and KV cells, `Step` records, bytes counted);
- llama.cpp engine with attention weights and per-layer progress (no flash attention);
- numpy engine: `Session`, fewer tokens (`--numpy-tokens`): it takes seconds per token on big files.

Each run prefills the same `--prompt` ids and decodes `--tokens` more (greedy,
never stopping early). The figures are the median wall seconds of the decode
passes and the median CPU seconds of this process around each of them (with one
llama.cpp thread, the CPU seconds are the work itself, steadier than wall time
on a busy machine); ratios are against the llama.cpp engine measured in the same run. Goals (issue 14):
the engine at least 50x faster than numpy per decoded token on the 35B-shaped
file, and the callback costing at most 20% over plain.

    python tests/bench/bench_llama_engine.py [MODEL ...] [--prompt 8] [--tokens 6] [--numpy-tokens 2] [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as walkthrough.cli.main does, before numpy loads
sys.path.insert(0, str(Path(__file__).resolve().parent))
import qwen36_shaped

from walkthrough.costs.measured import spread_ids
from walkthrough.engine.glassbox.model import Model
from walkthrough.engine.glassbox.session import Session
from walkthrough.engine.llama.model import LlamaModel
from walkthrough.engine.llama.session import KV_TYPES, LlamaSession
from walkthrough.inspect.locate import BUNDLED_MODEL

Timing = tuple[float, float]  # (wall seconds, CPU seconds of this process) of one decode pass


def _timed(run) -> tuple[Timing, object]:
    wall, cpu = time.perf_counter(), time.process_time()
    out = run()
    return (time.perf_counter() - wall, time.process_time() - cpu), out


def plain_decode(model: LlamaModel, ids: list[int], tokens: int) -> list[Timing]:
    """Times of each decode pass with llama.cpp alone: no eval callback, greedy argmax in numpy."""
    import numpy as np

    lib = model.lib
    params = lib.llama_context_default_params()
    params.n_ctx = params.n_batch = len(ids) + tokens + 1
    params.n_threads = params.n_threads_batch = model.n_threads
    params.type_k = params.type_v = KV_TYPES["f16"]
    params.no_perf = True
    ctx = lib.llama_init_from_model(model.ptr, params)
    n_vocab = model.config.n_vocab
    try:
        arr = (lib.llama_token * len(ids))(*ids)
        assert lib.llama_decode(ctx, lib.llama_batch_get_one(arr, len(ids))) == 0
        token = int(np.argmax(np.ctypeslib.as_array(lib.llama_get_logits_ith(ctx, -1), shape=(n_vocab,))))
        seconds = []
        for _ in range(tokens):
            one = (lib.llama_token * 1)(token)

            def run(one=one):
                assert lib.llama_decode(ctx, lib.llama_batch_get_one(one, 1)) == 0
                return np.ctypeslib.as_array(lib.llama_get_logits_ith(ctx, -1), shape=(n_vocab,)).copy()

            timing, logits = _timed(run)
            seconds.append(timing)
            token = int(np.argmax(logits))
        return seconds
    finally:
        lib.llama_free(ctx)


def session_decode(session, ids: list[int], tokens: int, **feed) -> list[Timing]:
    """Times of each decode pass of a Session (either engine: the whole `feed`, its Step built, no sampler:
    greedy argmax as in `plain_decode`), never stopping early."""
    import numpy as np

    token = int(np.argmax(list(session.prefill(ids))[-1].logits))
    times = []
    for _ in range(tokens):
        timing, step = _timed(lambda token=token: session.feed([token], phase="decode", **feed))
        times.append(timing)
        token = int(np.argmax(step.logits))
    return times


def bench(path: Path, args: argparse.Namespace) -> None:
    began = time.perf_counter()
    model = LlamaModel.open(path, n_threads=args.threads)
    print(f"\n{path.name}: llama.cpp loaded in {time.perf_counter() - began:.1f} s, "
          f"{model.n_threads} thread(s)", flush=True)
    ids = spread_ids(args.prompt, model.config.n_vocab, model.config.end_ids)
    n_ctx = len(ids) + args.tokens + 1
    runs: dict[str, list[Timing]] = {"plain": [], "engine": [], "engine+attention+progress": []}
    for _ in range(args.rounds):
        runs["plain"] += plain_decode(model, ids, args.tokens)
        runs["engine"] += session_decode(LlamaSession(model, n_ctx=n_ctx), ids, args.tokens)
        runs["engine+attention+progress"] += session_decode(
            LlamaSession(model, n_ctx=n_ctx, record_attention=True), ids, args.tokens, progress=lambda d, t: None)
    model.close()
    if args.numpy_tokens:
        runs["numpy"] = session_decode(Session(Model.open(path)), ids, args.numpy_tokens)
    medians = {name: (statistics.median(t[0] for t in times), statistics.median(t[1] for t in times))
               for name, times in runs.items()}
    wall, cpu = medians["engine"]
    for name, (w, c) in medians.items():
        print(f"  {name:26s} {w * 1e3:10.1f} ms wall, {c * 1e3:10.1f} ms CPU per decoded token "
              f"(median of {len(runs[name])}); {w / wall:6.2f} x / {c / cpu:6.2f} x the engine", flush=True)
    plain = medians["plain"]
    print("  callback overhead over plain (wall, CPU): engine "
          f"{wall / plain[0] - 1:+.0%}, {cpu / plain[1] - 1:+.0%}; with attention and progress "
          f"{medians['engine+attention+progress'][0] / plain[0] - 1:+.0%}, "
          f"{medians['engine+attention+progress'][1] / plain[1] - 1:+.0%}")
    if "numpy" in runs:
        print(f"  numpy / llama.cpp engine (wall, CPU): {medians['numpy'][0] / wall:.0f}x, "
              f"{medians['numpy'][1] / cpu:.0f}x")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", type=Path)
    ap.add_argument("--prompt", type=int, default=8, help="prompt tokens (default 8)")
    ap.add_argument("--tokens", type=int, default=6, help="decoded tokens per llama.cpp run (default 6)")
    ap.add_argument("--numpy-tokens", type=int, default=2, help="decoded tokens for numpy (0 skips it)")
    ap.add_argument("--rounds", type=int, default=2, help="turns of the llama.cpp runs (default 2)")
    ap.add_argument("--threads", type=int, help="llama.cpp threads (default: the engine's)")
    args = ap.parse_args(argv)
    models = args.models or [BUNDLED_MODEL, qwen36_shaped.DEFAULT_PATH]
    for path in models:
        if path == qwen36_shaped.DEFAULT_PATH and not path.exists():
            qwen36_shaped.write(path)
        bench(path, args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
