"""Asking before a key throws work away: a run (`r`, `c`, `u`, `t`, an edit), a message (`d`), a speculative run.

`discard_question(state, running)` says what would be lost ("Discard this run: 87
tokens generated?"), or None when nothing would be (no pass run, none running),
in which case the key acts at once; `delete_question` names the message `d`
deletes (always asked: the message is lost), and `speculate_question` the rounds
of a speculative run. Otherwise `ConfirmDiscard` asks on one line
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
from walkthrough.textsafe import visible

if TYPE_CHECKING:
    from walkthrough.request.state import RequestState

ANSWER_KEYS = frozenset({"y", "n", "escape", "q"})  # handled by the bindings; any other key keeps the run


def _count(n: int, one: str, many: str) -> str:
    return f"{n:,} {one if n == 1 else many}"


def run_loss(state: RequestState, running: bool) -> str | None:
    """What throwing the run away loses ("87 tokens generated"); None when nothing (no pass run, none running)."""
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
    return lost


def discard_question(state: RequestState, running: bool) -> str | None:
    """What `r` / `c` / `u` would throw away, as a question; None when nothing would be lost."""
    lost = run_loss(state, running)
    return None if lost is None else f"Discard this run: {lost}?"


def delete_question(state: RequestState, index: int, running: bool) -> str:
    """`d` on message `index`: the message is always lost, and the run too when it has passes."""
    message = state.messages[index]
    text = message.get("content")
    size = _count(len(text), "character", "characters") if isinstance(text, str) else "not text"
    lost = run_loss(state, running)
    also = "" if lost is None else f" and discard this run ({lost})"
    return f"Delete message {index + 1} ({visible(str(message.get('role'))[:20])}, {size}){also}?"


def speculate_question(tokens: int, rounds: int, running: bool) -> str | None:
    """What restarting a speculative run throws away ("80 tokens written (63 rounds)"); None before it began."""
    if not tokens and not running:
        return None
    lost = "the pass now running"
    if tokens:
        lost = _count(tokens, "token written", "tokens written") + (
            f" ({_count(rounds, 'round', 'rounds')})" if rounds else "")
        if running:
            lost += ", and the pass now running"
    return f"Discard this speculative run: {lost}?"


def calls_question(played: int) -> str | None:
    """What `r` over the four calls throws away (the calls played so far); None before the first is shown."""
    if not played:
        return None
    return f"Discard these four calls: {_count(played, 'call played', 'calls played')}?"


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
