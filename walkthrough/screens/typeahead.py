"""Keys typed ahead of a busy app: every key is handled, in order, except that a quit key goes first.

Textual's terminal driver reads keys on its own thread and hands each one to
the event loop, which handles them one after another. A key that switches the
stage or a window resize costs real layout work, so a storm of keys (measured
with tests/bench/key_storm.py: 1,000 keys with resizes on a loaded 2-core
machine) leaves seconds of keys waiting. No key is dropped: a user typing ahead
gets every key they typed, in order (`vv` moves two views).

A quit key is the exception. Typed while other keys still wait (at the app, or
passed on to the screen shown and not yet handled there), it ends the app
at once and the keys still waiting are not handled: `q` never waits behind a
storm. While the app is behind, what a key will meet when its turn comes (which
stage, which dialog) is not what the user saw when they typed it, so q is read
as what it says on every stage, quit, also where it would close a dialog (help,
the glossary, the four calls: nothing is lost by quitting there). Only a text
field keeps it as a letter. When the app keeps up, no key waits and q does what
the screen it meets binds it to; on a stage the app quits as soon as the key
reaches it, without passing it on to the stage (whose own queue can be busy
redrawing after a storm of resizes).

Escape then a letter, typed quickly or read late by a busy app, reach Textual
as one chord (`alt+q`: the terminal sends Alt+letter as escape and the letter).
The app binds no Alt keys, so such a chord is read as the two keys it holds:
escape and q, after a storm, still close a dialog and quit.

A text field keeps q as a letter, unless an escape typed before it still waits:
escape leaves the field (closes the message editor, the tensor filter), so the
q after it means quit, and goes first like any other.

Keys take effect in the order typed, with one exception Textual's design
leaves: Enter on a list or table (a chat message, a metadata row) reaches its
stage as a message posted after the key, so a key typed after the Enter can
switch the stage or open a dialog first. A selection that reaches a stage no
longer on top is dropped (`when_shown`), so a storm never opens the message
editor over the four calls or over another stage (seen in
tests/bench/key_storm.py: seed 108 left an editor over the four calls, and the
q typed after the storm went into its text). The bindings a dialog's escape
runs are priority bindings, run when the escape reaches the app, in order with
the keys after it (a plain binding runs when the key comes back from the
focused field, after the field took the keys typed behind it).

Example: 200 keys queued behind 20 s of layout work, then q -> the app ends
within a second; the 200 keys are not handled.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from textual import events

QUIT_KEYS = frozenset({"q", "ctrl+q"})


class Typeahead:
    """Counts the keys posted to the app and not yet handled; says when a quit key should go first."""

    def __init__(self) -> None:
        self.waiting = 0  # keys posted, not yet handled
        self.escapes = 0  # of those, escapes (each leaves a text field or closes a dialog)
        self.quitting = False  # a quit key went ahead: the keys still waiting are not handled

    def posted(self, message: object, typing: Callable[[], bool], screen_busy: Callable[[], bool]) -> bool:
        """Note a message posted to the app; True when it is a quit key that should end the app now.

        Args:
            typing: whether keys go to a text field now (where q is a letter).
            screen_busy: whether the screen shown has messages still to handle (keys the app passed on to it).
        """
        if not isinstance(message, events.Key) or message.is_forwarded:
            return False
        if message.key in QUIT_KEYS and (self.waiting or screen_busy()) and (self.escapes or not typing()):
            self.quitting = True
            return True
        self.waiting += 1
        self.escapes += message.key == "escape"
        return False

    def handled(self, message: object) -> bool:
        """Note a message reaching the app's handler; False when the app is quitting and it is a key or resize."""
        if isinstance(message, events.Key) and not message.is_forwarded:
            self.waiting = max(self.waiting - 1, 0)
            if message.key == "escape":
                self.escapes = max(self.escapes - 1, 0)
        return not (self.quitting and isinstance(message, (events.Key, events.Resize)))


def split_chord(message: object) -> tuple[events.Key, events.Key] | None:
    """An `alt+<letter>` key as the escape and letter it was sent as; None for any other message."""
    if not isinstance(message, events.Key) or message.is_forwarded or not message.key.startswith("alt+"):
        return None
    letter = message.key.removeprefix("alt+")
    if len(letter) != 1 or not letter.isalpha():
        return None
    return events.Key("escape", "\x1b"), events.Key(letter, letter)


def when_shown(handler: Callable) -> Callable:
    """A screen's handler of its widgets' messages (a selection) that acts only while the screen is on top.

    Such a message is posted after the key that made it; by the time it is handled, a later key may have
    covered the screen (a dialog) or switched the stage. Acting then would open a dialog over a screen the
    user no longer sees.
    """

    @functools.wraps(handler)
    def guarded(screen, message):
        if screen.is_active:
            return handler(screen, message)
        return None

    return guarded
