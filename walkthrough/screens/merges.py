"""BPE merge by merge, over the Tokens stage: the file's merges replayed on the prompt, one per key press.

Opened with `m` on the Tokens stage. right (or l, space) applies the next merge
rule, left (or h) takes it back, page down / page up ten at a time, home / end
jump to the start / the last merge, where the pieces are the Tokens stage's
tokens (the view says whether the ids are the same). `t` switches to a BPE
trained on a bundled paragraph, to show where merges come from. The replay is
computed in a worker (`walkthrough.inspect.bpe_replay`, the first one builds the
file's merge ranks) and posted to this screen; the drawing is `walkthrough.render.bpe_view`'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.message import Message
from textual.widgets import Static

from walkthrough.errors import WalkthroughError
from walkthrough.inspect import bpe_train
from walkthrough.inspect.bpe_replay import Replay, ordinary_text, replay
from walkthrough.render.bpe_view import replay_view, trained_view
from walkthrough.screens.footer import KeysFooter
from walkthrough.screens.overlay import OverlayScreen
from walkthrough.textsafe import safe_text


class MergesScreen(OverlayScreen):
    """The prompt's BPE merges, one step per key."""

    CSS_PATH = "help.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q,m", "dismiss", "Close", id="merges.close"),
        Binding("right,l,space", "move(1)", "Next merge", id="merges.next"),
        Binding("left,h", "move(-1)", "Previous merge", id="merges.previous"),
        # priority: the scrolling box would take these keys for itself once a long prompt overflows it
        Binding("pagedown", "move(10)", "Ten merges on", id="merges.ten", show=False, priority=True),
        Binding("pageup", "move(-10)", "Ten merges back", id="merges.back_ten", show=False, priority=True),
        Binding("home", "jump(0)", "Start", id="merges.start", show=False, priority=True),
        Binding("end", "jump(-1)", "Last merge", id="merges.end", priority=True),
        Binding("t", "trained", "Train on a paragraph", id="merges.trained"),
    ]

    @dataclass
    class Replayed(Message):
        """The worker's result: the replay, or why there is none."""

        replay: Replay | None
        trained: tuple[bpe_train.TrainedBPE, list[str], int] | None
        problem: str | None

    def __init__(self, tokenizer, chat) -> None:
        super().__init__()
        self.tokenizer, self.chat = tokenizer, chat
        self.replay: Replay | None = None
        self.trained: tuple[bpe_train.TrainedBPE, list[str], int] | None = None
        self.problem: str | None = None
        self.done = 0
        self.show_trained = False

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-box"):
            yield Static(Text("Replaying the file's merges..."), id="merges-view")
        yield KeysFooter()

    def on_mount(self) -> None:
        self.run_worker(self._compute, thread=True, exclusive=True)

    def _compute(self) -> None:
        try:
            found = replay(self.tokenizer, self.chat)
            problem = None
        except WalkthroughError as exc:
            found, problem = None, str(exc)
        text, ordinary = ordinary_text(self.chat)
        trained = bpe_train.train(bpe_train.paragraph())
        self.post_message(self.Replayed(found, (trained, bpe_train.cut(trained, text)[0], ordinary), problem))

    def on_merges_screen_replayed(self, message: Replayed) -> None:
        self.replay, self.trained, self.problem = message.replay, message.trained, message.problem
        self.show()

    def show(self) -> None:
        view = self.query_one("#merges-view", Static)
        if self.show_trained and self.trained:
            view.update(trained_view(*self.trained))
        elif self.replay is not None:
            view.update(replay_view(self.replay, self.done))
        elif self.problem:
            view.update(Text.assemble(("No merges to replay: ", "bold"), safe_text(self.problem),
                                      "\nt shows a BPE trained on a paragraph."))

    def action_move(self, delta: int) -> None:
        if self.replay is not None:
            self.show_trained = False
            self.done = min(max(self.done + delta, 0), len(self.replay.steps))
            self.show()

    def action_jump(self, where: int) -> None:
        if self.replay is not None:
            self.show_trained = False
            self.done = where if where >= 0 else len(self.replay.steps)
            self.show()

    def action_trained(self) -> None:
        self.show_trained = not self.show_trained
        self.show()
