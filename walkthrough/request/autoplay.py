"""Autoplay: walk every stage at a steady pace for a screencast, optionally saving an SVG of each.

On each tick the current stage may take a step (`StageScreen.autoplay_step`,
e.g. one prefill chunk or one decoded token); when it has nothing left to do
and has been shown for `pace` seconds, its picture is saved (if asked, as
`N-Label.svg` after the stage bar: `2-Chat.svg`, by a `walkthrough.safewrite.Writer`,
which never writes over a file it did not make) and the walk moves to the next
stage, or ends. At the end the app exits with `exit_at_end`, and always when
saving pictures (the walk is done; nothing more would be saved).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from walkthrough.errors import WalkthroughError
from walkthrough.pictures import publishable_svg
from walkthrough.request import stages
from walkthrough.request.parts import Part
from walkthrough.safewrite import Writer

if TYPE_CHECKING:
    from walkthrough.request.state import RequestState

AUTOPLAY_SECONDS = 2.0  # how long a stage stays on screen once it has nothing left to step
TICKS_PER_PACE = 8  # ticks per pace (a stepping stage runs one pass per tick)
QUIT_LABEL = "Quit</text>"  # the footer's quit key as it appears in an SVG picture once laid out


class StepsOnItsOwn(Protocol):
    """A stage as the walk sees it (`screens.base.StageScreen`)."""

    def autoplay_step(self) -> bool:
        """Take one step of the stage's own (a pass, a chunk); False when it has nothing left."""
        ...


class WalkedApp(Protocol):
    """What the walk needs of the app (`WalkthroughApp` has it; nothing here imports Textual)."""

    state: RequestState
    error: str | None  # set when the walk cannot go on (a picture it may not write)

    @property
    def screen(self) -> StepsOnItsOwn: ...

    @property
    def stepping(self) -> bool: ...

    @property
    def is_last_stage(self) -> bool: ...

    @property
    def stage_number(self) -> int: ...

    @property
    def stage_label(self) -> str: ...

    def action_next_stage(self) -> None: ...

    def call_after_refresh(self, callback: Callable[[], object]) -> bool: ...

    def export_screenshot(self) -> str: ...

    def exit(self, result: object = None, return_code: int = 0, message: object = None) -> None: ...


class Autoplay:
    """The walk's position and timing; `tick` is called by an app timer every `pace / TICKS_PER_PACE` s."""

    def __init__(self, app: WalkedApp, pace: float, screenshots: Path | None, exit_at_end: bool,
                 writer: Writer | None = None) -> None:
        self.app = app
        self.pace = pace
        self.screenshots = screenshots
        self.writer = writer or Writer()
        self.exit_at_end = exit_at_end
        self.arrived: float | None = time.monotonic()  # when the stage was drawn (or last stepped); None: not yet
        self.saved: list[Path] = []  # pictures written, in order

    @property
    def interval(self) -> float:
        return self.pace / TICKS_PER_PACE

    def tick(self) -> None:
        app = self.app
        if Part.RUN not in app.state.loaded or app.stepping:
            return  # still loading, or a pass is running
        if self.arrived is None:
            return  # the stage moved to has not been drawn yet: a viewer has not seen it
        if app.screen.autoplay_step():
            self.arrived = time.monotonic()
            return
        if time.monotonic() - self.arrived < self.pace:
            return
        if self.screenshots is not None and not self._save_picture():
            return
        self.arrived = time.monotonic()
        if app.is_last_stage:
            if self.exit_at_end or self.screenshots is not None:
                app.exit()
            return
        self.arrived = None
        app.action_next_stage()
        app.call_after_refresh(self._drawn)

    def _drawn(self) -> None:
        self.arrived = time.monotonic()

    def _save_picture(self) -> bool:
        """Save `N-Label.svg`; False (try again next tick) while the footer is rebuilding its keys."""
        app = self.app
        svg = app.export_screenshot()
        if QUIT_LABEL not in svg:
            return False
        path = self.screenshots / picture_name(app.stage_number, app.stage_label, "svg")
        try:
            self.writer.write(path, publishable_svg(svg).encode("utf-8"), "--screenshots")
        except WalkthroughError as exc:
            app.error = str(exc)
            self.screenshots = None  # nothing more is saved while the app ends
            app.exit(return_code=2)  # the CLI reports app.error and exits non-zero
            return False
        self.saved.append(path)
        return True


def picture_name(number: int, label: str, suffix: str) -> str:
    """A stage's picture's name: `2-Chat.svg`."""
    return f"{number}-{label}.{suffix}"


def check_picture_folder(folder: Path, suffixes: tuple[str, ...], writer: Writer) -> None:
    """Make the folder `--screenshots` names, and refuse (one line) what the walk could not write there.

    Raises:
        WalkthroughError: the path or a folder above it is a file, it cannot be made, or a picture's name
            is a file the writer may not replace.
    """
    if folder.exists() and not folder.is_dir():
        raise WalkthroughError(f"--screenshots {folder} is a file; name a folder (it is made if missing)")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise WalkthroughError(f"--screenshots {folder}: cannot make this folder ({exc.strerror}); "
                               "name a folder whose parents are folders") from None
    for stage in stages.STAGES:
        for suffix in suffixes:
            writer.check(folder / picture_name(stage.number, stage.label, suffix), "--screenshots")
