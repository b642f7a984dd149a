"""Help for the current stage: what it shows and how to read it first, then every key it answers to."""

from __future__ import annotations

import re
from typing import ClassVar

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import Static

from walkthrough.screens.footer import KeysFooter

GLOSSARY_NOTE = (
    "The terms line above the footer lists the glossary terms this screen shows. g opens the glossary at the "
    "term under the cursor (the selected row of a table, the selected token), then lists the terms on this "
    "screen, then all of them: up / down choose, enter follows a related term, escape closes."
)


def unwrap(text: str) -> str:
    """Join hard-wrapped lines into paragraphs (blank lines separate paragraphs)."""
    return re.sub(r"(?<!\n)\n(?!\n)", " ", text.strip())


class HelpScreen(ModalScreen):
    """The stage's help text and its key table, over the stage."""

    CSS_PATH = "help.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,question_mark,q", "dismiss", "Close", id="help.close")]

    def __init__(self, stage: Screen) -> None:
        super().__init__()
        self.stage = stage

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-box"):
            yield Static(id="help-text")
        yield KeysFooter()

    def on_mount(self) -> None:
        title = getattr(self.stage, "TITLE", "") or type(self.stage).__name__
        text = Text("\n" + unwrap(getattr(self.stage, "HELP", "")))
        keys = Table.grid(padding=(0, 2))
        keys.add_column(style="bold")
        keys.add_column()
        by_action: dict[str, list[str]] = {}  # description -> every key doing it (n and tab: Next stage)
        for active in self.stage.active_bindings.values():
            binding = active.binding
            if active.node is not self.stage:
                continue  # the stage's own keys, not those of the widget that has focus (scrolling...)
            if binding.description:
                shown = by_action.setdefault(binding.description, [])
                label = self.app.get_key_display(binding)  # as the footer writes it: "/", not "slash"
                if label not in shown:
                    shown.append(label)
        for description, labels in by_action.items():
            keys.add_row(", ".join(labels), description)
        keys.add_row("ctrl+p", "command palette: every action by name")
        box = Table.grid()
        box.add_row(Text(f"{title}", style="bold"))
        box.add_row(text)  # what the stage shows first: the keys are what a reader looks up after
        box.add_row(Text("\nKeys", style="bold"))
        box.add_row(keys)
        box.add_row(Text("\n" + GLOSSARY_NOTE))
        self.query_one("#help-text", Static).update(box)
