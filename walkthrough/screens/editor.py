"""A small modal editor for one chat message: its role and its content.

Returns the edited message (a {"role", "content"} dict) on ctrl+s, or None on
escape. Escape after a change asks first ("Discard your edit: 42 characters typed?"):
a no leaves the editor open with the text as typed. The content is the user's text: it is kept exactly as typed. The role
must be one the template knows (`inspect.template_roles.known_roles`); another
is refused in one line under the fields, and the editor stays open with the
text as typed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label, TextArea

from walkthrough.inspect.template import content_text
from walkthrough.inspect.template_roles import COMMON_ROLES
from walkthrough.screens.confirm import ConfirmDiscard
from walkthrough.screens.footer import KeysFooter
from walkthrough.textsafe import visible


class MessageEditor(ModalScreen[dict | None]):
    """Edit a message's role and content."""

    CSS_PATH = "editor.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("ctrl+s", "save", "Save", id="editor.save", priority=True),
        Binding("escape", "cancel", "Cancel", id="editor.cancel", priority=True),  # in order (typeahead.py)
    ]

    def __init__(self, message: dict[str, str], title: str, roles: tuple[str, ...] = COMMON_ROLES,
                 ask: Callable[[], str | None] | None = None) -> None:
        """`ask`: what saving would throw away, as a question (None: nothing); asked over the editor, and a
        no leaves the editor open with the text as typed."""
        super().__init__()
        self.message = message
        self.title_text = title
        self.roles = roles
        self.ask = ask

    def compose(self) -> ComposeResult:
        with Vertical(id="editor-box"):
            yield Label(self.title_text, id="editor-title")
            yield Input(self.message.get("role", "user"), placeholder="role: " + ", ".join(self.roles),
                        id="editor-role")
            yield TextArea(content_text(self.message.get("content")), id="editor-content", soft_wrap=True)
            yield Label("", id="editor-error")
        yield KeysFooter()

    def on_mount(self) -> None:
        self.query_one(TextArea).focus()

    def action_save(self) -> None:
        role = self.query_one("#editor-role", Input).value.strip() or "user"
        if role not in self.roles:
            self.query_one("#editor-error", Label).update(Text(
                f"role {visible(role[:40])!r}{'...' if len(role) > 40 else ''} is not one the chat template "
                f"knows; use {', '.join(self.roles)}"))
            self.query_one("#editor-role", Input).focus()
            return
        edited = {"role": role, "content": self.query_one(TextArea).text}
        question = self.ask() if self.ask is not None else None
        if question is None:
            self.dismiss(edited)
        else:
            self.app.push_screen(ConfirmDiscard(question), lambda yes: self.dismiss(edited) if yes else None)

    def action_cancel(self) -> None:
        question = self._unsaved_question()
        if question is None:
            self.dismiss(None)
        else:
            self.app.push_screen(ConfirmDiscard(question), lambda yes: self.dismiss(None) if yes else None)

    def _unsaved_question(self) -> str | None:
        """What escape would throw away, as a question; None when the fields are as they were opened."""
        role = self.query_one("#editor-role", Input).value
        text = self.query_one(TextArea).text
        if role == self.message.get("role", "user") and text == content_text(self.message.get("content")):
            return None
        n = len(text)
        return f"Discard your edit: {n:,} character{'' if n == 1 else 's'} in the message?"
