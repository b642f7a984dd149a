"""How surprised a model is by each token: -log p(token | everything before it), from the run's own logits.

The logits at position i are the model's distribution over the token at
position i + 1, so the surprisal of token i + 1 is -log softmax(logits[i])
[token i + 1], in nats. Their mean is the loss (cross-entropy per token) and
exp(loss) the perplexity: a perplexity of 4 means the model was, on average,
as unsure as a fair choice among 4 tokens. The first token of a request has no
surprisal (nothing came before it).

Computed in float64 with a log-sum-exp, so a logit of 80 does not overflow.

Example: logits [2, 0, 0] and next token 0: p = e^2 / (e^2 + 2) = 0.787,
surprisal 0.240 nats; next token 1: p = 0.107, surprisal 2.24 nats.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """[..., V] -> [..., V] log-probabilities (float64)."""
    x = np.asarray(logits, np.float64)
    top = np.max(x, axis=-1, keepdims=True)
    return x - top - np.log(np.sum(np.exp(x - top), axis=-1, keepdims=True))


def surprisal(logits: np.ndarray, next_ids: Sequence[int] | np.ndarray) -> np.ndarray:
    """[n, V] logits and the [n] tokens that followed each position -> [n] surprisal in nats."""
    logp = log_softmax(logits)  # [n, V]
    ids = np.asarray(next_ids, np.int64)
    return -logp[np.arange(len(ids)), ids]


def perplexity(surprisals: Sequence[float] | np.ndarray) -> float:
    """exp(mean surprisal); nan for no tokens."""
    s = np.asarray(surprisals, np.float64)
    return math.exp(float(np.mean(s))) if s.size else math.nan


def summary(surprisals: Sequence[float] | np.ndarray) -> dict[str, float | int | None]:
    """{"tokens", "loss" (mean nats), "perplexity"} of a run of surprisals (None values when empty)."""
    s = np.asarray(surprisals, np.float64)
    if not s.size:
        return {"tokens": 0, "loss": None, "perplexity": None}
    return {"tokens": int(s.size), "loss": float(np.mean(s)), "perplexity": perplexity(s)}
