"""One request run through a model: prefill the prompt in chunks, then decode token by token.

Each pass is one call of the forward pass and yields one `Step`:

    session = Session(model)                       # KV cache at F16, as llama.cpp by default
    for step in session.prefill(ids, chunk=32, sampler=sampler):
        ...                                        # the last prefill step carries the first chosen token
    for step in session.decode(sampler, max_tokens=100):
        ...                                        # feeds the previous choice, picks the next

`prefill` and `decode` are generators, so a caller (the UI, `trace`) shows each
pass as it ends. `generate` is `request` (below) then `decode`, with the one counting rule every
caller uses: `max_tokens` is the number of tokens the run picks (the last
prefill pass picks the first, each decode pass one more), so a run makes at
most `max_tokens - 1` decode passes. Generation stops when the chosen token
ends a turn (the model's end-of-generation ids, `Config.end_ids`: EOS, EOT and
`<|im_end|>`-like control tokens, as llama.cpp decides them) or when the cap is
reached; the pass that picked the last allowed token has `step.capped` set.

Progress inside a pass, and interrupting it (the hook every engine implements,
`LlamaSession` too): `feed`, `prefill`, `request`, `decode` and `generate` take
`progress`, a callable `progress(layers_done, n_layers)` called before the first
layer (0) and after each layer. It may raise `Cancelled` to abandon the pass at
once: the position, tokens and pending token stay as before the pass; call
`recover()` before using the session again (a hybrid model's linear states were
changed in place). The engine calls it from whatever thread runs the pass and
knows nothing of who listens (the app posts a message from it and checks a
cancel flag):

    def progress(done, total):
        if stop_requested.is_set():
            raise Cancelled()
        print(f"layer {done} of {total}")

The chunk size changes only how the prompt is split into passes: positions,
cache contents, logits and chosen tokens are the same for any chunk size, up
to float summation order (about 1e-6 with plain float products; with
llama.cpp's input rounding, the default, such a difference can occasionally
push a value across a rounding step, as it can in llama.cpp itself).

Going back (a second turn, an edited message, a rejected speculative draft):

    reuse = session.reuse_prefix(new_ids)          # keep the longest common prefix, rewind there
    for step in session.prefill(new_ids[reuse.reused:], sampler=sampler): ...
    # or in one call, with the Reuse record on the first Step and checkpoints placed as llama.cpp does:
    for step in session.request(new_ids, sampler=sampler, marks=user_message_starts): ...

    cp = session.checkpoint()                      # save the state here (hybrid models)
    session.rewind(cp.position)                    # -> the position reached
    draft = session.checkpoint(keep=False)         # a checkpoint of one's own, e.g. before verifying a draft
    session.restore(draft)                         # exactly back there (states, KV length, tokens, logits)

`rewind(p)` forgets every position from p on. A plain transformer's KV cache
is truncated there and nothing else changes: the rows kept are exactly the
ones a fresh run would compute, so what follows is identical to a full
recomputation with the same passes. A hybrid model's linear-attention state
cannot be truncated: the session goes back to the nearest checkpoint at or
before p (its state copies, `checkpoints.Checkpoint`) and `rewind` returns
that position; the caller feeds the tokens from there. `request` and `decode`
take checkpoints where llama.cpp's server does (see `checkpoints`);
`checkpoint()` takes one now. `checkpoints.nbytes` is the memory they take.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator

import numpy as np

from walkthrough.engine import surprisal
from walkthrough.engine.checkpoints import (
    DEFAULT_EVERY,
    Checkpoint,
    Checkpoints,
    Reuse,
    common_prefix,
    copy_states,
)
from walkthrough.engine.glassbox import lane_products
from walkthrough.engine.glassbox.cache import KVCache
from walkthrough.engine.glassbox.model import Model, Progress
from walkthrough.engine.sampler import Sampler, SampleResult
from walkthrough.engine.steps import Step
from walkthrough.errors import WalkthroughError

__all__ = ["Cancelled", "Progress", "Session", "stop_when"]


class Cancelled(Exception):
    """Raised by a `progress` callable to abandon the pass it was called from (not an error to report)."""


def stop_when(cancelled: Callable[[], bool] | None) -> Progress | None:
    """The `progress` hook of a caller that only wants to stop: it raises `Cancelled` at the next layer once
    `cancelled()` is true (None: no hook, nothing to check)."""
    if cancelled is None:
        return None

    def check(done: int, total: int) -> None:
        if cancelled():
            raise Cancelled()

    return check


class Session:
    """The run state of a conversation: the KV cache, the tokens held, checkpoints, last logits, pending token."""

    def __init__(
        self,
        model: Model,
        *,
        kv_type: str = "f16",
        record_attention: bool = False,
        checkpoint_every: int = DEFAULT_EVERY,
        auto_checkpoints: bool = True,
        keep_hidden: bool = False,
        measure_surprisal: bool = False,
        attention_rows: bool = False,
        flash_attention: bool = False,
    ):
        """Args:
            keep_hidden: every pass keeps its final hidden rows (`Step.hidden`, [n, d]), as llama.cpp does for a
                multi-token-prediction drafter; the last layer then runs on every row of a pass.
            measure_surprisal: prefill passes also compute every position's logits, outside the pass's meter
                (its bytes and FLOPs stay the pass's), so each `Step.surprisal` is complete.
            attention_rows: every pass keeps all rows of its attention weights per attention layer
                (`LayerTrace.attention_rows`), the causal matrix `attention_map` assembles.
            flash_attention: attention computes as llama.cpp's flash attention (with the model's exact
                products; `ops.flash_attention`), else as its soft_max and two products.
        """
        self.attention_rows = attention_rows
        self.model = model
        self.measure_surprisal = measure_surprisal
        self.keep_hidden = keep_hidden
        self.cache = KVCache(model.config, kv_type, flash_attention=flash_attention)
        self.record_attention = record_attention
        self.tokens: list[int] = []  # every token fed so far, in order
        self.last_logits: np.ndarray | None = None
        self.pending: int | None = None  # chosen but not yet fed
        self.steps_run = 0
        # saved recurrent states (hybrid models only; auto_checkpoints False: only those `checkpoint()` takes)
        self.checkpoints = Checkpoints(every=checkpoint_every, auto=auto_checkpoints)

    @property
    def position(self) -> int:
        """Positions processed so far (the KV cache length)."""
        return self.cache.length

    @property
    def recurrent(self) -> bool:
        """True when some layer keeps a fixed state that cannot be truncated (hybrid models)."""
        return bool(self.cache.states)

    @property
    def keeps_checkpoints(self) -> bool:
        """True for a hybrid session that takes checkpoints by itself (`auto_checkpoints`)."""
        return self.recurrent and self.checkpoints.auto

    def checkpoint(self, *, keep: bool = True) -> Checkpoint:
        """Save the recurrent states and last logits at the current position.

        With `keep` (hybrid models only) it joins `checkpoints`, where `rewind` and `request` find it; with
        keep=False it is only returned, for `restore` (a speculative draft's, as llama.cpp keeps its
        `spec_ckpt` apart from the prompt's checkpoints).
        """
        logits = None if self.last_logits is None else self.last_logits.copy()
        saved = Checkpoint(self.position, copy_states(self.cache.states), logits)
        if keep and self.recurrent:
            self.checkpoints.add(saved)
        return saved

    def restore(self, saved: Checkpoint) -> None:
        """Go back exactly to `saved` (taken by `checkpoint()` of this session at or before the current position)."""
        if saved.position > self.position:
            raise WalkthroughError(f"cannot restore position {saved.position}: the session holds {self.position}")
        self.cache.truncate(saved.position, saved.states if self.recurrent else None)
        del self.tokens[saved.position :]
        self.checkpoints.drop_after(saved.position)
        self.last_logits = None if saved.logits is None else saved.logits.copy()
        self.pending = None

    def rewind(self, position: int) -> int:
        """Forget every position from `position` on; returns the position reached.

        Exact for plain transformers. A hybrid model goes back to its nearest checkpoint at or before
        `position` (to 0 when there is none), so the result can be smaller. The last logits are kept
        only when a checkpoint had them; the pending token is dropped.
        """
        if not 0 <= position <= self.position:
            raise WalkthroughError(f"cannot rewind to position {position}: the session holds {self.position}")
        if position == self.position:
            return position
        states = None
        self.last_logits = None
        if self.recurrent:
            saved = self.checkpoints.nearest(position)
            position = 0 if saved is None else saved.position
            if saved is not None:
                states = saved.states
                self.last_logits = None if saved.logits is None else saved.logits.copy()
            self.checkpoints.drop_after(position)
        self.cache.truncate(position, states)
        del self.tokens[position:]
        self.pending = None
        return position

    def recover(self) -> int:
        """After a pass was abandoned midway: make the session consistent again; returns the position it holds.

        A pass moves the position and the tokens only when it ends, and attention layers write only rows past
        the position, so a plain transformer has nothing to undo. A hybrid model's linear layers change their
        state in place, layer by layer: the session goes back to its newest checkpoint at or before the
        position (the start when there is none).
        """
        if not self.recurrent:
            return self.position
        saved = self.checkpoints.nearest(self.position)
        if saved is None:
            self.cache.truncate(0)
            self.tokens, self.last_logits, self.pending = [], None, None
            self.checkpoints.drop_after(0)
        else:
            self.restore(saved)
        return self.position

    def reuse_prefix(self, ids: list[int]) -> Reuse:
        """Keep what the session holds of a new prompt `ids` and rewind to there; returns what was kept and why.

        The longest common token prefix is kept, less the prompt's last token when the prompt is all held
        (a pass must compute the last position's logits), and, for hybrid models, only back to a checkpoint.
        """
        ids = [int(i) for i in ids]
        held, common = self.position, common_prefix(self.tokens, ids)
        target = min(common, len(ids) - 1)
        differs = common < min(held, len(ids))
        held_id = self.tokens[common] if differs else None
        stop = "empty" if held == 0 else "last" if target < common else "held" if common == held else "differs"
        reached = self.rewind(max(target, 0))
        checkpoint = reached if self.recurrent and reached < held and reached > 0 else None
        if reached < target:
            stop = "checkpoint"
        return Reuse(
            reused=reached,
            common=common,
            held=held,
            prompt=len(ids),
            stop=stop,
            differs_at=common if differs else None,
            held_id=held_id,
            new_id=ids[common] if differs else None,
            checkpoint=checkpoint,
        )

    def feed(
        self,
        ids: list[int],
        *,
        phase: str,
        sampler: Sampler | None = None,
        all_logits: bool = False,
        progress: Progress | None = None,
    ) -> Step:
        """Run one pass over `ids` at the next positions; sample from its last logits if a sampler is given.

        Raises:
            Cancelled: `progress` asked to stop (call `recover()` before going on).
        """
        ids = [int(i) for i in ids]
        if not ids:
            raise WalkthroughError("a pass needs at least one token")
        self.model.check_ids(ids)
        start = self.cache.length
        previous = self.last_logits  # [V] the distribution the first of `ids` was drawn against
        meter = self.model.meter()
        once = self.model.weights.first_use()  # one-time work so far (weights produced on first use)
        checks = lane_products.checked()  # and matrix shapes checked for the lane products
        began = time.perf_counter()
        measured = self.measure_surprisal and len(ids) > 1 and not all_logits  # rows for surprisal only
        hidden, layers = self.model.hidden(
            np.asarray(ids), start, self.cache, meter, record_attention=self.record_attention,
            all_rows=all_logits or self.keep_hidden, unmetered_rows=measured, attention_rows=self.attention_rows,
            progress=progress,
        )  # [n or 1, d]
        logits = self.model.head(hidden if all_logits else hidden[-1:], meter)  # [n or 1, n_vocab]
        rows = logits if all_logits else None  # [n, n_vocab] every position's logits, when known
        if measured:  # the other rows' head product is not the pass's cost either
            rows = np.concatenate([self.model.head(hidden[:-1], self.model.meter()), logits])
        seconds = time.perf_counter() - began
        now, checks_now = self.model.weights.first_use(), lane_products.checked()
        first_checks = checks_now[0] - checks[0]
        first_seconds = now[0] - once[0] + checks_now[1] - checks[1]  # this pass's share of it
        first_bytes = now[1] - once[1]
        end = start + len(ids)
        self.cache.length = end
        self.tokens.extend(ids)
        self.last_logits = logits[-1]
        self.pending = None
        self.steps_run += 1
        step = Step(
            phase=phase,
            start=start,
            end=end,
            input_ids=ids,
            layers=layers,
            bytes_read=meter.totals(),
            flops=meter.flops,
            kv_len=end,
            kv_bytes=self.cache.nbytes(),
            state_bytes=self.cache.state_bytes,
            logits=logits[-1],
            seconds=max(seconds - first_seconds, 0.0),
            first_use_seconds=first_seconds,
            first_use_bytes=first_bytes,
            first_use_checks=first_checks,
            all_logits=logits if all_logits else None,
            hidden=hidden if self.keep_hidden else None,
            surprisal=surprisal.of_pass(previous, rows, ids),
            engine=self.model.engine,
        )
        if sampler is not None:
            step.sample = self.choose(sampler)
            step.stopped = step.sample.chosen in self.model.config.end_ids
        return step

    def choose(self, sampler: Sampler) -> SampleResult:
        """Sample the next token from the last pass's logits; it is fed by the next `decode` pass."""
        if self.last_logits is None:
            raise WalkthroughError("nothing to sample from: run prefill first")
        result = sampler.sample(self.last_logits)
        self.pending = result.chosen
        return result

    def prefill(
        self,
        ids: Iterable[int],
        *,
        chunk: int | None = None,
        sampler: Sampler | None = None,
        all_logits: bool = False,
        checkpoint_at: Iterable[int] = (),
        progress: Progress | None = None,
    ) -> Iterator[Step]:
        """Process a prompt in passes of `chunk` tokens (all at once if None); one Step per pass.

        With a sampler, the last pass also picks the first generated token (`step.chosen`). Passes also
        end at the absolute positions `checkpoint_at`, where a hybrid session then takes a checkpoint.
        """
        ids = list(ids)
        if not ids:
            raise WalkthroughError("the prompt has no tokens")
        start = self.position
        size = len(ids) if not chunk or chunk <= 0 else chunk
        marks = {p - start for p in checkpoint_at if start < p <= start + len(ids)}
        ends = sorted(set(range(size, len(ids), size)) | marks | {len(ids)})
        at = 0
        for end in ends:
            last = end == len(ids)
            step = self.feed(ids[at:end], phase="prefill", sampler=sampler if last else None, all_logits=all_logits,
                             progress=progress)
            if end in marks and self.keeps_checkpoints:
                self.checkpoint()
                step.checkpointed = True
            at = end
            yield step

    def request(
        self,
        ids: Iterable[int],
        *,
        chunk: int | None = None,
        sampler: Sampler | None = None,
        all_logits: bool = False,
        marks: Iterable[int] = (),
        progress: Progress | None = None,
    ) -> Iterator[Step]:
        """Run the prompt of a new request in this session: reuse what it holds, prefill the rest.

        The first Step carries the `Reuse` record. Hybrid sessions take checkpoints as llama.cpp's server
        does: at `marks` (where user messages start), a few tokens before the end, at the end, and every
        `checkpoint_every` tokens (`Checkpoints.breaks`).
        """
        ids = [int(i) for i in ids]
        if not ids:
            raise WalkthroughError("the prompt has no tokens")
        reuse = self.reuse_prefix(ids)
        breaks = self.checkpoints.breaks(reuse.reused, len(ids), list(marks)) if self.keeps_checkpoints else []
        steps = self.prefill(ids[reuse.reused :], chunk=chunk, sampler=sampler, all_logits=all_logits,
                             checkpoint_at=breaks, progress=progress)
        for i, step in enumerate(steps):
            if i == 0:
                step.reuse = reuse
            yield step

    def decode(
        self,
        sampler: Sampler,
        max_tokens: int,
        *,
        stop_ids: Iterable[int] | None = None,
        all_logits: bool = False,
        progress: Progress | None = None,
    ) -> Iterator[Step]:
        """Feed the pending token and pick the next, one pass per token, until a stop token or max_tokens passes.

        If no token is pending (prefill ran without a sampler), the first one is sampled from the
        last logits before the first pass. Nothing runs if the pending token already ends the turn.
        """
        stops = self.model.config.end_ids if stop_ids is None else frozenset(int(i) for i in stop_ids)
        if self.pending is None:
            self.choose(sampler)
        for _ in range(max_tokens):
            if self.pending in stops:
                return
            step = self.feed([self.pending], phase="decode", sampler=sampler, all_logits=all_logits, progress=progress)
            step.stopped = step.chosen in stops
            every = self.checkpoints.every
            if self.keeps_checkpoints and every > 0 and step.end % every == 0:
                self.checkpoint()
                step.checkpointed = True
            yield step
            if step.stopped:
                return

    def generate(
        self,
        ids: Iterable[int],
        sampler: Sampler,
        max_tokens: int,
        *,
        chunk: int | None = None,
        all_logits: bool = False,
        marks: Iterable[int] = (),
        progress: Progress | None = None,
    ) -> Iterator[Step]:
        """Run the request `ids` (`request`: reuse what the session holds, prefill the rest), then decode.

        One Step per pass, until an end-of-turn token or `max_tokens` picked. The last prefill pass picks
        token 1, each decode pass one more, so at most `max_tokens - 1`
        decode passes run; the pass that picks token `max_tokens` (unless it ends the turn) has
        `capped` set. Example: max_tokens=3 on a 10-token prompt with chunk=4 gives passes
        prefill 0-4, 4-8, 8-10 (picks 1), decode (picks 2), decode (picks 3, capped).

        Raises:
            WalkthroughError: max_tokens < 1, or the prompt is empty.
        """
        if max_tokens < 1:
            raise WalkthroughError(f"max_tokens {max_tokens}: a run picks at least 1 token")
        picked = 0
        last: Step | None = None
        prompt = self.request(ids, chunk=chunk, sampler=sampler, all_logits=all_logits, marks=marks, progress=progress)
        for last in prompt:
            picked += last.chosen is not None
            if picked == max_tokens and not last.stopped:
                last.capped = True
            yield last
        if last is None or last.stopped or last.capped:
            return
        for step in self.decode(sampler, max_tokens - picked, all_logits=all_logits, progress=progress):
            picked += 1
            if picked == max_tokens and not step.stopped:
                step.capped = True
            yield step
