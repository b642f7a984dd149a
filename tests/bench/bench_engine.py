"""Benchmark of the numpy engine: prefill and decode tokens/s, and the time spent outside numpy matmuls.

Run from the repository root:

    python tests/bench/bench_engine.py [--prompt 128] [--decode 32] [--blas-threads N] [MODEL.gguf ...]

Models: every reference model the engine runs (`../shared/fixtures/reference/`),
the bundled tiny model (`assets/tiny-clinical-moe.gguf`) when it has been built,
any file named on the command line, and a random-weight stand-in with the tiny
model's planned shapes (qwen2moe, 4 layers, width 128, 8 experts with 2 used,
vocabulary 3000, tied embeddings) so the UI's budget can be checked before the
tiny model exists. Each figure is measured in this run:

- prefill: one pass over a prompt of --prompt tokens, cold (weights dequantized on
  first use) and warm (median of three more sessions: weights already cached);
- decode: --decode greedy tokens after the prompt, median milliseconds per token
  (the forward pass plus the sampler);
- matmul: the same step's matrix products replayed alone (each weight the step
  touched, times an input of the step's shape), so "outside" = step - matmul is
  the per-token Python and small-op overhead, also given per layer;
- budget: the UI wants one tiny-model decode step well under 20 ms; the ratio
  printed is median step / 20 ms.

`--blas-threads N` caps OpenBLAS's threads (OPENBLAS_NUM_THREADS, set before
numpy loads). On a small, busy machine one thread is much faster for models this
small: two threads wait on each other for matrices of a few hundred rows.

Nothing is asserted: this prints figures (tests never time things).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

if "--blas-threads" in sys.argv[:-1]:  # must be set before numpy loads OpenBLAS
    os.environ["OPENBLAS_NUM_THREADS"] = os.environ["OMP_NUM_THREADS"] = sys.argv[sys.argv.index("--blas-threads") + 1]

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "bench"))

from random_models import random_model

from walkthrough.engine.glassbox.config import UnsupportedArchitecture
from walkthrough.engine.glassbox.meter import Meter
from walkthrough.engine.glassbox.model import Model
from walkthrough.engine.glassbox.session import Session
from walkthrough.engine.sampler import Sampler

REFERENCE = REPO.parent / "shared" / "fixtures" / "reference"
TINY = REPO / "assets" / "tiny-clinical-moe.gguf"
UI_BUDGET_MS = 20.0  # one decode step of the tiny model, from issue 4
REPLAYS = 20


class RecordingMeter(Meter):
    """A Meter that also remembers every matrix product of the pass: (weight, rows)."""

    products: list[tuple[np.ndarray, int]]

    def __init__(self, *args):
        super().__init__(*args)
        self.products = []

    def matrix(self, name, n_tokens, group=None):
        w = super().matrix(name, n_tokens, group)
        self.products.append((w, n_tokens))
        return w

    def expert(self, name, e, n_tokens):
        w = super().expert(name, e, n_tokens)
        self.products.append((w, n_tokens))
        return w


def replay_ms(products: list[tuple[np.ndarray, int]]) -> float:
    """Median milliseconds of the pass's matrix products run alone."""
    inputs = [(np.ones((n, w.reshape(-1, w.shape[-1]).shape[-1]), np.float32), w.reshape(-1, w.shape[-1]))
              for w, n in products]
    times = []
    for _ in range(REPLAYS):
        t0 = time.perf_counter()
        for x, w in inputs:
            x @ w.T
        times.append(time.perf_counter() - t0)
    return 1000 * statistics.median(times)


def bench(path: Path, n_prompt: int, n_decode: int) -> None:
    try:
        model = Model.open(path)
    except UnsupportedArchitecture as exc:
        print(f"{path.name}: skipped ({exc})")
        return
    c = model.config
    ids = np.random.default_rng(1).integers(0, c.n_vocab, n_prompt).tolist()
    results = {"cold": [], "warm": []}
    for label in ("cold", "warm", "warm", "warm"):
        session = Session(model)
        t0 = time.perf_counter()
        list(session.prefill(ids))
        results[label].append(time.perf_counter() - t0)
    cold, warm = results["cold"][0], statistics.median(results["warm"])
    sampler = Sampler.greedy()
    session.choose(sampler)
    steps_ms, outside_ms, sample_ms = [], [], []
    for _ in range(n_decode):
        meter = RecordingMeter(model.weights, model.group_of)
        model.meter = lambda meter=meter: meter  # this pass's meter records its products
        t0 = time.perf_counter()
        step = session.feed([session.pending], phase="decode")
        t1 = time.perf_counter()
        session.choose(sampler)
        t2 = time.perf_counter()
        steps_ms.append(1000 * (t2 - t0))
        sample_ms.append(1000 * (t2 - t1))
        outside_ms.append(1000 * (t1 - t0) - replay_ms(meter.products))
        assert step.phase == "decode"
    del model.meter
    step, outside, sample = (statistics.median(x) for x in (steps_ms, outside_ms, sample_ms))
    print(f"{path.name}: {c.arch}, {c.n_layers} layers, width {c.n_embd}, vocab {c.n_vocab}, "
          f"{c.n_experts or 'no'} experts")
    print(f"  prefill {n_prompt} tokens in one pass: cold {n_prompt / cold:8.0f} tok/s, "
          f"warm {n_prompt / warm:8.0f} tok/s (median of 3)")
    print(f"  decode: {step:6.2f} ms/token ({1000 / step:6.0f} tok/s), of which sampler {sample:5.2f} ms; "
          f"outside matmuls {outside:5.2f} ms = {outside / c.n_layers:5.2f} ms/layer "
          f"({outside / (step - sample):.0%} of the forward pass)")
    print(f"  UI budget: median step / {UI_BUDGET_MS:.0f} ms = {step / UI_BUDGET_MS:.2f}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", type=Path)
    parser.add_argument("--prompt", type=int, default=128)
    parser.add_argument("--decode", type=int, default=32)
    parser.add_argument("--blas-threads", type=int, help="OpenBLAS threads (default: OpenBLAS's own choice)")
    args = parser.parse_args(argv)
    print(f"OpenBLAS threads: {os.environ.get('OPENBLAS_NUM_THREADS', 'default')}; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    paths = list(args.models) or sorted(REFERENCE.glob("ref-*.gguf"))
    if not args.models and TINY.exists():
        paths.append(TINY)
    with tempfile.TemporaryDirectory() as tmp:
        if not args.models:
            # The tiny model's planned shapes (assets/tiny_moe.py): qwen2moe, 4 layers, width 128, 4 heads over
            # 2 KV heads, 8 experts of 64 with 2 used, a shared expert of 128, tied embeddings; vocabulary ~3000.
            paths.append(random_model(Path(tmp) / "tiny-shaped-random.gguf", "qwen2moe", width=128, n_layer=4,
                                      n_vocab=3000, ff_exp=64, ff_shared=128, tied=True))
        for path in paths:
            bench(path, args.prompt, args.decode)


if __name__ == "__main__":
    main()
