"""Every use of Textual's private parts (and of the process-ending shortcuts) in one place, each
with its reason.

Textual has no public way to do what these do; each was measured to be needed
(tests/bench/key_storm.py, tests/test_quit_on_terminal.py). They are read only
on the Textual major version they were written against (`KNOWN`, which
pyproject.toml's `textual>=8.0,<9` pins). On any other version, or if the part
is gone, each helper falls back to what plain Textual does (its cost is speed
after a key storm or at quit, never correctness), so an upgrade degrades the
app instead of breaking it; tests/test_textual_private.py fails on an upgrade
that removed a part, so it is noticed.

The private parts read here:
- `MessagePump._message_queue`: whether a screen still holds keys to handle, so a `q` typed ahead of
  a busy stage goes first (`pending`, screens/typeahead.py).
- `App._driver`: the terminal driver, to give the terminal back and end the process at once on quit
  instead of Textual's orderly close through seconds of queued redraws (`driver`).
- `DOMNode._css_update_count`: marks a new stage as styled with the app's current CSS, or Textual's
  `switch_mode` restyles every screen twice on a stage's first visit (`mark_styled`).

And the workarounds that use public API against Textual's grain:
- `on_event` overrides that `await asyncio.sleep(0)` (`let_the_loop_in`): Textual handles a node's
  queued messages without returning to the event loop while its queue is not empty; after a storm of
  keys and resizes nothing else ran for seconds, not even the driver handing over `q`.
- `App.post_message` override (walkthrough/app_keys.py): the only place keys are seen as they are
  posted, before the queue; non-key messages (every worker result) leave it after one type check.
- `os._exit` (`end_process`): after a person quits on a terminal, or once the app ended while a
  worker still computes a layer nobody will read, the process ends without joining worker threads.
- `gc.freeze` (`skip_last_collection`): Python's exit runs a full collection over everything the app
  made (1.0-1.3 s of the 1.8-2.3 s from q to the end on the tiny model, tests/bench/key_storm.py
  --keys 0).
"""

from __future__ import annotations

import asyncio
import gc
import os
from typing import TYPE_CHECKING

import textual

if TYPE_CHECKING:
    from textual.app import App
    from textual.driver import Driver
    from textual.message_pump import MessagePump
    from textual.screen import Screen

KNOWN_MAJOR = 8  # the Textual major version these parts were read from


def major(version: str) -> int | None:
    """The major number of a version string, None if it does not start with one.

    Example: major("8.2.8") -> 8; major("dev") -> None
    """
    head = version.split(".", 1)[0]
    return int(head) if head.isdigit() else None


KNOWN = major(getattr(textual, "__version__", "")) == KNOWN_MAJOR


def pending(node: MessagePump) -> bool:
    """Whether `node` (a screen) has messages queued and not yet handled; False when that cannot be
    read."""
    queue = getattr(node, "_message_queue", None) if KNOWN else None
    return queue is not None and not queue.empty()


def driver(app: App) -> Driver | None:
    """The app's terminal driver, None when not running (or not readable on this Textual)."""
    return getattr(app, "_driver", None) if KNOWN else None


def mark_styled(screen: Screen, app: App) -> None:
    """Mark a new screen as styled with the app's current CSS (every sheet is read at start), so
    showing it the first time does not reparse the CSS and restyle every screen; a no-op where that
    cannot be read."""
    if KNOWN and hasattr(app, "_css_update_count"):
        screen._css_update_count = app._css_update_count


async def let_the_loop_in() -> None:
    """Let the event loop run (the driver, the other screens) between two events of one node."""
    await asyncio.sleep(0)


def end_process(code: int) -> None:
    """End the process now: no worker thread joined, no atexit handler, no final collection."""
    os._exit(code)


def skip_last_collection() -> None:
    """Leave every object made so far out of the collector, and stop it: exit does not walk the
    heap."""
    gc.disable()
    gc.freeze()
