"""Rebuild the tiny model from nothing: default request, corpus, tokenizer, weights, GGUF.

Usage: python assets/build_tiny_model.py [--steps N] [--examples N]
Needs the `train` extra (`pip install '.[train]'`, torch on the CPU). Every step is seeded, so a
rebuild on the same machine and library versions gives the same tensors and tokenizer (only the
`general.training` record of the run's seconds differs). Intermediate files go to
assets/build/ (git-ignored); the result is assets/tiny-clinical-moe.gguf.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import train
from corpus import write_default_request
from export_gguf import DEFAULT_OUT, export


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=train.DEFAULT_STEPS)
    ap.add_argument("--examples", type=int, default=train.DEFAULT_EXAMPLES)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--threads", type=int, default=2,
                    help="torch threads (1 is faster when other jobs share the cores)")
    args = ap.parse_args(argv)
    t0 = time.time()
    print(f"wrote {write_default_request()}")
    summary = train.train(train.DEFAULT_OUT, args.examples, args.steps, train.DEFAULT_BATCH,
                          train.DEFAULT_LR, threads=args.threads, log_every=50,
                          save_every=200)
    out = export(train.DEFAULT_OUT, args.out)
    print(f"trained: {summary}")
    print(f"wrote {out} ({out.stat().st_size} bytes); rebuild took {time.time() - t0:.0f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
