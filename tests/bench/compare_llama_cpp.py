"""Compare the engine's logits with llama.cpp's on any GGUF, the way the reference fixtures were made.

For each MODEL: llama.cpp (llama-cpp-python, run in its own environment, never
a project dependency) evaluates a prompt in one batch with an F32 KV cache and
no flash attention, keeps the logits of every position, then decodes 16 tokens
greedily; the engine is fed the same tokens; the script prints the largest
absolute logit difference over all positions, whether the greedy ids agree,
and the top-1 agreement over positions (the fixtures README's criteria).

    python tests/bench/compare_llama_cpp.py MODEL.gguf [...] [--llama-python /work/llamavenv/bin/python]
    python tests/bench/compare_llama_cpp.py --quantize Q4_K_M IN.gguf OUT.gguf   # with llama.cpp's quantizer

The llama.cpp side runs this same file with `--llama-side` under the other
interpreter and answers in JSON on stdout. ggml's AMX repacking is turned off
(`use_extra_bufts = False`): this machine's sandbox does not grant AMX tiles.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

LLAMA_PYTHON = "/work/llamavenv/bin/python"
N_PROMPT, N_DECODE, SEED = 24, 16, 0
GGML_TYPE_F32 = 0  # ggml.h enum ggml_type


def llama_side(model: str, ids: list[int]) -> dict:
    """Run inside llama-cpp-python: prefill logits at every position, greedy ids and their logits."""
    import llama_cpp
    import llama_cpp.llama_cpp as llama_c
    import numpy as np

    default_params = llama_c.llama_model_default_params

    def params():
        p = default_params()
        p.use_extra_bufts = False
        return p

    llama_c.llama_model_default_params = params
    llm = llama_cpp.Llama(
        model_path=model,
        n_ctx=256,
        n_batch=256,
        n_ubatch=256,
        logits_all=True,
        verbose=False,
        type_k=GGML_TYPE_F32,
        type_v=GGML_TYPE_F32,
        flash_attn=False,
        # -1: not set, so llama.cpp reads YaRN's betas and attention factor from the file as its own tools do
        # (llama-cpp-python's defaults, 32 / 1 / 1, would override them).
        yarn_beta_fast=-1.0,
        yarn_beta_slow=-1.0,
        yarn_attn_factor=-1.0,
    )
    llm.eval(ids)
    prefill = np.array(llm.scores[: len(ids)], dtype=np.float64)
    greedy, decode = [], []
    token = int(prefill[-1].argmax())
    for _ in range(N_DECODE):
        greedy.append(token)
        llm.eval([token])
        row = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float64)
        decode.append(row.tolist())
        token = int(row.argmax())
    return {
        "prompt_ids": ids,
        "prefill_logits": prefill.tolist(),
        "greedy_ids": greedy,
        "decode_logits": decode,
    }


def quantize(kind: str, src: str, dst: str) -> None:
    """llama.cpp's quantizer (llama_model_quantize), run inside llama-cpp-python."""
    import llama_cpp.llama_cpp as llama_c

    ftype = getattr(llama_c, f"LLAMA_FTYPE_MOSTLY_{kind.upper()}")
    params = llama_c.llama_model_quantize_default_params()
    params.ftype = ftype
    if llama_c.llama_model_quantize(src.encode(), dst.encode(), params) != 0:
        raise SystemExit(f"llama.cpp could not quantize {src} to {kind}")


def compare(model: Path, llama_python: str, *, match_llama_cpp: bool = True) -> None:
    import numpy as np

    from walkthrough.engine.glassbox.model import Model
    from walkthrough.engine.glassbox.session import Session

    engine = Model.open(model, match_llama_cpp=match_llama_cpp)
    ids = np.random.default_rng(SEED).integers(0, engine.config.n_vocab, N_PROMPT).tolist()
    out = subprocess.run(
        [llama_python, __file__, "--llama-side", str(model), ",".join(map(str, ids))],
        capture_output=True,
        text=True,
        check=True,
    )
    ref = json.loads(out.stdout)
    session = Session(engine, kv_type="f32")
    (step,) = session.prefill(ids, all_logits=True)
    ours = [step.all_logits]
    greedy = [int(np.argmax(session.last_logits))]
    for token in ref["greedy_ids"]:
        ours.append(session.feed([token], phase="decode").logits[None, :])
        greedy.append(int(np.argmax(session.last_logits)))
    ours = np.concatenate(ours)
    theirs = np.concatenate([np.asarray(ref["prefill_logits"]), np.asarray(ref["decode_logits"])])
    diff = float(np.abs(ours - theirs).max())
    spread = float(theirs.max() - theirs.min())
    same = greedy[:N_DECODE] == ref["greedy_ids"]
    top1 = float(np.mean(ours.argmax(axis=1) == theirs.argmax(axis=1)))
    types = ", ".join(sorted(engine.card.bytes_by_type))
    print(
        f"{model.name} ({engine.config.arch}; {types}): max |diff| {diff:.3g} (logits span {spread:.3g}), "
        f"greedy ids identical: {same}, top-1 agreement {top1:.1%}"
    )


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--llama-side"]:
        print(json.dumps(llama_side(argv[1], [int(x) for x in argv[2].split(",")])))
        return
    if argv[:1] == ["--quantize-side"]:
        quantize(*argv[1:4])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", type=Path)
    parser.add_argument("--llama-python", default=LLAMA_PYTHON)
    parser.add_argument("--quantize", nargs=3, metavar=("TYPE", "IN", "OUT"))
    parser.add_argument("--float", action="store_true", help="plain float32 products (no llama.cpp input rounding)")
    args = parser.parse_args(argv)
    if args.quantize:
        subprocess.run([args.llama_python, __file__, "--quantize-side", *args.quantize], check=True)
    for model in args.models:
        compare(model, args.llama_python, match_llama_cpp=not args.float)


if __name__ == "__main__":
    main()
