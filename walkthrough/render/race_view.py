"""The line under the speed race that says how the reading lane's rate was found (costs.race_rates)."""

from __future__ import annotations

from rich.text import Text

from walkthrough.costs.race_rates import READING_SOURCE, READING_WPM, reading_rate, words_in
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
