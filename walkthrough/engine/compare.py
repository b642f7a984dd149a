"""Two files of the same model on the same tokens: how far apart their predictions are, position by position.

`compare_models(a, b, prompt, max_tokens)` runs A greedily after the prompt
(its answer), then feeds prompt + answer to both models teacher-forced (one
pass each, every position's logits kept) and measures at every position:

- KL(P_A || P_B) in nats: how much B's next-token distribution loses against
  A's (A is the reference, e.g. the larger quantization); mean, 99th
  percentile and max over positions;
- top-1 agreement: share of positions where both rank the same token first;
- top-5 agreement: mean share of the five best tokens the two lists have in common;
- the perplexity of each on the same tokens (the request, and the answer);
- the first answer position where the greedy answers part: since both read the
  same tokens up to there, it is the first answer token A chose that B's
  logits at that position do not rank first (B's own greedy run would have
  taken another token there). None when B agrees with all of A's answer.

The two files must share the vocabulary (same token count and, when both store
them, the same token texts), or the positions' distributions do not compare.

Example: P_A = [0.5, 0.5], P_B = [0.9, 0.1]: KL = 0.5 ln(0.5/0.9) + 0.5 ln(0.5/0.1) = 0.511 nats.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from walkthrough.engine import surprisal as sp
from walkthrough.engine.glassbox.model import Model
from walkthrough.engine.glassbox.session import Session
from walkthrough.engine.numeric_checks import InvalidNumbers, check_logits
from walkthrough.engine.sampler import Sampler
from walkthrough.errors import WalkthroughError

TOP_N = 5


def kl_divergence(logits_p: np.ndarray, logits_q: np.ndarray) -> np.ndarray:
    """[n, V], [n, V] -> [n] KL(softmax(p) || softmax(q)) in nats (float64)."""
    lp, lq = sp.log_softmax(logits_p), sp.log_softmax(logits_q)
    return np.sum(np.exp(lp) * (lp - lq), axis=-1)


def top_overlap(logits_p: np.ndarray, logits_q: np.ndarray, n: int = TOP_N) -> np.ndarray:
    """[n_pos] share of the n best tokens of p that are also among the n best of q."""
    tp = np.argsort(-logits_p, axis=-1, kind="stable")[:, :n]
    tq = np.argsort(-logits_q, axis=-1, kind="stable")[:, :n]
    return np.array([len(set(a.tolist()) & set(b.tolist())) / n for a, b in zip(tp, tq)])


@dataclass(frozen=True)
class Comparison:
    """The per-position measures of two models on the same tokens."""

    tokens: list[int]  # prompt + A's greedy answer
    n_prompt: int
    kl: np.ndarray  # [n] KL(A || B) of the distribution at each position (over the token after it)
    top1: np.ndarray  # [n] bool: same best token
    top5: np.ndarray  # [n] share of the five best in common
    surprisal_a: np.ndarray  # [n - 1] surprisal of tokens 1..n-1 under A
    surprisal_b: np.ndarray
    greedy_b: np.ndarray  # [n] B's best token at each position
    parted_at: int | None  # answer index (0 = first answer token) where B's greedy choice differs from A's

    @property
    def answer(self) -> list[int]:
        return self.tokens[self.n_prompt:]

    def kl_stats(self) -> dict[str, float]:
        return {"mean": float(np.mean(self.kl)), "p99": float(np.percentile(self.kl, 99)), "max": float(np.max(self.kl))}

    def perplexities(self) -> dict[str, dict]:
        """Per model, the loss and perplexity over the request's tokens (after the first) and over the answer."""
        cut = self.n_prompt - 1  # surprisal[i] is of token i + 1: the answer starts at surprisal[n_prompt - 1]
        return {
            name: {"request": sp.summary(s[:cut]), "answer": sp.summary(s[cut:])}
            for name, s in (("a", self.surprisal_a), ("b", self.surprisal_b))
        }


def check_same_vocabulary(a: Model, b: Model) -> None:
    """Raise unless the two files have the same vocabulary size and (if both store them) token texts."""
    if a.config.n_vocab != b.config.n_vocab:
        raise WalkthroughError(
            f"{a.file.path.name} has {a.config.n_vocab} tokens and {b.file.path.name} {b.config.n_vocab}: "
            "compare needs two files of the same model (same vocabulary)"
        )
    ta, tb = a.file.get("tokenizer.ggml.tokens"), b.file.get("tokenizer.ggml.tokens")
    if isinstance(ta, list) and isinstance(tb, list) and ta != tb:
        at = next(i for i, (x, y) in enumerate(zip(ta, tb)) if x != y)
        raise WalkthroughError(
            f"{a.file.path.name} and {b.file.path.name} differ at token {at}: compare needs two files of the same "
            "model (same vocabulary)"
        )


def all_logits(model: Model, ids: list[int]) -> np.ndarray:
    """[n, V] float32 logits at every position of `ids`, one prefill pass (F16 KV cache, as llama.cpp).

    Raises:
        InvalidNumbers: a logit is NaN or infinite (the file's weights are broken): no measure of it means
            anything, and A's greedy run refuses the same in its sampler.
    """
    step = next(Session(model).prefill(ids, all_logits=True))
    check_logits(step.all_logits, model.file.path.name)
    return step.all_logits


def greedy_answer(model: Model, prompt: list[int], max_tokens: int) -> list[int]:
    """The model's greedy continuation of `prompt` (up to max_tokens, ending at an end-of-turn token).

    Raises:
        InvalidNumbers: the sampler met NaN or infinite logits; the line names the file.
    """
    session, sampler = Session(model), Sampler.greedy()
    last = None
    try:
        for last in session.prefill(prompt, sampler=sampler):
            pass
        answer = [last.chosen]
        if not last.stopped:
            answer += [step.chosen for step in session.decode(sampler, max_tokens - 1)]
    except InvalidNumbers as exc:
        raise InvalidNumbers(f"{model.file.path.name}, answering greedily: {exc}") from None
    return answer[:max_tokens]


def compare_models(a: Model, b: Model, prompt: list[int], max_tokens: int) -> Comparison:
    """Run A's greedy answer to `prompt`, then both models teacher-forced on prompt + answer."""
    check_same_vocabulary(a, b)
    if not prompt:
        raise WalkthroughError("the prompt has no tokens")
    tokens = list(prompt) + greedy_answer(a, list(prompt), max_tokens)
    la, lb = all_logits(a, tokens), all_logits(b, tokens)  # [n, V] each
    nxt = tokens[1:]
    greedy_b = np.argmax(lb, axis=-1)
    n_prompt = len(prompt)
    parted = [i for i, tok in enumerate(tokens[n_prompt:]) if int(greedy_b[n_prompt - 1 + i]) != tok]
    return Comparison(
        tokens=tokens,
        n_prompt=n_prompt,
        kl=kl_divergence(la, lb),
        top1=np.argmax(la, axis=-1) == greedy_b,
        top5=top_overlap(la, lb),
        surprisal_a=sp.surprisal(la[:-1], nxt),
        surprisal_b=sp.surprisal(lb[:-1], nxt),
        greedy_b=greedy_b,
        parted_at=parted[0] if parted else None,
    )
