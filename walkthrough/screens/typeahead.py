"""Keys typed faster than the app can follow are dropped, so a storm of keys cannot wedge it.

Textual's terminal driver reads keys on its own thread and hands each one to the
event loop; a key becomes a message only when the loop gets to it. When every key
costs real work on the loop (a stage switch lays out a screen, a resize restyles
it), a storm of keys queues more work than the loop can do: measured with
tests/bench/key_storm.py (300-500 keys with resizes, tiny model, loaded 2-core
machine), keys waited about 20 s before becoming messages, and `q` took 20-57 s to
end the app.

So keys that reach the app more than `STALE_SECONDS` after they were typed are
counted, and once more than `KEEP_STALE` of them have come in a row, the rest of
the run is dropped, except a quit key: a user who types far ahead of a busy app
loses the keys it could not follow, and `q` is never kept waiting behind them. A
few keys typed during one slow moment (5 then enter while stage 5 is first laid
out) are all kept; keys the app keeps up with reset the count.

Example: 200 keys queued behind 20 s of layout work -> the first 8 are handled, the rest dropped; q is handled.
"""

from __future__ import annotations

from textual import events
from textual._time import get_time  # the clock Textual stamps each message with (`Message.time`)

QUIT_KEYS = frozenset({"q", "ctrl+q", "ctrl+c"})
STALE_SECONDS = 0.5  # a key older than this when it reaches the app is stale
KEEP_STALE = 8  # stale keys in a row that are still handled


class Typeahead:
    """Counts stale keys in a row (see the module docstring); `drop` is called for every message posted."""

    def __init__(self) -> None:
        self.stale_run = 0

    def drop(self, message: object) -> bool:
        """True for a key, not a quit key, beyond the first `KEEP_STALE` stale keys in a row."""
        if not isinstance(message, events.Key) or message.key in QUIT_KEYS:
            return False
        if get_time() - message.time < STALE_SECONDS:
            self.stale_run = 0
            return False
        self.stale_run += 1
        return self.stale_run > KEEP_STALE
