"""Drafters for speculative decoding: cheap guesses of the next k tokens, checked later by the model.

Three kinds, one interface (`Drafter`):

- `PromptLookup` (n-gram drafting, as llama.cpp's lookup decoding): find the
  latest earlier occurrence of the n tokens that end the context (the prompt,
  what has been written, and the token just chosen) and propose the tokens that
  followed it. n goes from 4 down to 1 (llama.cpp's `LLAMA_NGRAM_MAX` and
  `LLAMA_NGRAM_MIN`, common/ngram-cache.h); the search is that of its
  `common_ngram_simple_draft` (common/ngram-map.cpp): backwards, the latest
  match wins. Free: no weights are read.
  Example: context [5, 6, 7, 8, 5, 6], k=2 -> the 2-gram [5, 6] occurred at 0,
  followed by [7, 8]: drafts [7, 8].
- `DraftModel`: a smaller model with the same vocabulary runs its own session
  and decodes greedily, one pass per draft (llama.cpp's draft sampler keeps the
  best of top-k 10, i.e. the argmax; common/speculative.cpp).
- `MTPDrafter` (`mtp.py`): the file's own multi-token-prediction block.

Drafts are always the drafter's single best guess, so a draft is a point mass
and the verification rule in `speculative.py` keeps the output distribution.

A drafter is told of every pass the target model ran (`observe`) and of what a
verification pass kept (`rewind`), so a drafter with a state (the draft model's
KV cache, the MTP block's) stays in step. What a drafter read is reported with
each draft (`Proposal`).

`propose` takes the pass hook (`session.Progress`) of the round it drafts for:
a drafter that runs passes calls it in them (the draft model at each of its
layers, the MTP block before each draft), so a `Cancelled` it raises stops the
drafting as it stops the target's passes. A drafter interrupted that way is in
no state to go on: the round's caller drops it with its session.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from walkthrough.engine.checkpoints import Checkpoint
from walkthrough.engine.glassbox.model import Model
from walkthrough.engine.glassbox.session import Progress, Session
from walkthrough.engine.steps import Step
from walkthrough.errors import WalkthroughError

NGRAM_MAX = 4  # llama.cpp's LLAMA_NGRAM_MAX (common/ngram-cache.h)
NGRAM_MIN = 1  # LLAMA_NGRAM_MIN


@dataclass
class Proposal:
    """Tokens a drafter proposes and what proposing them cost."""

    tokens: list[int]
    bytes_read: dict[str, int] = field(default_factory=lambda: {"total": 0})  # per group plus "total"
    flops: int = 0
    seconds: float = 0.0


class Drafter(Protocol):
    """Something that proposes the next tokens."""

    name: str
    needs_hidden: bool  # the target session must keep its final hidden rows (`Session(keep_hidden=True)`)

    def propose(self, context: list[int], k: int, progress: Progress | None = None) -> Proposal:
        """Up to k tokens to follow `context` (every token so far, the pending one last); `progress` is called
        in the drafter's own passes (it may raise `Cancelled`)."""

    def observe(self, step: Step) -> None:
        """The target model ran a pass (prefill chunk or verification)."""

    def rewind(self, length: int) -> None:
        """The target kept only its first `length` positions."""


@dataclass(frozen=True)
class NgramRow:
    """One n of the search: the context's last n tokens and where they occurred earlier with a token after."""

    n: int
    key: tuple[int, ...]  # the context's last n tokens
    starts: tuple[int, ...]  # earlier positions where `key` begins, oldest first (each followed by a token)


@dataclass(frozen=True)
class NgramSearch:
    """What prompt lookup searched (one row per n, longest first) and the match it drafted from."""

    rows: tuple[NgramRow, ...]
    n: int | None  # the n that matched (the longest with an earlier occurrence); None: no match
    start: int | None  # where the match begins (the latest occurrence of that n-gram)
    draft: tuple[int, ...]  # the tokens that followed it, at most k

    @property
    def follows(self) -> int | None:
        """Position of the first drafted token in the context, or None."""
        return None if self.start is None else self.start + self.n


def search(context: list[int], k: int, n_max: int = NGRAM_MAX, n_min: int = NGRAM_MIN) -> NgramSearch:
    """Prompt lookup, every n shown: for n from n_max down to n_min, the earlier occurrences of the context's
    last n tokens; the longest n with one wins, at its latest occurrence, and drafts what followed it.

    Example: context [5, 6, 7, 8, 5, 6], k=2 -> rows n=4 (no start), 3 (none), 2 ([5, 6] at 0), 1 ([6] at 1);
    n = 2, start 0, draft (7, 8).
    """
    size = len(context)
    arr = np.asarray(context, dtype=np.int64)
    rows: list[NgramRow] = []
    for n in range(min(n_max, size - 1), n_min - 1, -1):
        windows = np.lib.stride_tricks.sliding_window_view(arr[: size - 1], n)  # [size - n, n]: starts 0..size-n-1
        hits = np.flatnonzero((windows == arr[size - n :]).all(axis=1))  # earlier starts j, each with a token after
        rows.append(NgramRow(n, tuple(context[size - n :]), tuple(int(j) for j in hits)))
    best = next((row for row in rows if row.starts), None)
    if best is None:
        return NgramSearch(tuple(rows), None, None, ())
    j = best.starts[-1]  # the latest
    return NgramSearch(tuple(rows), best.n, j, tuple(int(t) for t in context[j + best.n : j + best.n + max(k, 0)]))


def lookup(context: list[int], k: int, n_max: int = NGRAM_MAX, n_min: int = NGRAM_MIN) -> list[int]:
    """Prompt-lookup drafts: what followed the latest earlier occurrence of the context's last n tokens.

    The longest n (from n_max down to n_min) that occurred earlier with at least one token after it wins.
    """
    return list(search(context, k, n_max, n_min).draft)


class PromptLookup:
    """n-gram drafting from the context itself (reads no weights)."""

    name = "lookup"
    needs_hidden = False

    def __init__(self, n_max: int = NGRAM_MAX, n_min: int = NGRAM_MIN):
        self.n_max, self.n_min = n_max, n_min

    def propose(self, context: list[int], k: int, progress: Progress | None = None) -> Proposal:
        began = time.perf_counter()
        tokens = lookup(context, k, self.n_max, self.n_min) if k > 0 else []
        return Proposal(tokens, seconds=time.perf_counter() - began)

    def observe(self, step: Step) -> None:
        pass

    def rewind(self, length: int) -> None:
        pass


def roll_back(session: Session, length: int, saved: Checkpoint | None,
              progress: Progress | None = None) -> Step | None:
    """Keep the first `length` positions of a session; returns the replay pass of a hybrid model, if any.

    Plain transformers forget the KV rows past `length` (`Session.rewind`, exact). A hybrid model's
    recurrent state cannot be cut: the session goes back to `saved` (`Session.restore`; a checkpoint of its
    own taken at or before `length`) and the tokens from there to `length` are fed again in one pass
    (phase "replay", `progress` its pass hook), which is returned.
    """
    if length >= session.position:
        return None
    if not session.recurrent:
        session.rewind(length)
        return None
    tokens = session.tokens[saved.position : length]
    session.restore(saved)
    return session.feed(tokens, phase="replay", progress=progress) if tokens else None


def _add(into: dict[str, int], read: dict[str, int]) -> None:
    for group, nbytes in read.items():
        into[group] = into.get(group, 0) + nbytes


class DraftModel:
    """A smaller model with the same vocabulary, decoding greedily in a session of its own."""

    needs_hidden = False

    def __init__(self, model: Model, target: Model, *, kv_type: str = "f16"):
        check_same_vocabulary(model, target)
        self.model = model
        self.name = f"draft:{model.card.name or model.file.path.name}"
        self.session = Session(model, kv_type=kv_type)
        self._fed: list[int] = []  # tokens the draft session holds, in order
        self._saved: Checkpoint | None = None  # the draft session before this round's drafts (hybrid drafts)

    @classmethod
    def open(cls, path: str | os.PathLike, target: Model, **kwargs) -> DraftModel:
        return cls(Model.open(path), target, **kwargs)

    def propose(self, context: list[int], k: int, progress: Progress | None = None) -> Proposal:
        out = Proposal([])
        if k <= 0:
            return out
        began = time.perf_counter()
        common = 0
        for a, b in zip(self._fed, context[:-1]):
            if a != b:
                break
            common += 1
        if common < len(self._fed):
            replay = roll_back(self.session, common, self._saved, progress)
            del self._fed[common:]
            if replay is not None:
                _add(out.bytes_read, replay.bytes_read)
                out.flops += replay.flops
        # drafts past here may be rejected: a hybrid draft model keeps its state here to come back to
        self._saved = self.session.checkpoint(keep=False) if self.session.recurrent else None
        todo = context[len(self._fed) :]  # the context the draft model has not seen, the pending token last
        for i in range(k):
            step = self.session.feed(todo, phase="draft", progress=progress)
            self._fed.extend(todo)
            _add(out.bytes_read, step.bytes_read)
            out.flops += step.flops
            best = int(np.argmax(step.logits))
            out.tokens.append(best)
            todo = [best]
        out.seconds = time.perf_counter() - began
        return out

    def observe(self, step: Step) -> None:
        pass

    def rewind(self, length: int) -> None:
        pass


def check_same_vocabulary(draft: Model, target: Model) -> None:
    """Refuse a draft model whose token ids mean other tokens (one line, what to do)."""
    a, b = draft.file.get("tokenizer.ggml.tokens"), target.file.get("tokenizer.ggml.tokens")
    if draft.config.n_vocab != target.config.n_vocab or (isinstance(a, list) and isinstance(b, list) and a != b):
        raise WalkthroughError(
            f"draft model {draft.file.path.name} has another vocabulary than {target.file.path.name} "
            f"({draft.config.n_vocab} vs {target.config.n_vocab} tokens or different token texts); "
            "choose a draft model from the same family"
        )
