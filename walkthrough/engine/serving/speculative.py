"""Speculative decoding: a drafter guesses k tokens, one pass of the model checks them all.

One round, after the prompt is prefilled and a token t0 is pending (chosen, not yet fed):

    drafts d1..dk = drafter.propose(context + [t0], k)             # cheap: n-grams, a small model, the MTP block
    one pass over [t0, d1, ..., dk] with the logits of every row    # reads the weights once for k+1 tokens
    row i holds the model's distribution for the token after d_i (after t0 for i = 0):
        sample row 0 -> t1; if t1 == d1 sample row 1 -> t2; ... stop at the first t_i != d_i (or after row k)
    keep t0, d1..dj in the cache (j drafts accepted), forget the rest; t_{j+1} is the new pending token

The rule that keeps the output exactly that of plain decoding: each row is
sampled with the sampler's next uniform draw u, as plain decoding samples the
same position with the same u, so both pick the same token (same seed, same
settings). Seen as rejection sampling: a draft is a point mass q = 1 on d, so
the standard rule (accept with probability min(1, p(d) / q(d)) = p(d); on
rejection draw from the residual max(0, p - q), renormalised: p without d) is
exactly "the model's own draw equals d", which is what is done. At temperature
0 the draw is the argmax: the longest prefix of drafts the model agrees with.
Draws are taken only for positions that emit a token, one per emitted token,
so the generator stays in step with plain decoding.

Rolling back (`drafters.roll_back`): attention layers just forget the
positions past the kept ones (`Session.rewind`). Linear-attention layers
(hybrid models) hold one fixed state that has already absorbed the rejected
drafts: a checkpoint of the round's own is taken before the verification pass
(`Session.checkpoint(keep=False)`) and, when a draft is rejected, the session
goes back to it (`Session.restore`) and the kept tokens are fed again (a "replay" pass, whose bytes the round's `Draft.replay` reports:
what a rejection costs a hybrid model).

Stopping midway: `speculate` and `prefill` take the pass hook `progress`
(`session.Progress`), called at every layer of every pass a round runs (the
drafter's, the verification, a hybrid's replay). When it raises `Cancelled`
the round is abandoned where it was: the session, the drafter and the
sampler are left mid-round, so a caller starts again from a new session
(the same seed gives the same rounds).

Equality with plain decoding holds up to float summation order: a pass over
k+1 rows multiplies in other batches than a pass over one (about 1e-6, as for
prefill chunk sizes), which can only matter where two tokens tie.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator

from walkthrough.engine.glassbox.model import Model
from walkthrough.engine.glassbox.session import Progress, Session
from walkthrough.engine.sampler import Sampler
from walkthrough.engine.serving.drafters import Drafter, DraftModel, PromptLookup, roll_back
from walkthrough.engine.steps import Draft, Step
from walkthrough.errors import WalkthroughError


def speculate(
    session: Session,
    sampler: Sampler,
    drafter: Drafter,
    max_tokens: int,
    *,
    k: int,
    stop_ids: Iterable[int] | None = None,
    progress: Progress | None = None,
) -> Iterator[Step]:
    """Decode up to `max_tokens` tokens in rounds of k drafts and one verification pass; one Step per round.

    Takes over where `Session.decode` would: feeds the pending token (sampled from the last logits first if
    none is pending) and stops at an end-of-generation token or after max_tokens tokens, with the same
    tokens as `Session.decode(sampler, max_tokens)` for the same sampler settings and seed.
    """
    stops = session.model.config.end_ids if stop_ids is None else frozenset(int(i) for i in stop_ids)
    if session.pending is None:
        session.choose(sampler)
    produced = 0
    while produced < max_tokens and session.pending not in stops:
        pending, start = session.pending, session.position
        proposal = drafter.propose(session.tokens + [pending], min(k, max_tokens - produced - 1), progress)
        drafts = proposal.tokens
        # a hybrid model's state to return to if a draft is rejected (kept apart, as llama.cpp's spec_ckpt)
        saved = session.checkpoint(keep=False) if session.recurrent and drafts else None
        step = session.feed([pending, *drafts], phase="verify", all_logits=True, progress=progress)
        drafter.observe(step)
        samples = []
        for row in range(len(drafts) + 1):
            samples.append(sampler.sample(step.all_logits[row]))
            chosen = samples[-1].chosen
            if chosen in stops or row == len(drafts) or chosen != drafts[row]:
                break
        accepted = sum(1 for s, d in zip(samples, drafts) if s.chosen == d)
        kept = start + len(samples)  # the pending token and the drafts before the last emitted token
        replay = roll_back(session, kept, saved, progress)
        if kept < step.end:
            drafter.rewind(kept)  # the replay's rows equal the verification pass's: a drafter has seen them
        session.last_logits = step.all_logits[len(samples) - 1]
        session.pending = samples[-1].chosen
        step.logits = session.last_logits
        step.sample = samples[-1]
        step.stopped = session.pending in stops
        step.kv_len, step.kv_bytes = session.position, session.cache.nbytes()
        step.draft = Draft(drafter.name, k, drafts, accepted, samples, proposal.bytes_read, proposal.flops,
                           proposal.seconds, None if replay is None else replay.bytes_read)
        if replay is not None:
            step.seconds += replay.seconds
            step.flops += replay.flops
        produced += len(samples)
        yield step


def prefill(
    session: Session, drafter: Drafter, ids: Iterable[int], *, chunk: int | None = None,
    sampler: Sampler | None = None, all_logits: bool = False, progress: Progress | None = None,
) -> Iterator[Step]:
    """`Session.prefill`, with the drafter shown every pass (a drafter with a state of its own follows the prompt)."""
    for step in session.prefill(ids, chunk=chunk, sampler=sampler, all_logits=all_logits, progress=progress):
        drafter.observe(step)
        yield step


DRAFTERS = ("lookup", "mtp", "draft")


def make_drafter(kind: str, model: Model, *, draft: str | os.PathLike | None = None, kv_type: str = "f16") -> Drafter:
    """The drafter named `kind` for `model`: "lookup", "mtp" (the file's own block) or "draft" (the file `draft`).

    Raises:
        WalkthroughError: unknown kind, "draft" without a file, a draft file with another vocabulary, no MTP block.
    """
    if kind == "lookup":
        return PromptLookup()
    if kind == "mtp":
        from walkthrough.engine.serving.mtp import MTPDrafter

        return MTPDrafter(model, kv_type=kv_type)
    if kind == "draft":
        if draft is None:
            raise WalkthroughError("drafting with a draft model needs its file: add --draft MODEL.gguf")
        return DraftModel.open(draft, model, kv_type=kv_type)
    raise WalkthroughError(f"unknown drafter {kind!r}; choose one of {', '.join(DRAFTERS)}")
