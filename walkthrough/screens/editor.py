"""A small modal editor for one chat message: its role and its content.

Returns the edited message (a {"role", "content"} dict) on ctrl+s, or None on
escape. The content is the user's text: it is kept exactly as typed.
"""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label, TextArea

from walkthrough.inspect.template import content_text
from walkthrough.screens.footer import KeysFooter

ROLES = ("system", "user", "assistant")


class MessageEditor(ModalScreen[dict | None]):
    """Edit a message's role and content."""

    CSS_PATH = "editor.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("ctrl+s", "save", "Save", id="editor.save", priority=True),
        Binding("escape", "cancel", "Cancel", id="editor.cancel", priority=True),  # in order (typeahead.py)
    ]

    def __init__(self, message: dict[str, str], title: str) -> None:
        super().__init__()
        self.message = message
        self.title_text = title

    def compose(self) -> ComposeResult:
        with Vertical(id="editor-box"):
            yield Label(self.title_text, id="editor-title")
            yield Input(self.message.get("role", "user"), placeholder="role: system, user or assistant",
                        id="editor-role")
            yield TextArea(content_text(self.message.get("content")), id="editor-content", soft_wrap=True)
        yield KeysFooter()

    def on_mount(self) -> None:
        self.query_one(TextArea).focus()

    def action_save(self) -> None:
        role = self.query_one("#editor-role", Input).value.strip() or "user"
        self.dismiss({"role": role, "content": self.query_one(TextArea).text})

    def action_cancel(self) -> None:
        self.dismiss(None)
