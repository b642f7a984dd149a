"""Op-by-op differ: one prompt through llama.cpp and the numpy engine, the first op of each layer that differs.

    python tests/bench/op_diff.py [MODEL.gguf] [--tokens N] [--all] [--exact-products] [--kv f16]

With no MODEL, SmolLM2-135M-Instruct Q4_1 (SMOLLM2_GGUF, as tests/bench/real_weights.py).
The prompt is the default request rendered with the file's template (its first N tokens with
--tokens), run as one pass by both engines: llama.cpp (llama-cpp-python) on one thread with an
F32 KV cache (F16 with --kv f16) and flash attention off, its intermediates read through the eval
callback; the numpy engine with the same cache type, its intermediates shown to a probe (`Meter.look`). Printed per
layer: the first op whose output is not bitwise llama.cpp's, with the count of differing values,
the largest difference and the largest distance in float32 steps (ulps); "(inputs identical)"
when everything before it agreed, i.e. that op itself computes differently. --all prints every
op of every layer. See docs/op-diff.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy loads, as walkthrough.cli.main does

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))

from real_weights_support import find_smollm2, request_ids

from walkthrough.engine import op_diff
from walkthrough.engine.glassbox.model import Model
from walkthrough.engine.glassbox.session import Session
from walkthrough.engine.llama.session import MICRO_BATCH
from walkthrough.inspect.gguf import open_gguf


def llama_tensors(path: Path, ids: list[int], kv_type: str = "f32") -> tuple[op_diff.Tensors, float]:
    """llama.cpp's named intermediates of one pass over ids (1 thread, no flash attention), and its seconds."""
    from walkthrough.engine.llama.model import LlamaModel
    from walkthrough.engine.llama.session import LlamaSession

    model = LlamaModel.open(path, n_threads=1)
    session = LlamaSession(model, kv_type=kv_type, flash_attention=False, named=op_diff.NAMES,
                           n_ctx=max(256, len(ids)))
    step = session.feed(ids, phase="prefill", all_logits=True)
    tensors = session.capture.tensors
    session.close()
    model.close()
    return tensors, step.seconds


def numpy_tensors(path: Path, ids: list[int], exact: bool, kv_type: str = "f32") -> tuple[op_diff.Tensors, float]:
    """The numpy engine's intermediates of the same pass (the same cache type), and its seconds."""
    model = Model(open_gguf(path), exact_products=exact)
    seen: op_diff.Tensors = {}
    model.probe = lambda name, a: seen.setdefault(name, []).append(np.array(a, np.float32))
    step = Session(model, kv_type=kv_type).feed(ids, phase="prefill", all_logits=True)
    return seen, step.seconds


def report(ours: op_diff.Tensors, theirs: op_diff.Tensors, n_layers: int, n_tokens: int, every: bool,
           arch: str = "") -> int:
    """Print the first difference per layer (every op with `every`); returns the number of layers that differ."""
    positions = np.arange(n_tokens)
    clean = True  # every op so far agreed bit for bit
    parted = 0
    for layer in [*range(n_layers), -1]:
        diffs = op_diff.layer_diffs(ours, theirs, layer, positions, arch)
        first = op_diff.first_difference(diffs)
        where = f"layer {layer:2d}" if layer >= 0 else "output  "
        if every:
            for d in diffs:
                print(f"  {where}  {d.describe()}")
        elif first is None:
            print(f"  {where}  identical ({len(diffs)} ops)")
        else:
            note = " (inputs identical)" if clean else ""
            print(f"  {where}  first difference at {first.describe()}{note}")
        parted += first is not None
        clean = clean and first is None
        if not diffs:
            print(f"  {where}  nothing to compare (names not found on one side)")
    return parted


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", nargs="?", type=Path)
    ap.add_argument("--tokens", type=int, default=0,
                    help=f"use only the prompt's first N tokens (at most {MICRO_BATCH}: one llama.cpp micro-batch)")
    ap.add_argument("--all", action="store_true", help="print every op of every layer")
    ap.add_argument("--exact-products", action="store_true", help="the engine's exact quantized products (quantdot)")
    ap.add_argument("--kv", choices=("f32", "f16"), default="f32", help="KV cache type of both engines")
    args = ap.parse_args(argv)
    path = args.model or find_smollm2()
    if path is None or not path.is_file():
        print(f"{path or 'SmolLM2-135M-Instruct.Q4_1.gguf'}: no such file; give a GGUF or set SMOLLM2_GGUF",
              file=sys.stderr)
        return 2
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        print("op_diff needs llama-cpp-python (pip install 'walkthrough[llama]')", file=sys.stderr)
        return 2
    f = open_gguf(path)
    ids = request_ids(f)[: min(args.tokens or MICRO_BATCH, MICRO_BATCH)]
    t0 = time.perf_counter()
    theirs, their_s = llama_tensors(path, ids, args.kv)
    ours, our_s = numpy_tensors(path, ids, args.exact_products, args.kv)
    n_layers = 1 + max(int(k.rpartition("-")[2]) for k in ours if k.rpartition("-")[2].isdigit())
    print(f"{path.name}: one pass of {len(ids)} tokens, {args.kv.upper()} KV cache, no flash attention, 1 thread "
          f"(llama.cpp {their_s:.2f} s, numpy {our_s:.2f} s; products: "
          f"{'exact (quantdot)' if args.exact_products else 'rounded input'})")
    parted = report(ours, theirs, n_layers, len(ids), args.all, str(f.get("general.architecture") or ""))
    a, b = ours["result_output"][-1].reshape(len(ids), -1), theirs["result_output"][-1].reshape(len(ids), -1)
    top1 = float(np.mean(a.argmax(axis=1) == b.argmax(axis=1)))
    print(f"  logits: max |d| {np.abs(a - b).max():.3g}, top-1 agreement {top1:.2%}; "
          f"{parted} of {n_layers + 1} layers differ ({time.perf_counter() - t0:.1f} s in all)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
