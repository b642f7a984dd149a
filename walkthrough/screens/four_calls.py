"""The four calls, over the Chat stage: a request, a follow-up, an edit, a new chat, each with its reuse and cost.

A worker plays the scripted sequence (`engine.turns.FourCalls`) from the current
messages in a session of its own, on its own `Model` of the opened file (so it
never shares a weight cache with the stage's run, and its first call pays the
first use of the weights, as a server's first request does). Each call is also
run from an empty cache, so "with" and "without reuse" are both measured. Then
it measures the first request's first token from a fresh process (a cold start)
against this process (warm, and with the prompt's KV cache kept), when asked. The worker
posts each result in a message; the handlers, on the UI thread, store it and
redraw. `c` measures the cold and warm starts (a few seconds: a new Python process),
once the four calls are done (greyed while they play, so it cannot cancel them).

Escape, `r` and `c` cancel the worker running (the play or the measurement): it
stops at the next layer of its pass (the engine's `Cancelled`, as the stage's
step worker does) or kills the cold start's process, and whatever it posted
is dropped once it was cancelled (each message names its worker), so a new
play starts from nothing and gives what an uncancelled one gives.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from rich.console import Group
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import Static
from textual.worker import get_current_worker

from walkthrough.errors import WalkthroughError
from walkthrough.screens.footer import KeysFooter
from walkthrough.screens.messages import FromWorker
from walkthrough.screens.reuse_text import start_lines, summary_lines, turn_lines
from walkthrough.textsafe import safe_text
from walkthrough.words import count

if TYPE_CHECKING:  # the engine loads when the calls play, not when the app starts
    from walkthrough.engine.coldstart import StartTimes
    from walkthrough.engine.turns import Summary, Turn

ANSWER_CHARS = 70  # of each call's answer shown


@dataclass(frozen=True)
class CallsInput:
    """What the calls need from the request: the file, its tokenizer and template, the messages, the knobs."""

    path: Path
    file: Any  # walkthrough.inspect.gguf.GGUFFile
    tokenizer: Any
    template: str
    messages: list[dict]
    settings: Any  # walkthrough.engine.sampler.SamplerSettings
    chunk: int
    max_tokens: int


class FourCallsScreen(ModalScreen):
    """The scripted sequence, played and measured."""

    CSS_PATH = "four_calls.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q", "dismiss", "Close", id="calls.close"),
        Binding("r", "replay", "Play again", id="calls.replay"),
        Binding("c", "starts", "Cold and warm", id="calls.starts"),
    ]

    @dataclass
    class Played(FromWorker):
        """One call finished (on the worker's own model, kept for the warm starts)."""

        turn: Turn
        model: Any

    @dataclass
    class Finished(FromWorker):
        """The four calls' sums."""

        summary: Summary

    @dataclass
    class Started(FromWorker):
        """The first request's first token: cold (a fresh process), warm, warm with its KV cache kept."""

        starts: tuple[StartTimes, StartTimes, StartTimes]
        prompt_tokens: int

    @dataclass
    class Failed(FromWorker):
        error: str

    @dataclass
    class Passed(FromWorker):
        """A pass of the current call ended (`what` says which)."""

        what: str

        def can_replace(self, message: Message) -> bool:
            return isinstance(message, FourCallsScreen.Passed)

    def __init__(self, calls: CallsInput) -> None:
        super().__init__()
        self.calls = calls
        self.turns: list[Turn] = []
        self.summary: Summary | None = None
        self.started: FourCallsScreen.Started | None = None
        self.model = None  # the worker's Model, kept for the warm starts
        self.status = "starting"
        self.shown = ""  # the plain text on screen

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="calls-box"):
            yield Static(id="calls-text")
        yield KeysFooter()

    def on_mount(self) -> None:
        self.action_replay()

    def action_replay(self) -> None:
        self.turns, self.summary, self.started, self.status = [], None, None, "starting"
        self._redraw()
        self._play()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "starts":  # greyed until the four calls are done: both would share the play's worker
            return True if self.summary is not None and self.model is not None else None  # (and the cores)
        return True

    def action_starts(self) -> None:
        if any(w.name == "measure cold and warm starts" and not w.is_finished for w in self.workers):
            return  # one cold start at a time: a second `c` does not start another process
        self.status = "cold start: a fresh process opens the file"
        self._redraw()
        self._measure_starts(self.model, self.turns[0].chat.ids)

    @work(thread=True, exclusive=True, group="four-calls", name="play the four calls")
    def _play(self) -> None:
        from walkthrough.engine.model import Model
        from walkthrough.engine.session import Cancelled, Session
        from walkthrough.engine.turns import Conversation, FourCalls, summarize

        worker = get_current_worker()
        c = self.calls
        try:
            model = Model(c.file)
            talk = Conversation(Session(model), c.tokenizer, c.template, settings=c.settings,
                                max_tokens=c.max_tokens, chunk=c.chunk, measure_fresh=True,
                                cancelled=lambda: worker.is_cancelled)
            for label, messages in FourCalls.load().requests(talk, c.messages):
                for step in talk.ask(messages, label):
                    self.post_message(self.Passed(f"{label}: {step.phase} {step.start}:{step.end}", worker=worker))
                self.post_message(self.Played(talk.turns[-1], model, worker=worker))
            self.post_message(self.Finished(summarize(talk.turns), worker=worker))
        except Cancelled:
            return
        except WalkthroughError as err:
            self.post_message(self.Failed(str(err), worker=worker))

    @work(thread=True, exclusive=True, group="four-calls", name="measure cold and warm starts")
    def _measure_starts(self, model, first: list[int]) -> None:
        from walkthrough.engine.coldstart import cold_start, kept_start, warm_start
        from walkthrough.engine.session import Cancelled

        c = self.calls
        worker = get_current_worker()

        def cancelled() -> bool:
            return worker.is_cancelled

        try:
            cold = cold_start(c.path, first, chunk=c.chunk, cancelled=cancelled)
            starts = (cold, warm_start(model, first, chunk=c.chunk, cancelled=cancelled),
                      kept_start(model, first, chunk=c.chunk, cancelled=cancelled))
        except Cancelled:
            return
        except WalkthroughError as err:
            self.post_message(self.Failed(str(err), worker=worker))
            return
        self.post_message(self.Started(starts, len(first), worker=worker))

    def on_four_calls_screen_passed(self, message: Passed) -> None:
        if message.stale:
            return
        self.status = message.what
        self._redraw()

    def on_four_calls_screen_played(self, message: Played) -> None:
        if message.stale:
            return
        self.turns.append(message.turn)
        self.model = message.model
        self._redraw()

    def on_four_calls_screen_finished(self, message: Finished) -> None:
        if message.stale:
            return
        self.summary, self.status = message.summary, "c measures the cold and warm starts"
        self.refresh_bindings()
        self._redraw()

    def on_four_calls_screen_started(self, message: Started) -> None:
        if message.stale:
            return
        self.started, self.status = message, ""
        self._redraw()

    def on_four_calls_screen_failed(self, message: Failed) -> None:
        if message.stale:
            return
        self.status = f"stopped: {message.error}"
        self._redraw()

    def _redraw(self) -> None:
        tok = self.calls.tokenizer
        parts: list[Text] = [Text("The four calls: the request, a follow-up, an edit of its question, a new chat "
                                  "with the same system prompt. Each is also run from an empty cache.", style="bold")]
        for n, turn in enumerate(self.turns, start=1):
            parts.append(Text(f"\n{n}. {turn.label}: {count(len(turn.messages), 'message')}, {count(len(turn.chat.ids), 'prompt token')}",
                              style="bold"))
            parts.extend(safe_text(line) for line in turn_lines(turn, tok.piece))
            answer = turn.answer_text.replace("\n", " ")
            parts.append(Text.assemble(("  answer: ", "dim"), safe_text(answer[:ANSWER_CHARS])))
        if self.summary is not None:
            parts.append(Text(""))
            parts.extend(safe_text(line) for line in summary_lines(self.summary))
        if self.started is not None:
            parts.extend(safe_text(line) for line in start_lines(self.started.prompt_tokens, *self.started.starts))
        if self.status:
            parts.append(Text(f"\n{self.status}", style="italic"))
        self.shown = "\n".join(part.plain for part in parts)
        self.query_one("#calls-text", Static).update(Group(*parts))
