"""A diffusion language model's cost beside autoregression's, for the same weights, prompt and answer.

llama.cpp runs diffusion LMs (architectures dream, llada, llada-moe, rnd1) with
`examples/diffusion` (llama.cpp as vendored in llama-cpp-python 0.3.36): the answer's
positions start as mask tokens on a canvas of `max_length` = prompt + answer positions
(the CLI's -ub); every step feeds the whole canvas as one batch with causal attention
off (`llama_set_causal_attn(ctx, false)`), takes logits at every position
(n_vocab x max_length floats) and fixes some masked positions (by confidence, entropy,
margin or at random), `--diffusion-steps` times (default 256); with classifier-free
guidance (cfg_scale > 0) each step runs the canvas twice. Nothing is kept between steps:
no KV cache, every position recomputed. Autoregression runs the prompt once and then one
pass per answer token, each reading the weights and the KV cache.

`compare(card, hw, prompt, answer, steps)` counts, for both ways, the passes, the positions
computed, the FLOPs (2 x active parameters per position plus attention: causal for
autoregression, every position against every other for diffusion), the weight and KV bytes
read, and the seconds on the profile by the roofline, pass by pass: max(bytes read /
(bandwidth x efficiency), FLOPs / compute), the same rule `costs.estimate` uses for a
prefill micro-batch (decode passes in `DECODE_SEGMENTS` runs, each at its middle context:
the cache and attention grow linearly with the position, so the sum is the same). It models the cost only: whether a diffusion model's answer is as
good after fewer steps is a property of the model, not of these counts.

Example: 1,000 prompt and 256 answer tokens at 256 steps: autoregression computes
1,000 + 255 positions in 2 + 255 passes; diffusion 256 x 1,256 = 321,536 positions in 256 passes.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from walkthrough.costs.budget import MICRO_BATCH, Placement
from walkthrough.costs.estimate import attention_flops, batch_reads, read_seconds
from walkthrough.costs.hardware import Profile
from walkthrough.inspect.card import ModelCard

LLAMA_CPP_DEFAULT_STEPS = 256  # examples/diffusion: --diffusion-steps' default
DIFFUSION_ARCHITECTURES = ("dream", "llada", "llada-moe", "rnd1")  # llama.cpp's (src/llama-arch.cpp)
MAX_CANVAS = 1 << 20  # positions: a bound on what the knobs may ask for
DECODE_SEGMENTS = 256  # decode passes are counted in this many runs, each at its middle context


@dataclass(frozen=True)
class Way:
    """One way of writing the answer, counted over the whole request."""

    name: str  # "autoregressive" or "diffusion"
    passes: int  # forward passes over the model
    positions: int  # positions computed, summed over the passes
    flops: float
    bytes_read: float  # weights (and, autoregressive, the KV cache) read over all passes
    seconds: float  # roofline, pass by pass
    tokens_per_pass: float  # answer tokens fixed per pass (after the first for autoregression)


@dataclass(frozen=True)
class Comparison:
    """The same request both ways, on one machine."""

    prompt: int
    answer: int
    steps: int
    canvas: int  # prompt + answer: what every diffusion step computes
    cfg: bool
    autoregressive: Way
    diffusion: Way
    logits_bytes: int  # one diffusion step's logits: vocab x canvas float32 (x 2 with guidance)


def _pass_seconds(card: ModelCard, hw: Profile, tokens: int, flops: float, extra_bytes: float = 0.0) -> float:
    """One pass over `tokens` positions: max(weights read / (bandwidth x eff), FLOPs / compute)."""
    weights, slow = batch_reads(card, tokens, _no_offload())
    fast, slow_s = read_seconds(weights - slow + extra_bytes, slow, hw, efficient=True)
    return max(fast + slow_s, flops / hw.compute)


def _no_offload() -> Placement:
    return Placement()


def autoregressive(card: ModelCard, hw: Profile, prompt: int, answer: int, cache_type: str = "f16") -> Way:
    """The prompt in micro-batches (the last gives the first answer token), then one pass per further token."""
    passes = seconds = flops = bytes_read = 0.0
    done = 0
    while done < prompt:
        n = min(MICRO_BATCH, prompt - done)
        f = 2 * card.n_params_active * n + (attention_flops(card, done + n, window_sum=True)
                                            - attention_flops(card, done, window_sum=True))
        seconds += _pass_seconds(card, hw, n, f)
        flops += f
        bytes_read += batch_reads(card, n, _no_offload())[0]
        passes += 1
        done += n
    decodes = max(answer - 1, 0)
    edges = [prompt + decodes * i // DECODE_SEGMENTS for i in range(DECODE_SEGMENTS + 1)]
    for first, end in itertools.pairwise(edges):  # passes first..end-1, each at its midpoint's context
        if end == first:
            continue
        n, middle = end - first, (first + end + 1) // 2  # cached positions a pass reads, mid-segment
        kv = card.kv_bytes(middle, cache_type) or 0
        f = 2 * card.n_params_active + attention_flops(card, middle)
        seconds += n * _pass_seconds(card, hw, 1, f, kv)
        flops += n * f
        bytes_read += n * (card.bytes_per_token + kv)
        passes += n
    return Way("autoregressive", int(passes), prompt + max(answer - 1, 0), flops, bytes_read, seconds, 1.0)


def diffusion(card: ModelCard, hw: Profile, prompt: int, answer: int, steps: int, *, cfg: bool = False) -> Way:
    """`steps` passes (twice with guidance) over the whole canvas of prompt + answer positions, attention both
    ways."""
    canvas = prompt + answer
    runs = steps * (2 if cfg else 1)
    f = 2 * card.n_params_active * canvas + canvas * attention_flops(card, canvas)  # every position sees all
    per_pass = _pass_seconds(card, hw, canvas, f)
    weights = batch_reads(card, canvas, _no_offload())[0]
    return Way("diffusion", runs, runs * canvas, runs * f, runs * weights, runs * per_pass, answer / steps)


def compare(card: ModelCard, hw: Profile, prompt: int, answer: int, steps: int, *, cfg: bool = False,
            cache_type: str = "f16") -> Comparison:
    """Both ways for one request; `steps` is clamped to 1..answer (a step fixes at least one position).

    Raises:
        ValueError: a prompt or answer below 1, or a canvas beyond MAX_CANVAS.
    """
    if prompt < 1 or answer < 1 or prompt + answer > MAX_CANVAS:
        raise ValueError(f"prompt {prompt} and answer {answer}: each at least 1, together at most {MAX_CANVAS}")
    steps = max(1, min(steps, answer))
    logits = (card.vocab_size or 0) * (prompt + answer) * 4 * (2 if cfg else 1)
    return Comparison(prompt, answer, steps, prompt + answer, cfg,
                      autoregressive(card, hw, prompt, answer, cache_type),
                      diffusion(card, hw, prompt, answer, steps, cfg=cfg), logits)


def steps_for(answer: int, tokens_per_step: float) -> int:
    """Steps that fix `tokens_per_step` answer positions each (at least one step)."""
    return max(1, math.ceil(answer / tokens_per_step))
