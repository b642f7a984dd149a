"""The app's side of keys typed ahead of a busy app: q goes first, alt+letter chords split, the loop
let in.

What the rules are and why is in `walkthrough.screens.typeahead`; this mixin is
where the app meets them: as each key is posted (before the queue) and as each
event reaches the app's handler. Measured with tests/bench/key_storm.py.
"""

from __future__ import annotations

from textual import events
from textual.app import App
from textual.message import Message
from textual.widgets import Input, TextArea

from walkthrough import textual_private
from walkthrough.screens.base import StageScreen
from walkthrough.screens.typeahead import QUIT_KEYS, Typeahead, split_chord


class TypeaheadKeys(App):
    """Mixin of the app: every key handled in order, except a quit key, which goes first."""

    def __init__(self) -> None:
        super().__init__()
        self.typeahead = Typeahead()

    def post_message(self, message: Message) -> bool:
        # The only hook that sees a key as it is posted; any other message (a worker's result)
        # passes straight on.
        if not isinstance(message, events.Key) or self.return_code is not None:
            # ending: keys typed now mean nothing, the screens may be gone
            return super().post_message(message)
        chord = split_chord(message)  # escape then a letter read as one alt+ chord
        if chord is not None:
            # both keys, even if the first was refused
            posted = [self.post_message(key) for key in chord]
            return all(posted)
        if self.typeahead.posted(message, self.typing, self._screen_busy):
            self.exit()  # q typed ahead of a busy app goes first
            return True
        return super().post_message(message)

    async def on_event(self, event: events.Event) -> None:
        # keys still waiting when q went ahead are not handled
        if not self.typeahead.handled(event):
            return
        if (isinstance(event, events.Key) and event.key in QUIT_KEYS and not event.is_forwarded
                and isinstance(self.screen, StageScreen) and not self.typing()):
            # what q does on every stage, without waiting for the stage's own queue (a storm's
            # redraws)
            self.exit()
            return
        await super().on_event(event)
        await textual_private.let_the_loop_in()  # the stages and the driver in between events

    def _screen_busy(self) -> bool:
        """The screen shown still has messages to handle (keys the app passed on to it)."""
        return textual_private.pending(self.screen)

    def typing(self) -> bool:
        """Keys go to a text field now (a message's text, the tensor filter)."""
        return isinstance(self.focused, (Input, TextArea))
