"""Prefill and decode speed of the numpy engine beside llama.cpp's, one thread each, in one run.

    python tests/bench/bench_numpy_speed.py [MODEL.gguf] [--prompt 128] [--tokens 8] [--rounds 2] [--exact-products]

With no MODEL, SmolLM2-135M-Instruct Q4_1 (SMOLLM2_GGUF). Each round times, in turn (so a busy
machine slows all alike): a prefill of the default request's first `--prompt` tokens in one pass,
then `--tokens` greedy decode passes, for llama.cpp (`LlamaSession`, one thread, F32 KV cache, no
flash attention) and the numpy engine (`Session`, F32 cache; OpenBLAS held to one thread), and with
--exact-products the numpy engine multiplying quantized weights exactly as ggml (`quantdot`) too.
A first untimed pass loads and dequantizes weights. Figures are tokens per CPU second of this
process (with one thread each, the work itself: steadier than wall time on a shared machine),
best round; ratios are numpy / llama.cpp, of the best rounds and (steadier on a shared machine) the median
of each round's own ratio. Issue 29's goals: prefill >= 1.0x, decode >= 0.3x.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy loads, as walkthrough.cli.main does
REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))

import numpy as np
from real_weights_support import find_smollm2, request_ids

from walkthrough.engine.glassbox.model import Model
from walkthrough.engine.glassbox.session import Session
from walkthrough.inspect.gguf import GGUFFile, open_gguf


def cpu_seconds(run: Callable[[], object]) -> float:
    t = time.process_time()
    run()
    return time.process_time() - t


def time_engine(new_session: Callable[[], object], ids: list[int], tokens: int) -> tuple[float, float]:
    """(prefill tokens/s, decode tokens/s) of one session: ids in one pass, then `tokens` greedy passes."""
    session = new_session()
    prefill = cpu_seconds(lambda: session.feed(ids, phase="prefill"))
    decode = 0.0
    for _ in range(tokens):
        token = [int(np.argmax(session.last_logits))]
        decode += cpu_seconds(lambda t=token: session.feed(t, phase="decode"))
    return len(ids) / prefill, tokens / decode


def setup(model: Path | None, prompt: int) -> tuple[GGUFFile, list[int], Callable[[], object]] | None:
    """The file (`model`, or SmolLM2 when None), the first `prompt` ids of its default request, and a maker of
    llama.cpp sessions on it (one thread, F32 KV cache, no flash attention); None, with the reason printed, when
    the file or llama-cpp-python is missing."""
    path = model or find_smollm2()
    if path is None or not path.is_file():
        print("no model: give a GGUF or set SMOLLM2_GGUF", file=sys.stderr)
        return None
    try:
        from walkthrough.engine.llama.model import LlamaModel
        from walkthrough.engine.llama.session import LlamaSession
    except ImportError:
        print("this benchmark needs llama-cpp-python (pip install 'walkthrough[llama]')", file=sys.stderr)
        return None
    f = open_gguf(path)
    llama = LlamaModel(f, n_threads=1)
    return f, request_ids(f)[:prompt], lambda: LlamaSession(llama, kv_type="f32", flash_attention=False)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", nargs="?", type=Path)
    ap.add_argument("--prompt", type=int, default=128, help="prompt tokens prefilled in one pass")
    ap.add_argument("--tokens", type=int, default=8, help="decode passes timed")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--exact-products", action="store_true", help="also time quantdot's exact products")
    args = ap.parse_args(argv)
    ready = setup(args.model, args.prompt)
    if ready is None:
        return 2
    f, ids, new_llama = ready
    path = f.path
    fast, exact = Model(f), Model(f, exact_products=True)
    engines = {"llama.cpp": new_llama, "numpy": lambda: Session(fast, kv_type="f32")}
    if args.exact_products:
        engines["numpy, exact products"] = lambda: Session(exact, kv_type="f32")
    for new in engines.values():  # load, dequantize, pack, check and copy lanes: first-use work, not timed
        new().feed(ids, phase="prefill")
    best: dict[str, tuple[float, float]] = {}
    ratios: dict[str, list[tuple[float, float]]] = {name: [] for name in engines}  # per round, against llama.cpp
    for r in range(args.rounds):
        rates = {}
        for name, new in engines.items():
            pre, dec = rates[name] = time_engine(new, ids, args.tokens)
            print(f"  round {r + 1}  {name:22s} prefill {pre:7.1f} tok/s  decode {dec:6.1f} tok/s", flush=True)
            old = best.get(name, (0.0, 0.0))
            best[name] = (max(old[0], pre), max(old[1], dec))
        for name, (pre, dec) in rates.items():
            ratios[name].append((pre / rates["llama.cpp"][0], dec / rates["llama.cpp"][1]))
    ref_pre, ref_dec = best["llama.cpp"]
    print(f"{path.name}: prompt {len(ids)} tokens, {args.tokens} decode passes, 1 thread, F32 KV, best of "
          f"{args.rounds} rounds (tokens per CPU second); last columns: the median over rounds of each round's "
          "ratio (both engines timed in turn, so a slow spell of the machine weighs on both)")
    for name, (pre, dec) in best.items():
        pre_mid, dec_mid = (float(np.median([r[i] for r in ratios[name]])) for i in (0, 1))
        print(f"  {name:22s} prefill {pre:7.1f} tok/s ({pre / ref_pre:6.3f}x)  decode {dec:6.1f} tok/s "
              f"({dec / ref_dec:6.3f}x)   per round: prefill {pre_mid:6.3f}x  decode {dec_mid:6.3f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
