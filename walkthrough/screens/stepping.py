"""The base of the stages that step through the run (prefill, decode, sampling): keys and the live panel.

space runs one pass, enter plays or pauses, r restarts the request (asking first
when passes would be lost: `screens/confirm.py`), a opens
the attention matrix of the passes so far (`attention`). The stage's
own view goes in `compose_main`; the live panel sits beside it (wide screens)
or under it (narrow ones, through the `-narrow` class the app's breakpoints set).
"""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Container, VerticalScroll
from textual.widgets import Static

from walkthrough.screens.base import StageScreen
from walkthrough.screens.live import LivePanel
from walkthrough.textsafe import safe_text


class SteppingScreen(StageScreen):
    """A stage with the run's controls and the live panel."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("space", "app.step", "Step", id="run.step"),
        Binding("enter", "app.play", "Play", id="run.play"),
        Binding("r", "app.restart", "Restart", id="run.restart"),
        Binding("a", "attention", "Attention", id="run.attention"),
    ]

    def compose_body(self) -> ComposeResult:
        with Container(id="stepping"):
            with VerticalScroll(id="stage-main"):
                yield from self.compose_main()
            yield LivePanel(id="live")

    def compose_main(self) -> ComposeResult:
        yield from ()

    def action_attention(self) -> None:
        """Open the attention matrix of the passes run so far."""
        if self.state.model is None:
            return
        from walkthrough.screens.attention import AttentionScreen

        self.app.push_screen(AttentionScreen(self.state))

    def show_blocker(self, view: Static) -> bool:
        """Say in `view` why the request cannot run, if it cannot; True when it did."""
        blocker = self.state.run_blocker()
        if blocker:
            view.update(Text.assemble(("Cannot run the request: ", "bold"), safe_text(blocker)))
        return bool(blocker)

    def step_until(self, done: bool) -> bool:
        """An autoplay tick: run the next pass unless `done` (or the request cannot run); True if it ran one."""
        if self.state.can_run and not done:
            self.app.action_step()
            return True
        return False
