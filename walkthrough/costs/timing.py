"""The timing model: seconds of a decode step or a prompt pass, in physical terms fitted on measured runs.

Decode, one token at `context` cached positions (a per-token sum):
    t = a_w x weight bytes / bandwidth          (reading the weights; 1 / a_w is the efficiency)
      + a_l x layers                            (fixed cost per layer: launching its kernels)
      + a_e x expert calls                      (fixed cost per routed or shared expert matmul)
      + a_kv x KV bytes at context / bandwidth  (attention reading the cache, growing with depth)
      + a_qk x attention FLOPs at context / compute   (one query against every cached position: a
                                                matrix-vector product far below peak compute)
      + a_r x linear-attention layers x width / compute   (a Gated DeltaNet layer runs dozens of
                                                small ops per token on its state and channels, which
                                                grow with the width; their work, not their bytes,
                                                sets the time, so a smaller GPU takes longer)
Prefill, n prompt tokens after `depth` cached ones, in micro-batches of `ubatch`:
    T = a_q x 2 x active params x n / compute   (matmuls on quantized weights)
      + a_f x the same                          (matmuls on 16/32-bit float weights)
      + a_att x attention FLOPs / compute       (4 x query dims x positions seen, per KV layer)
      + a_c x chunks x layers                   (fixed cost per layer per micro-batch)
      + a_r x chunks x bytes a chunk reads / bandwidth   (the weights read once per micro-batch)
      + a_x x chunks x experts                  (fixed cost per expert matmul per micro-batch)
A machine without a sourced compute figure has no prefill prediction, and its decode
drops the two compute terms (so it reads as faster than it may be).

The coefficients are fitted per backend family (CUDA, Metal, ROCm/Vulkan, CPU) by
non-negative least squares on relative error: each measured run gives one equation
predicted time / measured time = 1, each machine weighs the same, and every
coefficient stays >= 0 (a cost cannot be negative). With at most six unknowns the
exact solution is found by trying every subset of them (`nnls`).

`calibrate()` fits every family on the whole corpus and, for the error band, on the
corpus less one machine at a time, predicting the machine left out
(leave-one-machine-out): the band is the 80th percentile of those errors. A machine
with at least two runs of a phase also gets its own factor on top of its family's fit
(the geometric mean of measured / predicted over its runs), used when an estimate is
for that very machine. `fit_family(..., terms=...)` fits with only some decode
terms (the others held at 0), so the calibration bench can show what a term buys.

Example: a 4.6 GB token on a 1008 GB/s GPU with a_w = 1.25 and 32 layers at
a_l = 20 us: 4.6e9 / 1008e9 x 1.25 + 32 x 20e-6 = 5.70 ms + 0.64 ms -> 158 tokens/s.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from walkthrough.costs.corpus import FAMILIES, Corpus, Run, bundled

KV_BYTES = 2  # F16 cache entries, llama.cpp's default
FLOAT_QUANTS = ("F16", "BF16", "F32")
BAND_PERCENTILE = 80
MIN_RUNS = 8  # fewer measured runs of a family (or fewer than MIN_MACHINES machines): no band
MIN_MACHINES = 3
DECODE_TERMS = ("weights / bandwidth", "per layer", "per expert call", "KV cache / bandwidth",
                "attention FLOPs at context / compute", "linear-attention layers x width / compute")
PREFILL_TERMS = ("quantized matmul FLOPs / compute", "float matmul FLOPs / compute", "attention FLOPs / compute",
                 "per layer per micro-batch", "weights per micro-batch / bandwidth", "per expert per micro-batch")


@dataclass(frozen=True)
class Shape:
    """What a model's token costs, in the terms of the model above."""

    weight_bytes: float  # weights read per decoded token
    batch_bytes: float  # weights one prompt micro-batch reads (all experts it routes to)
    layers: int
    expert_calls: int  # per token, all layers
    experts: int  # expert matmuls a prompt micro-batch may run, all layers
    kv_bytes_per_position: float  # K + V bytes of one position over all KV layers
    attn_flops_per_pair: float  # FLOPs of one query against one cached position, all KV layers
    params_active: float
    float_weights: bool  # 16/32-bit weights (matmuls not on quantized blocks)
    recurrent_layers: int = 0  # linear-attention layers (a fixed state instead of a KV cache)
    width: int = 0  # hidden size


@dataclass(frozen=True)
class Hardware:
    """The spec figures the model divides by."""

    bandwidth: float  # B/s
    compute: float | None  # FLOP/s; None: no prefill prediction


def run_shape(run: Run) -> Shape:
    m = run.model
    return Shape(
        weight_bytes=run.bytes_per_token,
        batch_bytes=run.file_bytes if m.expert_calls else run.bytes_per_token,
        layers=m.layers, expert_calls=m.expert_calls, experts=m.experts,
        kv_bytes_per_position=m.kv_layers * m.kv_dim * KV_BYTES,
        attn_flops_per_pair=4 * m.attn_dim * m.kv_layers,
        params_active=m.params_active,
        float_weights=run.quant.upper() in FLOAT_QUANTS,
        recurrent_layers=m.recurrent_layers, width=m.n_embd,
    )


def run_hardware(run: Run) -> Hardware:
    return Hardware(run.machine.bandwidth, run.machine.compute)


def decode_terms(s: Shape, hw: Hardware, context: float) -> np.ndarray:
    """The six decode terms before their coefficients (the compute ones 0 without a compute figure). [6]"""
    per_flop = 0.0 if hw.compute is None else 1 / hw.compute
    return np.array([s.weight_bytes / hw.bandwidth, s.layers, s.expert_calls,
                     s.kv_bytes_per_position * context / hw.bandwidth,
                     s.attn_flops_per_pair * context * per_flop, s.recurrent_layers * s.width * per_flop])


def prefill_terms(s: Shape, hw: Hardware, n: int, depth: int, ubatch: int) -> np.ndarray:
    """The six prefill terms before their coefficients (seconds for the whole prompt). [6]"""
    assert hw.compute is not None
    matmul = 2 * s.params_active * n / hw.compute
    pairs = n * depth + n * (n + 1) / 2  # query-position pairs: each new token sees depth + its own prefix
    chunks = math.ceil(n / ubatch)
    return np.array([0.0 if s.float_weights else matmul, matmul if s.float_weights else 0.0,
                     s.attn_flops_per_pair * pairs / hw.compute, chunks * s.layers,
                     chunks * s.batch_bytes / hw.bandwidth, chunks * s.experts])


def nnls(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """min |a x - b| with x >= 0, exactly: the best of the unconstrained solutions on every subset of
    columns that come out non-negative (fine for a handful of columns). Columns are scaled to unit
    length first: the terms differ by 15 orders of magnitude (layers against layers / FLOP/s), and
    least squares would take the small ones for rounding noise. [rows, k], [rows] -> [k]"""
    k = a.shape[1]
    norms = np.linalg.norm(a, axis=0)
    scale = np.where(norms > 0, norms, 1.0)
    a = a / scale
    best, best_res = np.zeros(k), float(b @ b)
    for size in range(1, k + 1):
        for cols in itertools.combinations(range(k), size):
            sub = a[:, cols]
            x, *_ = np.linalg.lstsq(sub, b, rcond=None)
            if np.all(x >= 0):
                res = float(np.sum((sub @ x - b) ** 2))
                if res < best_res:
                    best_res, best = res, np.zeros(k)
                    best[list(cols)] = x
    return best / scale


def _fit(rows: Sequence[tuple[np.ndarray, float, str]], k: int, use: Sequence[int] | None = None) -> np.ndarray:
    """Coefficients from (terms, measured seconds, machine) rows: relative error, machines weighed alike;
    only the terms `use` lists (all if None), the others held at 0."""
    coef = np.zeros(k)
    if not rows:
        return coef
    cols = list(range(k)) if use is None else list(use)
    per_machine: dict[str, int] = defaultdict(int)
    for _, _, machine in rows:
        per_machine[machine] += 1
    w = np.array([1 / math.sqrt(per_machine[m]) for _, _, m in rows])
    a = np.array([terms[cols] / t for terms, t, _ in rows]) * w[:, None]
    coef[cols] = nnls(a, w)
    return coef


@dataclass(frozen=True)
class Phase:
    """One phase's fitted coefficients for one family, and how wrong they were on machines left out."""

    coefficients: tuple[float, ...]
    runs: int
    machines: int
    errors: tuple[float, ...]  # leave-one-machine-out relative errors, predicted / measured - 1
    machine_factors: dict[str, tuple[float, int]] = field(default_factory=dict)  # id -> (measured/predicted, runs)

    @property
    def band(self) -> float | None:
        """The 80th percentile of |error|, or None with too few runs or machines to say."""
        if self.runs < MIN_RUNS or self.machines < MIN_MACHINES or not self.errors:
            return None
        return float(np.percentile(np.abs(self.errors), BAND_PERCENTILE))


@dataclass(frozen=True)
class FamilyFit:
    family: str
    decode: Phase
    prefill: Phase
    held_out: dict[str, list[tuple[Run, float]]] = field(default_factory=dict)  # machine -> (run, predicted/s)


def _decode_row(run: Run) -> tuple[np.ndarray, float, str]:
    context = run.depth + run.n / 2  # a tg test's mean context
    return decode_terms(run_shape(run), run_hardware(run), context), 1 / run.tokens_per_s, run.machine.id


def _prefill_row(run: Run) -> tuple[np.ndarray, float, str]:
    terms = prefill_terms(run_shape(run), run_hardware(run), run.n, run.depth, run.ubatch)
    return terms, run.seconds, run.machine.id


def _phase(runs: list[Run], row: Callable[[Run], tuple[np.ndarray, float, str]], k: int,
           held_out: dict[str, list[tuple[Run, float]]], per_token: bool,
           use: Sequence[int] | None = None) -> Phase:
    rows = [row(r) for r in runs]
    coef = _fit(rows, k, use)
    ratios: dict[str, list[float]] = defaultdict(list)
    for (x, t, m) in rows:
        predicted = float(x @ coef)
        if predicted > 0:
            ratios[m].append(math.log(predicted / t))  # time ratio = rate ratio measured / predicted
    factors = {m: (math.exp(sum(v) / len(v)), len(v)) for m, v in ratios.items() if len(v) >= 2}
    errors = []
    machines = sorted({r.machine.id for r in runs})
    for m in machines:
        rest = [x for x, r in zip(rows, runs) if r.machine.id != m]
        c = _fit(rest, k, use)
        for x, r in zip(rows, runs):
            if r.machine.id != m:
                continue
            seconds = float(x[0] @ c)
            rate = (1 / seconds if per_token else r.n / seconds) if seconds > 0 else math.inf
            errors.append(rate / r.tokens_per_s - 1)
            held_out.setdefault(m, []).append((r, rate))
    return Phase(tuple(float(v) for v in coef), len(runs), len(machines), tuple(errors), factors)


def fit_family(corpus: Corpus, family: str, terms: Sequence[str] = DECODE_TERMS,
               extra_prefill: Callable[[Run], float] | None = None) -> FamilyFit:
    """One family's fit, with leave-one-machine-out errors; decode with only the terms named (of
    DECODE_TERMS; the rest held at 0); prefill with one more term, seconds-like, if `extra_prefill` gives it
    (the calibration bench tries candidates that way)."""
    runs = corpus.family_runs(family)
    held: dict[str, list[tuple[Run, float]]] = {}
    use = [DECODE_TERMS.index(t) for t in terms]
    dec = _phase([r for r in runs if r.test == "tg"], _decode_row, len(DECODE_TERMS), held, True, use)
    row, k = _prefill_row, len(PREFILL_TERMS)
    if extra_prefill is not None:
        def row(run: Run) -> tuple[np.ndarray, float, str]:
            x, t, m = _prefill_row(run)
            return np.append(x, extra_prefill(run)), t, m
        k += 1
    pre = _phase([r for r in runs if r.test == "pp" and r.machine.compute is not None], row, k, held, False)
    return FamilyFit(family, dec, pre, held)


def calibrate(corpus: Corpus | None = None, terms: Sequence[str] = DECODE_TERMS) -> dict[str, FamilyFit]:
    """Every family's fit on the bundled corpus (or the one given), with leave-one-machine-out errors;
    decode with only the terms named."""
    if corpus is None and tuple(terms) == DECODE_TERMS:
        return _bundled_fits()
    return {f: fit_family(corpus or bundled(), f, terms) for f in FAMILIES}


@lru_cache(maxsize=1)
def _bundled_fits() -> dict[str, FamilyFit]:
    return {f: fit_family(bundled(), f) for f in FAMILIES}


def decode_rate(fit: FamilyFit, s: Shape, hw: Hardware, context: float) -> float:
    """Tokens/s of one stream at `context` cached positions."""
    seconds = float(decode_terms(s, hw, context) @ np.array(fit.decode.coefficients))
    return 1 / seconds if seconds > 0 else math.inf


def prefill_seconds(fit: FamilyFit, s: Shape, hw: Hardware, n: int, depth: int = 0, ubatch: int = 512) -> float:
    """Seconds to read an n-token prompt after `depth` cached tokens."""
    return float(prefill_terms(s, hw, n, depth, ubatch) @ np.array(fit.prefill.coefficients))
