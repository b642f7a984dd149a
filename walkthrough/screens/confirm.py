"""Asking before a key throws a run away: `r` (restart) and `c` (chunk size) discard every pass run so far.

`discard_question(state, running)` says what would be lost ("Discard this run: 87
tokens generated?"), or None when nothing would be (no pass run, none running),
in which case the key acts at once. Otherwise `ConfirmDiscard` asks on one line
over the stage: `y` discards, `n` or `escape` keeps the run. Any other key keeps
the run too, so keys typed ahead (or a storm of them) answer the question instead
of queueing behind it, and `q` quits at once, as everywhere.

Example: after 3 prefill passes and 87 decoded tokens, r asks
"Discard this run: 88 tokens generated? y / n" (the last prefill pass picks the first token).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import ModalScreen
from textual.widgets import Static

from walkthrough.screens.footer import KeysFooter

if TYPE_CHECKING:
    from walkthrough.screens.state import RequestState

ANSWER_KEYS = frozenset({"y", "n", "escape", "q"})  # handled by the bindings; any other key keeps the run


def _count(n: int, one: str, many: str) -> str:
    return f"{n:,} {one if n == 1 else many}"


def discard_question(state: RequestState, running: bool) -> str | None:
    """What `r` / `c` would throw away, as a question; None when nothing (no pass run and none running)."""
    if not state.steps and not running:
        return None
    generated = len(state.answer_ids())
    if generated:
        lost = _count(generated, "token generated", "tokens generated")
    elif state.steps:
        lost = _count(len(state.prefill_steps), "prefill pass run", "prefill passes run")
    else:
        lost = "the pass now running"
    if running and state.steps:
        lost += ", and the pass now running"
    return f"Discard this run: {lost}?"


class ConfirmDiscard(ModalScreen[bool]):
    """One line over the stage: discard the run (y) or keep it (n, escape, or any other key)."""

    CSS_PATH = "confirm.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "Discard", id="confirm.yes"),
        Binding("n,escape", "answer(False)", "Keep", id="confirm.no"),
        Binding("q", "app.quit", "Quit", id="confirm.quit"),
    ]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question
        self.answered = False

    def compose(self) -> ComposeResult:
        yield Static(Text.assemble(self.question, ("  y / n", "bold")), id="confirm-question")
        yield KeysFooter()

    def action_answer(self, discard: bool) -> None:
        if not self.answered:  # a second key before the screen is gone must not pop the stage under it
            self.answered = True
            self.dismiss(discard)

    def on_key(self, event: events.Key) -> None:
        if event.key in ANSWER_KEYS:
            return  # on to the bindings
        event.stop()
        event.prevent_default()
        self.action_answer(False)
