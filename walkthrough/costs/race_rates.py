"""Lanes of the speed race at rates the user types and at reading speed (the guide's "race at your rate").

`parse_rates("3 12 60")` reads decode rates in tokens/s (spaces or commas
between them); each becomes a lane that starts writing at once (no time to
first token: the rate alone is raced). The reading lane runs at the speed an
adult reads silently, turned into tokens/s with this answer's own words per
token: tokens/s = words per minute / 60 x tokens / words.

Example: an answer of 30 tokens holding 20 words, read at 238 words a minute ->
238 / 60 x 30 / 20 = 5.95 tokens/s.
"""

from __future__ import annotations

import math
import re

from walkthrough.costs.race import Lane
from walkthrough.errors import WalkthroughError

# Silent reading of English non-fiction by adults: 238 words per minute, the meta-analysis of 190 studies
# in Brysbaert, "How many words do we read per minute? A review and meta-analysis of reading rate",
# Journal of Memory and Language 109 (2019) 104047, https://doi.org/10.1016/j.jml.2019.104047
READING_WPM = 238.0
READING_SOURCE = "Brysbaert 2019, https://doi.org/10.1016/j.jml.2019.104047"
MAX_RATES = 6  # typed lanes at most (each takes a line of the race)
MAX_RATE = 1e6  # tokens/s: beyond this the race is over before it is drawn
_WORD = re.compile(r"[^\W_]+(?:['’-][^\W_]+)*")  # letters or digits, joined by an apostrophe or hyphen


def parse_rates(text: str) -> list[float]:
    """Decode rates in tokens/s from what the user typed ("3 12 60", "3, 12.5").

    Raises:
        WalkthroughError: a piece is not a positive number, or more than `MAX_RATES` were given.
    """
    pieces = [p for p in re.split(r"[\s,;]+", text.strip()) if p]
    if not pieces:
        raise WalkthroughError("rates: type one or more speeds in tokens/s, e.g. 3 12 60")
    if len(pieces) > MAX_RATES:
        raise WalkthroughError(f"rates {text.strip()!r}: at most {MAX_RATES} speeds, e.g. 3 12 60")
    rates = []
    for p in pieces:
        try:
            value = float(p.removesuffix("/s"))
        except ValueError:
            value = math.nan
        if not 0 < value <= MAX_RATE:  # also refuses nan and inf
            raise WalkthroughError(f"rates: {p!r} is not a speed; type tokens/s above 0 and at most "
                                   f"{MAX_RATE:,.0f}, e.g. 3 12 60")
        rates.append(value)
    return rates


def words_in(text: str) -> int:
    """Words of a text as a reader counts them: runs of letters or digits ("don't", "x-ray" are one)."""
    return len(_WORD.findall(text))


def reading_rate(text: str, n_tokens: int, wpm: float = READING_WPM) -> float | None:
    """Tokens/s at which a reader of `wpm` words a minute keeps pace with this answer; None without words."""
    words = words_in(text)
    if words == 0 or n_tokens <= 0:
        return None
    return wpm / 60.0 * n_tokens / words  # [words/s] x [tokens/word]


def typed_lanes(rates: list[float], answer: str, n_tokens: int) -> list[Lane]:
    """A lane per typed rate, then the reading lane (when the answer has words), each writing from t = 0."""
    out = [Lane(f"you {rate:g}/s", 0.0, rate) for rate in rates]
    reading = reading_rate(answer, n_tokens)
    if reading is not None:
        out.append(Lane(f"reading {READING_WPM:g}wpm", 0.0, reading))
    return out
