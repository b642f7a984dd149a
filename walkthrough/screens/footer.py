"""The footer of every screen: Textual's `Footer`, rebuilt only when the keys it shows have changed.

Textual's footer rebuilds itself (a widget per key, each one restyled) after
every focus change, screen switch and binding refresh, once per request even
when several arrive before the next frame. In a storm of keys
(tests/bench/key_storm.py) these rebuilds were the largest share of the UI
thread's work after stage switches. This footer gathers the requests made before
the next frame into one, and rebuilds only when what it would show (each key,
its label, whether it is enabled) differs from what it shows.

Example: `n` on stage 3 -> the screen, its focus and the app's run keys each ask
for a rebuild -> one comparison, and no rebuild if the new stage's keys are the
same as when it was last shown.
"""

from __future__ import annotations

from typing import Any

from textual.screen import Screen
from textual.widgets import Footer


class KeysFooter(Footer):
    """A `Footer` that rebuilds at most once a frame, and only when its keys changed."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._rebuild_pending = False
        self._shown: tuple | None = None

    def bindings_changed(self, screen: Screen) -> None:
        self._bindings_ready = True  # what Footer.bindings_changed does first (its compose waits for it)
        if not screen.app.app_focus or not self.is_attached or screen is not self.screen:
            return
        if not self._rebuild_pending:
            self._rebuild_pending = True
            self.call_after_refresh(self._rebuild)

    def watch_show_command_palette(self, _show: bool) -> None:
        if self.is_attached:
            self.bindings_changed(self.screen)

    async def _rebuild(self) -> None:
        self._rebuild_pending = False
        if not self.is_attached:
            return
        shown = self._keys()
        if shown != self._shown:
            self._shown = shown
            await self.recompose()

    def _keys(self) -> tuple:
        """What `Footer.compose` reads: each shown binding with its state, and the palette key's setting."""
        keys = tuple((key, binding.key, binding.action, binding.description, binding.group, enabled, tooltip)
                     for key, (_node, binding, enabled, tooltip) in self.screen.active_bindings.items()
                     if binding.show)
        return keys, self.show_command_palette, self.compact
