"""Rewinding a session: recurrent-state checkpoints and the record of how much of a prompt was reused.

A KV cache is a cache of positions: forgetting everything from position p on
is just a shorter length (`KVCache.truncate`). The fixed state of a
linear-attention layer (Gated DeltaNet, hybrid models such as qwen35moe) is
not: it has folded every token into one matrix and cannot give back the state
it had at an earlier position. So a hybrid session keeps copies of its
states at some positions (checkpoints) and rewinds to the nearest one at or
before the place it wants to go back to, then recomputes the rest.

Where the checkpoints go follows llama.cpp's server (vendored 0.3.36,
tools/server/server-context.cpp: `create_checkpoint`, the prompt loop that
breaks its batches for them, and the restore before a new prompt):
  - at the start of user messages (turn boundaries; the caller names them),
  - a few tokens before the end of a prompt (`END_OFFSET`, llama.cpp's
    `checkpoint_offsets` {4 + n_ubatch, 4}; we keep the 4), so that a next
    turn whose template re-renders the generation prompt still finds one,
  - at the end of a prompt, and every `every` tokens (llama.cpp keeps at most
    `n_ctx_checkpoints` = 32 per slot, `checkpoint_min_step` = 8192 tokens
    apart; the walkthrough's prompts are a few hundred tokens, so it spaces
    them closer),
  - when restoring, the newest checkpoint at or before the target that leaves
    at least one token to compute (a request needs the last position's
    logits), and checkpoints past the target are dropped: they describe a
    history that no longer exists.
A plain transformer needs no checkpoints: every position rewinds for free.

Example: a hybrid session holds 40 tokens with checkpoints at 0, 16 and 32;
a new prompt shares its first 30 tokens with them. Reuse stops at the
checkpoint at 16 (the nearest at or before 30): 16 tokens reused, 14 of the
shared ones recomputed because the state at 30 was never saved.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

END_OFFSET = 4  # checkpoint this many tokens before a prompt's end (llama.cpp's smaller checkpoint offset)
MAX_CHECKPOINTS = 32  # llama.cpp's default n_ctx_checkpoints: the oldest is dropped past this
DEFAULT_EVERY = 64  # tokens between checkpoints inside a long prompt or answer (llama.cpp: 8192 at least)

# Why reuse stopped (Reuse.stop): the cache held nothing; the new prompt continues everything held; a
# token differs; the new prompt is the held tokens or a prefix of them (its last token is recomputed for
# its logits); a hybrid model had to go back to a checkpoint before the common prefix.
STOPS = {
    "empty": "nothing was held: every token is computed",
    "held": "the prompt continues everything the cache held",
    "differs": "a token differs from the one the cache holds at that position",
    "last": "the prompt is all held; its last token is computed again for its logits",
    "checkpoint": "the recurrent state can only go back to a checkpoint before the common prefix",
}


@dataclass
class Checkpoint:
    """The recurrent states of a session after `position` tokens (a copy), and its last logits."""

    position: int
    states: dict[int, dict[str, np.ndarray]]  # layer -> {"conv": [K-1, C], "recurrent": [Hv, dv, dk]}
    logits: np.ndarray | None = None  # [n_vocab] the logits after `position` tokens, if any

    @property
    def nbytes(self) -> int:
        """Bytes this checkpoint keeps (the states; the logits row is not counted, llama.cpp keeps none)."""
        return sum(a.nbytes for state in self.states.values() for a in state.values())


def copy_states(states: dict[int, dict[str, np.ndarray]]) -> dict[int, dict[str, np.ndarray]]:
    """A deep copy of per-layer states."""
    return {layer: {name: a.copy() for name, a in state.items()} for layer, state in states.items()}


@dataclass
class Checkpoints:
    """The checkpoints of one session, oldest first, with llama.cpp's placement and eviction."""

    every: int = DEFAULT_EVERY
    limit: int = MAX_CHECKPOINTS
    auto: bool = True  # taken by themselves where llama.cpp takes them (False: only `Session.checkpoint()`)
    kept: list[Checkpoint] = field(default_factory=list)

    def add(self, checkpoint: Checkpoint) -> None:
        """Keep a checkpoint (replacing one at the same position; dropping the oldest past `limit`)."""
        self.kept = [c for c in self.kept if c.position != checkpoint.position]
        self.kept.append(checkpoint)
        self.kept.sort(key=lambda c: c.position)
        del self.kept[: max(0, len(self.kept) - self.limit)]

    def nearest(self, position: int) -> Checkpoint | None:
        """The newest checkpoint at or before `position`, or None."""
        before = [c for c in self.kept if c.position <= position]
        return before[-1] if before else None

    def drop_after(self, position: int) -> None:
        """Forget checkpoints past `position` (their history was replaced)."""
        self.kept = [c for c in self.kept if c.position <= position]

    @property
    def positions(self) -> list[int]:
        return [c.position for c in self.kept]

    @property
    def nbytes(self) -> int:
        """Memory the checkpoints take."""
        return sum(c.nbytes for c in self.kept)

    def breaks(self, start: int, end: int, marks: Sequence[int] = ()) -> list[int]:
        """Positions in (start, end] where a prompt fed from `start` to `end` should end a pass for a checkpoint.

        They are the `marks` (turn boundaries) inside the range, `END_OFFSET` tokens before the end,
        the multiples of `every`, and the end itself; none when checkpoints are not taken by themselves.
        """
        if not self.auto:
            return []
        wanted = {m for m in marks} | {end - END_OFFSET, end}
        if self.every > 0:
            wanted |= set(range((start // self.every + 1) * self.every, end + 1, self.every))
        return sorted(p for p in wanted if start < p <= end)


@dataclass(frozen=True)
class Reuse:
    """How much of a new prompt a session kept from what it held, and why it stopped there.

    `common` is the longest common token prefix of the held tokens and the prompt; `reused` the positions
    actually kept (at most `common`, at most len(prompt) - 1, and at a checkpoint for hybrid models);
    `computed` the prompt tokens the request must still run. When a token differs, `differs_at` is its
    position and `held_id` / `new_id` the two tokens there.
    """

    reused: int
    common: int
    held: int  # tokens the session held before the request
    prompt: int  # tokens in the new prompt
    stop: str  # a key of STOPS
    differs_at: int | None = None
    held_id: int | None = None
    new_id: int | None = None
    checkpoint: int | None = None  # position of the checkpoint restored (hybrid models), if one was

    @property
    def computed(self) -> int:
        return self.prompt - self.reused

    @property
    def reason(self) -> str:
        """Why reuse stopped, in plain words (token pieces are for callers that have a tokenizer)."""
        return STOPS[self.stop]

    def to_json(self) -> dict:
        out = {"reused": self.reused, "computed": self.computed, "common": self.common, "held": self.held,
               "stop": self.stop, "reason": self.reason}
        if self.differs_at is not None:
            out.update(differs_at=self.differs_at, held_id=self.held_id, new_id=self.new_id)
        if self.checkpoint is not None:
            out["checkpoint"] = self.checkpoint
        return out


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token lists. Example: [1, 2, 3], [1, 2, 4, 5] -> 2."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n
