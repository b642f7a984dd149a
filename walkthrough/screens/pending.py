"""A stand-in for a stage whose building blocks have not landed yet: it says what it waits for."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import Static

from walkthrough.screens.base import StageScreen


def pending_stage(stage: str, title: str, needs: str) -> type[StageScreen]:
    """A screen class for `stage` that explains it needs `needs` (a module or file still being built)."""

    class PendingScreen(StageScreen):
        STAGE = stage
        TITLE = title
        HELP = f"This stage will show {title.split(': ', 1)[-1]}. It needs {needs}, which is not available yet."

        def compose_body(self) -> ComposeResult:
            yield Static(Text(f"{title}\n\nNot available yet: this stage needs {needs}."), id="pending")

    PendingScreen.__name__ = f"Pending{stage.title()}Screen"
    return PendingScreen
