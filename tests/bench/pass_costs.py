"""Where the numpy engine's time goes in a prefill and in a decode pass, and the most any change outside its weight
products could give, beside llama.cpp's speed in the same run.

    python tests/bench/pass_costs.py [MODEL.gguf] [--prompt 128] [--tokens 16] [--rounds 3]

With no MODEL, SmolLM2-135M-Instruct Q4_1 (SMOLLM2_GGUF). Issue 29 asks the engine for 1.0x llama.cpp's prefill
and 0.3x its decode (`bench_numpy_speed.py`, whose rounds this repeats: one thread each, F32 KV cache, no flash
attention, tokens per CPU second of this process, best round). Each round also runs the engine once more with its
parts timed, and splits each phase into:

- the weight products (`ops.linear` by rows, `ops.linear_columns` by columns, the output head included);
- attention (`ops.attention`: the products with the cache and the masks), its softmax (`ops.cache_softmax`) apart;
- the rounding of the products' inputs to the weights' "vec_dot" format (8-bit for quantized weights);
- the rest (norms, RoPE, the gated unit, residual adds, the cache, the meter): the pass less the above.

"Products alone" is the rate the engine would reach if everything but its weight products took no time. Where that
is under a goal, no change outside the products can meet it. Timing a part costs about a microsecond a call, so
the timed pass runs a little slower than the plain one; the split is taken from the timed pass, the rates from the
plain one.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy loads, as walkthrough.cli.main does
REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "tests" / "bench"))

import numpy as np
from bench_numpy_speed import cpu_seconds, setup, time_engine

from walkthrough.engine.glassbox import meter, ops, quantdot
from walkthrough.engine.glassbox.model import Model
from walkthrough.engine.glassbox.session import Session

# (module, function) -> the part its CPU time counts towards; attention's time includes its softmax's. A product's
# input is rounded by `quantdot.rounded_q8_1` against Q4_1/Q5_1 weights, by `round_activations` as the meter calls it
# against the others (Q8_0, Q8_K for the k-quants, F16; for F32 weights it returns its input).
TIMED = {(ops, "linear"): "products", (ops, "linear_columns"): "products", (ops, "attention"): "attention",
         (ops, "cache_softmax"): "softmax", (quantdot, "rounded_q8_1"): "rounding",
         (meter, "round_activations"): "rounding"}
PARTS = ("products", "attention", "softmax", "rounding", "rest")
LABELS = {"products": "weight products", "attention": "attention, less its softmax", "softmax": "softmax",
          "rounding": "rounding the products' input", "rest": "the rest"}


@contextmanager
def timed_parts(spent: Counter) -> Iterator[None]:
    """Count the CPU seconds of each `TIMED` function into spent[part] while inside; restore them after."""
    originals = {key: getattr(*key) for key in TIMED}

    def timing(fn: Callable, part: str) -> Callable:
        def run(*args, **kwargs):
            began = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[part] += time.process_time() - began
        return run

    try:
        for (module, name), part in TIMED.items():
            setattr(module, name, timing(originals[module, name], part))
        yield
    finally:
        for (module, name), fn in originals.items():
            setattr(module, name, fn)


def split_passes(model: Model, ids: list[int], tokens: int) -> tuple[dict[str, float], dict[str, float]]:
    """(prefill, decode) CPU seconds of one session by part: `ids` in one pass, then `tokens` greedy decode passes
    (their sum). "attention" excludes its softmax; "rest" is each phase's time less the timed parts."""
    session = Session(model, kv_type="f32")
    phases = []
    with timed_parts(spent := Counter()):
        total = cpu_seconds(lambda: session.feed(ids, phase="prefill"))
        phases.append((total, Counter(spent)))
        spent.clear()
        total = 0.0
        for _ in range(tokens):
            token = [int(np.argmax(session.last_logits))]
            total += cpu_seconds(lambda t=token: session.feed(t, phase="decode"))
        phases.append((total, Counter(spent)))
    out = []
    for total, parts in phases:
        parts["attention"] -= parts["softmax"]
        parts["rest"] = total - sum(parts[p] for p in PARTS if p != "rest")
        out.append({p: parts[p] for p in PARTS} | {"total": total})
    return out[0], out[1]


def report(name: str, n_prompt: int, tokens: int, llama: tuple[float, float], numpy_rates: tuple[float, float],
           split: tuple[dict[str, float], dict[str, float]]) -> list[str]:
    """The lines printed: both engines' rates, the engine's split per phase, and what the products alone allow."""
    per = (n_prompt, tokens)  # tokens per phase: the split is of the whole phase, shown per prompt and per pass

    def row(label: str, cells: list[str]) -> str:
        return f"  {label:30s}" + "".join(f"{c:>28s}" for c in cells)

    lines = [(f"{name}: {n_prompt} prompt tokens, {tokens} decode passes, one thread each, F32 KV cache; "
              "best round, CPU time"),
             row("", ["prefill, the prompt", "decode, a pass"])]
    for label, rates in (("llama.cpp", llama), ("numpy", numpy_rates)):
        lines.append(row(label, [f"{1e3 * n / r:,.1f} ms {r:6.1f} tok/s" for n, r in zip((n_prompt, 1), rates)]))
    lines.append(row("numpy / llama.cpp", [f"{a / b:.2f}x" for a, b in zip(numpy_rates, llama)]))
    for part in PARTS:
        lines.append(row("  " + LABELS[part], [f"{1e3 * s[part] / unit:,.1f} ms {100 * s[part] / s['total']:5.1f} %"
                                               for s, unit in zip(split, (1, per[1]))]))
    alone = [per[i] / split[i]["products"] for i in (0, 1)]
    lines.append(row("products alone", [f"{a:.1f} tok/s = {a / r:.2f}x" for a, r in zip(alone, llama)]))
    for i, (phase, goal) in enumerate((("prefill", 1.0), ("decode", 0.3))):
        budget = per[i] / (goal * llama[i]) - split[i]["products"]  # seconds left for all but the products
        now = split[i]["total"] - split[i]["products"]
        unit, what = (1, "the prompt") if i == 0 else (per[1], "a pass")
        lines.append(f"  {phase} at {goal}x llama.cpp leaves {1e3 * budget / unit:,.1f} ms {what} for all but the "
                     f"products; they take {1e3 * now / unit:,.1f} ms"
                     + ("" if budget > 0 else " (no change outside the products can meet this goal)"))
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", nargs="?", type=Path)
    ap.add_argument("--prompt", type=int, default=128, help="prompt tokens prefilled in one pass")
    ap.add_argument("--tokens", type=int, default=16, help="decode passes timed")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    ready = setup(args.model, args.prompt)
    if ready is None:
        return 2
    f, ids, new_llama = ready
    model = Model(f)

    def new_numpy() -> Session:
        return Session(model, kv_type="f32")

    for new in (new_llama, new_numpy):  # load, dequantize, pack, check and copy lanes: first-use work, not timed
        new().feed(ids, phase="prefill")
    best_llama, best_numpy, best_split = (0.0, 0.0), (0.0, 0.0), None
    for r in range(args.rounds):
        llama, numpy_rates = time_engine(new_llama, ids, args.tokens), time_engine(new_numpy, ids, args.tokens)
        split = split_passes(model, ids, args.tokens)
        print(f"  round {r + 1}: llama.cpp {llama[0]:.1f} / {llama[1]:.1f} tok/s, numpy {numpy_rates[0]:.1f} / "
              f"{numpy_rates[1]:.1f} tok/s (prefill / decode)", flush=True)
        best_llama = tuple(max(a, b) for a, b in zip(best_llama, llama))
        best_numpy = tuple(max(a, b) for a, b in zip(best_numpy, numpy_rates))
        if best_split is None or split[0]["total"] + split[1]["total"] < best_split[0]["total"] + best_split[1]["total"]:
            best_split = split
    print("\n".join(report(f.path.name, len(ids), args.tokens, best_llama, best_numpy, best_split)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
