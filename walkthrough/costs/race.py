"""The speed race: how many of the answer's tokens each machine has written `t` seconds after the prompt was sent.

A lane is a machine's predicted time to first token and decode rate (from
`engine.machines` rows, mid-answer) or what this run measured here
(`engine.measured`). The first token appears at the time to first token; each
later one 1 / rate seconds after the previous.

Example: lane(ttft 0.5 s, 4 tokens/s) at t = 0.4 s -> 0 tokens, t = 0.5 -> 1,
t = 1.0 -> 3, and never more than the answer's length.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from walkthrough.costs.machines import MachineRow
from walkthrough.costs.measured import Measured


@dataclass(frozen=True)
class Lane:
    """One runner: a name, its time to first token (s) and its decode rate (tokens/s)."""

    label: str
    first_token: float
    tokens_per_s: float
    band: float | None = None  # the decode band (+/- fraction) of a modelled lane; None: none (or measured)
    modelled: bool = False  # a machine's predicted speed (not a measured run or a rate typed in)


def tokens_shown(lane: Lane, t: float, n_tokens: int) -> int:
    """Answer tokens this lane has written `t` seconds after the prompt was sent."""
    if t < lane.first_token or n_tokens <= 0:
        return 0
    return min(n_tokens, 1 + math.floor((t - lane.first_token) * lane.tokens_per_s + 1e-9))


def finish_time(lane: Lane, n_tokens: int) -> float:
    """Seconds from sending the prompt to the last of `n_tokens` tokens."""
    return lane.first_token + max(n_tokens - 1, 0) / lane.tokens_per_s


def lanes(rows: list[MachineRow], measured: Measured | None = None) -> list[Lane]:
    """A lane per machine the request fits (in the rows' order), then this machine's measured run if any."""
    out = [Lane(r.id, r.first_token, r.realistic, r.band, modelled=True) for r in rows
           if r.realistic and r.first_token is not None]
    if measured is not None and measured.decode_tokens_per_s:
        out.append(Lane(f"here ({measured.engine}, measured)", measured.prefill_seconds,
                        measured.decode_tokens_per_s))
    return out
