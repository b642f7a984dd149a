"""One request run through a model: prefill the prompt in chunks, then decode token by token.

Each pass is one call of the forward pass and yields one `Step`:

    session = Session(model)                       # KV cache at F16, as llama.cpp by default
    for step in session.prefill(ids, chunk=32, sampler=sampler):
        ...                                        # the last prefill step carries the first chosen token
    for step in session.decode(sampler, max_tokens=100):
        ...                                        # feeds the previous choice, picks the next

`prefill` and `decode` are generators, so a caller (the UI, `trace`) shows each
pass as it ends. Generation stops when the chosen token ends a turn (the
model's end-of-generation ids, `Config.end_ids`: EOS, EOT and `<|im_end|>`-like
control tokens, as llama.cpp decides them) or after `max_tokens` passes.

The chunk size changes only how the prompt is split into passes: positions,
cache contents, logits and chosen tokens are the same for any chunk size, up
to float summation order (about 1e-6 with plain float products; with
llama.cpp's input rounding, the default, such a difference can occasionally
push a value across a rounding step, as it can in llama.cpp itself).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator

import numpy as np

from walkthrough.engine.cache import KVCache
from walkthrough.engine.model import Model
from walkthrough.engine.sampler import Sampler, SampleResult
from walkthrough.engine.steps import Step
from walkthrough.errors import WalkthroughError


class Session:
    """The run state of one request: the KV cache, the position, the last logits, the pending token."""

    def __init__(self, model: Model, *, kv_type: str = "f16", record_attention: bool = False):
        self.model = model
        self.cache = KVCache(model.config, kv_type)
        self.record_attention = record_attention
        self.tokens: list[int] = []  # every token fed so far, in order
        self.last_logits: np.ndarray | None = None
        self.pending: int | None = None  # chosen but not yet fed
        self.steps_run = 0

    @property
    def position(self) -> int:
        """Positions processed so far (the KV cache length)."""
        return self.cache.length

    def feed(self, ids: list[int], *, phase: str, sampler: Sampler | None = None, all_logits: bool = False) -> Step:
        """Run one pass over `ids` at the next positions; sample from its last logits if a sampler is given."""
        ids = [int(i) for i in ids]
        if not ids:
            raise WalkthroughError("a pass needs at least one token")
        self.model.check_ids(ids)
        start = self.cache.length
        meter = self.model.meter()
        began = time.perf_counter()
        logits, layers = self.model.forward(
            np.asarray(ids), start, self.cache, meter, record_attention=self.record_attention, all_logits=all_logits
        )
        seconds = time.perf_counter() - began
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
            seconds=seconds,
            all_logits=logits if all_logits else None,
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
        self, ids: Iterable[int], *, chunk: int | None = None, sampler: Sampler | None = None, all_logits: bool = False
    ) -> Iterator[Step]:
        """Process a prompt in passes of `chunk` tokens (all at once if None); one Step per pass.

        With a sampler, the last pass also picks the first generated token (`step.chosen`).
        """
        ids = list(ids)
        if not ids:
            raise WalkthroughError("the prompt has no tokens")
        size = len(ids) if not chunk or chunk <= 0 else chunk
        for at in range(0, len(ids), size):
            last = at + size >= len(ids)
            yield self.feed(ids[at : at + size], phase="prefill", sampler=sampler if last else None, all_logits=all_logits)

    def decode(
        self,
        sampler: Sampler,
        max_tokens: int,
        *,
        stop_ids: Iterable[int] | None = None,
        all_logits: bool = False,
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
            step = self.feed([self.pending], phase="decode", sampler=sampler, all_logits=all_logits)
            step.stopped = step.chosen in stops
            yield step
            if step.stopped:
                return
