"""What rounds of speculative decoding add up to: acceptance, tokens per pass, bytes per token, experts woken.

Computed from the verification passes' `Step` records (`speculative.py`), so
`trace` and the app show the same figures.

- alpha, the acceptance rate: drafts accepted / drafts proposed (as llama.cpp
  reports its "accept" rate), over the rounds so far.
- expected tokens per round at that alpha, for a round of k drafts when each
  draft is right with probability alpha independently:
  1 + alpha + ... + alpha^k = (1 - alpha^(k+1)) / (1 - alpha), averaged over
  the rounds' own k (a drafter may propose fewer than asked); measured: the
  tokens the rounds actually emitted, divided by the rounds.
- weight bytes per token: what the verification passes, the drafter and any
  replay passes read of the weights (KV cache and recurrent state excluded),
  divided by the tokens emitted; plain decoding reads the card's
  `bytes_per_token` per token.
- experts woken: per MoE layer, the distinct experts the k + 1 rows of a
  verification pass chose (their union, all read once), against the
  `n_experts_used` one decoded token wakes.

Example: 4 rounds of 3 drafts with 2, 0, 3, 1 accepted: alpha = 6 / 12 = 0.5,
expected (1 - 0.5^4) / 0.5 = 1.875 tokens per round, measured (3+1+4+2) / 4 = 2.5.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from walkthrough.engine.steps import Step

NOT_WEIGHTS = ("kv_cache", "state", "total")  # byte groups that are not weights


def weight_bytes(read: dict[str, int] | None) -> int:
    """Bytes of weights in a `bytes_read` record (KV cache and recurrent state left out)."""
    return sum(v for k, v in (read or {}).items() if k not in NOT_WEIGHTS)


def expected_tokens(alpha: float, k: int) -> float:
    """Tokens one round of k drafts emits on average when each draft is right with probability alpha."""
    if alpha >= 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


@dataclass(frozen=True)
class RoundStats:
    """Sums over the verification passes of a run."""

    rounds: int
    drafted: int
    accepted: int
    tokens: int  # emitted by the rounds
    expected_per_round: float  # at the measured alpha, for each round's own number of drafts
    weight_bytes: int  # verification passes + drafter + replays
    drafter_bytes: int
    replay_bytes: int
    seconds: float  # verification passes + drafter, wall time
    experts_woken: float | None  # mean distinct experts per MoE layer per verification pass; None for dense

    @property
    def alpha(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def tokens_per_round(self) -> float:
        return self.tokens / self.rounds if self.rounds else 0.0

    @property
    def bytes_per_token(self) -> float:
        return self.weight_bytes / self.tokens if self.tokens else 0.0

    @property
    def seconds_per_round(self) -> float:
        return self.seconds / self.rounds if self.rounds else 0.0


def round_stats(steps: Sequence[Step]) -> RoundStats:
    """Figures over the verification passes among `steps` (other passes are ignored)."""
    rounds = [s for s in steps if s.draft is not None]
    drafted = sum(len(s.draft.tokens) for s in rounds)
    accepted = sum(s.draft.accepted for s in rounds)
    alpha = accepted / drafted if drafted else 0.0
    expected = float(np.mean([expected_tokens(alpha, len(s.draft.tokens)) for s in rounds])) if rounds else 0.0
    woken = [len(t.woken) for s in rounds for t in s.layers if t.experts is not None]
    drafter = sum(weight_bytes(s.draft.bytes_read) for s in rounds)
    replay = sum(weight_bytes(s.draft.replay) for s in rounds)
    return RoundStats(
        rounds=len(rounds),
        drafted=drafted,
        accepted=accepted,
        tokens=sum(len(s.generated) for s in rounds),
        expected_per_round=expected,
        weight_bytes=sum(weight_bytes(s.bytes_read) for s in rounds) + drafter + replay,
        drafter_bytes=drafter,
        replay_bytes=replay,
        seconds=sum(s.seconds + s.draft.seconds for s in rounds),
        experts_woken=float(np.mean(woken)) if woken else None,
    )
