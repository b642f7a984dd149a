"""Speed of the engine's k-quant dequantizer (engine/glassbox/dequant_k.py) beside gguf.quants', in one run.

    python tests/bench/bench_dequant_k.py [MODEL.gguf] [--rounds 3]

With no MODEL, SmolLM2-135M-Instruct (SMOLLM2_GGUF). Two sets of real blocks:

1. a file llama.cpp writes: MODEL requantized to Q4_K_M by llama_model_quantize (into a temporary
   folder), whose Q4_K and Q6_K tensors (and any other k-quant it chose) are decoded whole;
2. every k-quant type: MODEL's largest matrix, dequantized, then quantized to that type by
   ggml_quantize_chunk (llama.cpp's quantizer).

Each tensor is decoded by gguf.quants.dequantize and by dequant_k, alternately, best of --rounds
(so a busy machine slows both alike); the values must be the same bits. Figures: millions of
values per second of CPU time of this process (one BLAS thread) and the ratio ours / gguf.quants.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))

import numpy as np
from gguf import quants
from gguf.constants import GGML_QUANT_SIZES
from gguf.constants import GGMLQuantizationType as Q
from real_weights_support import find_smollm2

from walkthrough.engine.glassbox.dequant_k import K_FAST
from walkthrough.inspect.gguf import open_gguf


def best_cpu(run, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        t = time.process_time()
        run()
        best = min(best, time.process_time() - t)
    return best


def requantize(src: Path, dst: Path) -> None:
    """MODEL -> Q4_K_M by llama.cpp's llama_model_quantize (the file llama-quantize would write)."""
    import llama_cpp.llama_cpp as llama_c

    params = llama_c.llama_model_quantize_default_params()
    params.ftype = llama_c.LLAMA_FTYPE_MOSTLY_Q4_K_M
    params.allow_requantize = True
    params.nthread = 1
    sys.stderr.flush()
    saved = os.dup(2)
    with open(os.devnull, "w") as quiet:  # llama.cpp logs every tensor (and each fallback type) on fd 2
        os.dup2(quiet.fileno(), 2)
        try:
            failed = llama_c.llama_model_quantize(str(src).encode(), str(dst).encode(), params) != 0
        finally:
            os.dup2(saved, 2)
            os.close(saved)
    if failed:
        raise SystemExit(f"llama.cpp could not quantize {src} to Q4_K_M")


def ggml_quantize(qtype: Q, x: np.ndarray) -> np.ndarray:
    """x (float32, whole 256-value blocks) -> llama.cpp's bytes, by ggml_quantize_chunk."""
    import llama_cpp

    lib = ctypes.CDLL(os.path.join(os.path.dirname(llama_cpp.__file__), "lib", "libggml-base.so"))
    fn = lib.ggml_quantize_chunk
    fn.restype = ctypes.c_size_t
    fn.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                   ctypes.c_int64, ctypes.c_void_p]
    x = np.ascontiguousarray(x, np.float32)
    block, size = GGML_QUANT_SIZES[qtype]
    out = np.zeros(x.size // block * size, np.uint8)
    fn(int(qtype), x.ctypes.data, out.ctypes.data, 0, 1, x.size, None)
    return out


def compare(label: str, qtype: Q, raws: list[np.ndarray], rounds: int) -> float:
    """Time both decoders on raws (tensors of whole blocks), check the bits, print one line; the ratio."""
    size, ours = K_FAST[qtype]
    blocks = [raw.reshape(-1, size) for raw in raws]
    for b in blocks:
        theirs = np.asarray(quants.dequantize(b, qtype), np.float32).reshape(-1)
        if not np.array_equal(theirs.view(np.uint32), ours(b).reshape(-1).view(np.uint32)):
            raise SystemExit(f"{label}: dequant_k differs from gguf.quants on {qtype.name}")
    t_gguf = best_cpu(lambda: [quants.dequantize(b, qtype) for b in blocks], rounds)
    t_ours = best_cpu(lambda: [ours(b) for b in blocks], rounds)
    n = sum(b.shape[0] for b in blocks) * 256 / 1e6
    ratio = t_gguf / t_ours
    print(f"  {label:<30} {qtype.name:<5} {n:6.2f} M values  gguf.quants {n / t_gguf:6.1f} M/s  "
          f"ours {n / t_ours:6.1f} M/s  {ratio:4.1f}x  (same bits)")
    return ratio


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", nargs="?", type=Path)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    model = args.model or find_smollm2()
    if model is None:
        raise SystemExit("no model: pass MODEL.gguf or set SMOLLM2_GGUF")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "q4_k_m.gguf"
        t = time.perf_counter()
        requantize(model, out)
        print(f"{model.name} -> Q4_K_M by llama_model_quantize in {time.perf_counter() - t:.1f} s; "
              "its k-quant tensors, whole:")
        by_type: dict[Q, list[np.ndarray]] = {}
        with open_gguf(out) as f:
            for info in f.tensors.values():
                if info.ggml_type in K_FAST:
                    by_type.setdefault(info.ggml_type, []).append(np.array(f.tensor_bytes(info.name)))
        for qtype, raws in by_type.items():
            compare(f"{len(raws)} tensors of the file", qtype, raws, args.rounds)
    with open_gguf(model) as f:
        name = max(f.tensors, key=lambda n: f.tensors[n].n_elements)
        info = f.tensors[name]
        values = np.asarray(quants.dequantize(np.array(f.tensor_bytes(name)), info.ggml_type)).reshape(-1)
    values = values[: values.size // 256 * 256].astype(np.float32)
    print(f"{name} of {model.name}, quantized by ggml_quantize_chunk to each type:")
    for qtype in K_FAST:
        compare(name, qtype, [ggml_quantize(qtype, values)], args.rounds)


if __name__ == "__main__":
    main()
