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

from itertools import groupby
from typing import Any

from textual.app import ComposeResult
from textual.containers import HorizontalGroup
from textual.screen import Screen
from textual.widgets import Footer
from textual.widgets._footer import FooterKey, FooterLabel, KeyGroup

MAX_ROWS = 2  # a footer whose keys do not fit on one line takes a second one (80 columns: Chat, Costs...)
MORE = "… ? lists every key"  # ends the last row when even two lines cannot hold the keys


class KeysFooter(Footer):
    """A `Footer` that rebuilds at most once a frame, and only when its keys changed; keys that do not fit
    on one line go on a second one (Textual's footer cut them off, or ran them under the palette key)."""

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
        """What `compose` reads: each shown binding with its state, the palette key's setting, the width."""
        keys = tuple((key, binding.key, binding.action, binding.description, binding.group, enabled, tooltip)
                     for key, (_node, binding, enabled, tooltip) in self.screen.active_bindings.items()
                     if binding.show)
        return keys, self.show_command_palette, self.compact, self._width()

    def on_resize(self) -> None:
        if self.is_attached:
            self.bindings_changed(self.screen)

    def _width(self) -> int:
        return self.size.width or self.app.size.width

    def _items(self) -> list[tuple[Any, list[tuple[Any, bool, str]]]]:
        """The shown keys as the footer lays them out: (group or None, [(binding, enabled, tooltip)]), one
        entry per action (its first key), consecutive keys of one group together."""
        first: dict[str, tuple[Any, bool, str]] = {}
        for _node, binding, enabled, tooltip in self.screen.active_bindings.values():
            if binding.show and binding.action not in first:
                first[binding.action] = (binding, enabled, tooltip)
        items = []
        for group, members in groupby(first.values(), lambda m: m[0].group):
            members = list(members)
            if group is not None and len(members) > 1:
                items.append((group, members))
            else:
                items.extend((None, [m]) for m in members)
        return items

    def _palette_width(self) -> int:
        """Cells the palette key takes at the right end (its border and padding too), 0 when not shown."""
        found = self.screen.active_bindings.get(self.app.COMMAND_PALETTE_BINDING)
        if not (self.show_command_palette and self.app.ENABLE_COMMAND_PALETTE and found):
            return 0
        binding = found[1]
        return len(self.app.get_key_display(binding)) + 1 + len(binding.description) + 2

    def _item_width(self, group: Any, members: list[tuple[Any, bool, str]]) -> int:
        """Cells an item takes in a compact footer: "k Label" and a space; a group: a space, its keys, its label
        padded a space each side (" pn Stage ")."""
        keys = sum(len(self.app.get_key_display(binding)) for binding, _, _ in members)
        if group is not None:
            return keys + len(group.description) + 3 + (0 if self.compact else 2 * len(members))
        description = members[0][0].description
        return keys + (1 + len(description) if description else 0) + (1 if self.compact else 3)

    def compose(self) -> ComposeResult:
        if not self._bindings_ready:
            return
        items = self._items()
        width = self._width() - self._palette_width()
        rows: list[list] = [[]]
        used = 0
        for item in items:
            need = self._item_width(*item)
            if used + need > width and rows[-1]:
                if len(rows) == MAX_ROWS:
                    while rows[-1] and used + len(MORE) > width:
                        used -= self._item_width(*rows[-1].pop())
                    rows[-1].append(None)  # the "more" label
                    break
                rows.append([])
                used = 0
            rows[-1].append(item)
            used += need
        if len(rows) == 1 and None not in rows[0]:
            self.styles.layout, self.styles.height = "horizontal", 1
            yield from super().compose()  # Textual's own footer: everything fits
            return
        self.styles.layout, self.styles.height = "vertical", len(rows)
        for row in rows:
            with HorizontalGroup():
                for item in row:
                    if item is None:
                        yield FooterLabel(MORE)
                    else:
                        yield from self._item_widgets(*item)

    def _item_widgets(self, group: Any, members: list[tuple[Any, bool, str]]) -> ComposeResult:
        """One item's widgets, as Textual's footer makes them (a group: its keys, then its label)."""
        def key(binding: Any, enabled: bool, tooltip: str, description: str, classes: str = "") -> FooterKey:
            return FooterKey(binding.key, self.app.get_key_display(binding), description, binding.action,
                             disabled=not enabled, tooltip=tooltip or binding.description,
                             classes=classes).data_bind(compact=Footer.compact)

        if group is None:
            binding, enabled, tooltip = members[0]
            yield key(binding, enabled, tooltip, binding.description)
            return
        with KeyGroup(classes="-compact" if group.compact else ""):
            for binding, enabled, tooltip in members:
                yield key(binding, enabled, tooltip, "", "-grouped")
        yield FooterLabel(group.description)
