"""The engine against llama.cpp over a prompt longer than a model's sliding window, span by span of positions.

    python tests/bench/long_context.py MODEL.gguf [--tokens 900] [--exact-products]

Gemma 3's sliding layers see only the last `sliding_window` positions (512 in Gemma 3 270M): positions past
the window are where a wrong mask or a wrong cache read would show. The prompt is this repository's own
text (README.md, docs/op-diff.md, then ops.py: fixed, so runs compare), cut to `--tokens` by the file's
tokenizer, no BOS. Both engines prefill it in one pass, one thread, F32 KV cache, no flash attention, and
keep every position's logits; for each span of 256 positions this prints top-1 agreement and the largest
and mean logit gap. With `--exact-products` the engine multiplies as ggml does (slow: about 5 minutes for
560 tokens of Gemma 3 270M here), where the gaps should be 0.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy loads, as walkthrough.cli.main does
REPO = Path(__file__).resolve().parents[2]
SPAN = 256
TEXTS = ("README.md", "docs/op-diff.md", "walkthrough/engine/glassbox/ops.py")

import numpy as np

from walkthrough.engine.glassbox.model import Model
from walkthrough.engine.glassbox.session import Session
from walkthrough.inspect.gguf import open_gguf
from walkthrough.inspect.tokenizer import GGUFTokenizer


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", type=Path)
    ap.add_argument("--tokens", type=int, default=900)
    ap.add_argument("--exact-products", action="store_true")
    args = ap.parse_args(argv)
    try:
        from walkthrough.engine.llama.model import LlamaModel
        from walkthrough.engine.llama.session import LlamaSession
    except ImportError:
        print("this benchmark needs llama-cpp-python (pip install 'walkthrough[llama]')", file=sys.stderr)
        return 2
    f = open_gguf(args.model)
    text = "".join((REPO / name).read_text() for name in TEXTS)
    ids = [int(i) for i in GGUFTokenizer.from_gguf(f).encode(text)][: args.tokens]
    model = Model(f, exact_products=args.exact_products)
    window = model.config.sliding_window
    llama = LlamaSession(LlamaModel(f, n_threads=1), kv_type="f32", flash_attention=False)
    theirs = llama.feed(ids, phase="prefill", all_logits=True).all_logits  # [n, vocab]
    began = time.process_time()
    ours = Session(model, kv_type="f32").feed(ids, phase="prefill", all_logits=True).all_logits
    took = time.process_time() - began
    print(f"{args.model.name}: {len(ids)} tokens, sliding window {window or 'none'}, "
          f"{'exact' if args.exact_products else 'default'} products ({took:.0f} CPU s)")
    agree = theirs.argmax(-1) == ours.argmax(-1)
    gap = np.abs(theirs - ours).max(-1)  # [n] largest logit difference per position
    for lo in range(0, len(ids), SPAN):
        hi = min(lo + SPAN, len(ids))
        print(f"  positions {lo:5d}-{hi:5d}: top-1 {100 * agree[lo:hi].mean():6.2f}%  "
              f"max gap {gap[lo:hi].max():.3g}  mean gap {gap[lo:hi].mean():.3g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
