"""The four calls, over the Chat stage: a request, a follow-up, an edit, a new chat, each with its
reuse and cost.

The screen asks the app to play the calls when it opens and on `r`, and to
measure the cold and warm starts on `c` (`app_calls.py`: jobs of the run
service); it shows what they posted, which the app keeps in `state.calls`.
`c` is greyed until the four calls are done (pressed during the play it would
replace it). Closing the screen, `r` and `c` cancel the job running (it stops
within a layer, or its cold start's process is killed). Once the starts are
measured, the model's lifecycle in a server follows them (`render.lifecycle_view`);
`k` changes its keep-alive window.
"""

from __future__ import annotations

from typing import ClassVar

from rich.console import Group
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from walkthrough.engine.serving.lifecycle import KEEP_ALIVES
from walkthrough.render.lifecycle_view import starts_lifecycle_lines
from walkthrough.render.reuse_text import start_lines, summary_lines, turn_lines
from walkthrough.request.calls import CallsInput
from walkthrough.request.state import Calls
from walkthrough.screens.confirm import calls_question
from walkthrough.screens.footer import KeysFooter
from walkthrough.textsafe import safe_text
from walkthrough.words import count

ANSWER_CHARS = 70  # of each call's answer shown
HEADING = ("The four calls: the request, a follow-up, an edit of its question, a new chat with the "
           "same system prompt. Each is also run from an empty cache.")


class FourCallsScreen(ModalScreen):
    """The scripted sequence, played and measured (what it shows lives in the app's
    `state.calls`)."""

    CSS_PATH = "four_calls.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q", "dismiss", "Close", id="calls.close"),
        Binding("r", "replay", "Play again", id="calls.replay"),
        Binding("c", "starts", "Cold and warm", id="calls.starts"),
        Binding("k", "keep_alive", "Keep-alive", id="calls.keep_alive"),
    ]

    def __init__(self, calls: CallsInput) -> None:
        super().__init__()
        self.calls = calls
        self.shown = ""  # the plain text on screen
        self._done: bool | None = None  # whether the footer last showed the calls as done
        self.keep_index = 0  # the lifecycle's keep-alive, in engine.serving.lifecycle.KEEP_ALIVES

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="calls-box"):
            yield Static(id="calls-text")
        yield KeysFooter()

    def on_mount(self) -> None:
        self.watch(self.app, "state_changed", self._changed, init=False)
        self.action_replay()

    def on_unmount(self) -> None:
        self.app.stop_calls()

    @property
    def played(self) -> Calls:
        """What the calls posted so far (the app keeps it)."""
        return self.app.state.calls or Calls()

    def action_replay(self) -> None:
        """Play the four calls again, once the user agreed to lose the calls played so far (if
        any)."""
        question = calls_question(len(self.played.turns))
        self.app.ask_then(question, lambda: self.app.play_calls(self.calls))

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # greyed until the four calls are done: measuring would replace the play
        if action == "starts":
            done = self.played.summary is not None and self.played.model is not None
            return True if done else None
        if action == "keep_alive":
            return True if self.played.starts is not None else None
        return True

    def action_starts(self) -> None:
        # one at a time: a second `c` does not start another process
        self.app.measure_starts(self.calls)

    def action_keep_alive(self) -> None:
        """The lifecycle with the next keep-alive window."""
        self.keep_index += 1
        self._redraw()

    def _changed(self, fields: frozenset[str]) -> None:
        if "calls" in fields and self.is_attached:
            done = self.played.summary is not None
            if done != self._done:
                self._done = done
                self.refresh_bindings()
            self._redraw()

    def _redraw(self) -> None:
        tok, calls = self.calls.tokenizer, self.played
        parts: list[Text] = [Text(HEADING, style="bold")]
        for n, turn in enumerate(calls.turns, start=1):
            parts.append(Text(f"\n{n}. {turn.label}: {count(len(turn.messages), 'message')}, "
                              f"{count(len(turn.chat.ids), 'prompt token')}", style="bold"))
            parts.extend(safe_text(line) for line in turn_lines(turn, tok.piece))
            answer = turn.answer_text.replace("\n", " ")
            parts.append(Text.assemble(("  answer: ", "dim"), safe_text(answer[:ANSWER_CHARS])))
        if calls.summary is not None:
            parts.append(Text(""))
            parts.extend(safe_text(line) for line in summary_lines(calls.summary))
        if calls.starts is not None:
            lines = start_lines(calls.prompt_tokens, *calls.starts)
            parts.extend(safe_text(line) for line in lines)
            f = self.calls.file
            keep = KEEP_ALIVES[self.keep_index % len(KEEP_ALIVES)]
            # the bar fills the text's own width (the box is at most 110 wide: the screen's width overran it)
            inner = self.query_one("#calls-text", Static).content_region.width or min(self.size.width or 80, 110) - 6
            width = max(inner - 2, 20)
            parts.append(Text(""))
            parts.extend(safe_text(line) for line in
                         starts_lifecycle_lines(calls.starts, keep, f.file_size, f.data_bytes, width))
        if calls.status:
            parts.append(Text(f"\n{calls.status}", style="italic"))
        self.shown = "\n".join(part.plain for part in parts)
        self.query_one("#calls-text", Static).update(Group(*parts))
