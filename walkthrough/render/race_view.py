"""The line under the speed race that says how the reading lane's rate was found, and the race's finish
times as plain lines for `walkthrough trace --rates` (costs.race_rates)."""

from __future__ import annotations

from rich.text import Text

from walkthrough.costs.race import finish_time
from walkthrough.costs.race_rates import (
    READING_SOURCE,
    READING_WPM,
    reading_rate,
    typed_lanes,
    words_in,
)
from walkthrough.words import count


def reading_line(answer: str, n_tokens: int) -> Text:
    """'reading: 238 words/min x 30 tokens / 20 words = 5.95 tokens/s (source)', or why there is no lane."""
    rate = reading_rate(answer, n_tokens)
    if rate is None:
        return Text("reading: the answer has no words to read yet", style="dim")
    return Text.assemble(
        ("reading ", "bold"),
        f"{READING_WPM:g} words/min / 60 x {count(n_tokens, 'token')} / {count(words_in(answer), 'word')} "
        f"of this answer = {rate:.3g} tokens/s",
        (f" (adults reading silently: {READING_SOURCE})", "dim"),
        no_wrap=False,
    )


def rate_lines(rates: list[float], answer: str, n_tokens: int) -> list[str]:
    """How long this answer takes at each rate and at reading speed, from its first token to its last."""
    lanes = typed_lanes(rates, answer, n_tokens)
    lines = [f"the answer ({count(n_tokens, 'token')}, {count(words_in(answer), 'word')}) written at:"]
    for lane in lanes:
        lines.append(f"  {lane.tokens_per_s:.3g} tokens/s ({lane.label}): {finish_time(lane, n_tokens):.1f} s")
    lines.append(" ".join(reading_line(answer, n_tokens).plain.split()))
    return lines
