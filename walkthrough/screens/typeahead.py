"""Keys typed faster than the app can follow are dropped, so a storm of keys cannot wedge it.

Textual's terminal driver reads keys on its own thread and hands each one to the
event loop; a key becomes a message only when the loop gets to it. When every key
costs real work on the loop (a stage switch lays out a screen, a resize restyles
it), a storm of keys queues more work than the loop can do: measured with
tests/bench/key_storm.py (300-500 keys with resizes, tiny model, loaded 2-core
machine), keys waited about 20 s before becoming messages, and `q` took 20-57 s to
end the app.

So a key that reaches the app more than `STALE_SECONDS` after it was typed is
dropped, except a quit key: a user who types ahead of a busy app loses the keys the
app could not follow, and `q` is never kept waiting behind them. Keys the app keeps
up with (every Pilot key, normal typing, the editor) are never dropped.

Example: 200 keys queued behind 20 s of layout work -> each is dropped as it reaches the app; q is handled.
"""

from __future__ import annotations

from textual import events
from textual._time import get_time  # the clock Textual stamps each message with (`Message.time`)

QUIT_KEYS = frozenset({"q", "ctrl+q", "ctrl+c"})
STALE_SECONDS = 0.5  # a key older than this when it reaches the app is dropped


def stale_key(message: object) -> bool:
    """True for a key (not a quit key) that waited `STALE_SECONDS` or more before reaching the app."""
    return (
        isinstance(message, events.Key)
        and message.key not in QUIT_KEYS
        and get_time() - message.time >= STALE_SECONDS
    )
