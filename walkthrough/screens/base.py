"""The base screen every stage shares: stage bar, glossary terms line, common bindings, refresh on new state.

A stage subclasses `StageScreen`, sets `HEADING` and `HELP` (what the stage
shows and how to read it), composes its body in `compose_body`, and redraws
from `self.state` in `refresh_view`, which runs on mount, when the stage comes
back into view, and whenever the app's request state changes. After each redraw
the terms line lists the glossary terms the stage's text uses (`stage_text`,
`term_words`), so a term is listed only when the screen shows it. Its id, label
and number come from `walkthrough.request.stages`, where it is listed once.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import ClassVar

from rich.cells import cell_len
from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import Input, Static

from walkthrough import textual_private
from walkthrough.render.term_words import most_specific, terms_in
from walkthrough.request import stages
from walkthrough.screens.footer import KeysFooter
from walkthrough.screens.stage_text import cursor_row_text, stage_text

STAGE_KEYS = Binding.Group("Stage", compact=True)
TALL = 30  # rows from which the terms line may take four lines instead of two
WIDE_FOOTER = 100  # columns from which the footer also shows the command palette key


class StageBar(Static):
    """One line: every stage numbered, the current one highlighted, plus what is loading."""

    def __init__(self, current: str) -> None:
        super().__init__(id="stage-bar")
        self.current = current
        self._status = ""

    def on_resize(self) -> None:
        self.show(self._status)

    def show(self, status: str = "") -> None:
        """The stages and `status` (parts joined by " · "). The stages shrink before the status is cut: every
        label, else the others by number only, else the current stage alone; the first part of the status
        (a pass's "layer N of M") is never cut, what follows it is cut with "…" if it must be."""
        self._status = status
        width = self.size.width or self.app.size.width
        first = status.split(" · ")[0].split(", ")[0]
        bars = [self._stages(style) for style in ("labels", "numbers", "current")]
        need = [len(status) + 2 if status else 0, len(first) + 2 if first else 0]
        bar = next((b for n in need for b in bars if b.cell_len + n <= width), bars[-1])
        line = Text(no_wrap=True, overflow="ellipsis")
        line.append_text(bar)
        if status:
            line.append(f"  {status}", style="italic")
        self.update(line)

    def _stages(self, style: str) -> Text:
        """The stage list: every label ("labels"), the others by number ("numbers"), the current one alone."""
        line = Text()
        for stage in stages.STAGES:
            current = stage.id == self.current
            if current or style == "labels":
                line.append(f" {stage.number} {stage.label} ", style="reverse bold" if current else "")
            elif style == "numbers":
                line.append(f" {stage.number} ")
        return line


class TermsLine(Static):
    """The glossary terms the stage shows now, wrapped over a few lines (g opens them).

    Terms are packed whole into at most `max_lines` lines at the line's width (2 on a terminal under
    `TALL` rows, so the stage keeps its room at 80x24; 4 above); what does not fit is counted at the end,
    "+N more (g)", and listed by g with the others, so no term is ever lost silently.
    """

    LABEL = "Terms (g): "
    SEPARATOR = " · "

    def __init__(self) -> None:
        super().__init__(id="terms-line")
        self.terms: tuple[str, ...] | None = None  # None until first shown
        self._drawn: tuple | None = None

    @property
    def max_lines(self) -> int:
        return 2 if self.app.size.height < TALL else 4

    def show(self, terms: tuple[str, ...]) -> None:
        self.terms = terms
        self.display = bool(terms)
        self._draw()

    def on_resize(self) -> None:
        self._draw()

    def _draw(self) -> None:
        terms, width = self.terms or (), self.content_region.width or self.app.size.width - 2
        if (terms, width, self.max_lines) == self._drawn:
            return  # most redraws change figures, not words: no relayout
        self._drawn = (terms, width, self.max_lines)
        lines, shown = pack_terms(terms, width, self.max_lines, len(self.LABEL))
        text = Text(self.LABEL, style="bold")
        text.append("\n".join(lines))
        if shown < len(terms):
            text.append(f" +{len(terms) - shown} more (g)", style="italic")
        self.update(text)


def pack_terms(terms: tuple[str, ...], width: int, max_lines: int, first: int) -> tuple[list[str], int]:
    """Terms joined by " · " into lines of `width` cells (the first starts at column `first`), at most
    `max_lines`, room kept on the last for a "+N more (g)" note; the lines and how many terms they hold.

    Example: pack_terms(("token", "KV cache", "decode"), 30, 1, 11) -> (["token"], 1)
    """
    lines: list[str] = [""]
    used = first
    note = len(" +99 more (g)")
    for i, term in enumerate(terms):
        piece = term if not lines[-1] else TermsLine.SEPARATOR + term
        last = len(lines) == max_lines
        room = width - (note if last and i < len(terms) - 1 else 0)
        if used + cell_len(piece) <= room:
            lines[-1] += piece
            used += cell_len(piece)
        elif not last:
            lines.append("· " + term if lines[-1] else term)
            used = cell_len(lines[-1])
        else:
            return lines, i
    return lines, len(terms)


class StageScreen(Screen):
    """Common layout and bindings of the stages.

    A stage's title ("Stage 2: the chat template") is its number in `stages.STAGES`
    and its `HEADING`; its stylesheet is `<module>.tcss` beside its module, if any.
    """

    HEADING: ClassVar[str] = ""
    HELP: ClassVar[str] = ""
    CAPTION: ClassVar[str] = ""  # what happens here, in plain words: shown under the stage bar during autoplay
    # action -> what to do first, said when its key is pressed while the footer greys it (`check_action` None)
    GREYED_HINTS: ClassVar[dict[str, str]] = {}

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        sheet = f"{cls.__module__.rsplit('.', 1)[-1]}.tcss"
        if (Path(sys.modules[cls.__module__].__file__).parent / sheet).is_file():
            cls.CSS_PATH = sheet

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("p", "app.previous_stage", "Previous stage", id="stage.previous", group=STAGE_KEYS),
        Binding("n", "app.next_stage", "Next stage", id="stage.next", group=STAGE_KEYS),
        Binding("tab", "app.next_stage", "Next stage", show=False),
        Binding("shift+tab", "app.previous_stage", "Previous stage", show=False),
        *(Binding(str(i), f"app.goto_number({i})", f"Stage {i}", show=False)
          for i in range(1, stages.MAX_STAGES + 1)),
        Binding("question_mark", "stage_help", "Help", id="stage.help"),
        Binding("g", "glossary", "Terms", id="stage.glossary"),
        Binding("q", "app.quit", "Quit", id="app.quit"),
    ]

    def __init__(self) -> None:
        self.stage = stages.of_screen(type(self))
        super().__init__(id=f"stage-{self.stage.id}")
        self.TITLE = f"Stage {self.stage.number}: {self.HEADING}"
        self._stale = True
        self._terms_pending = False
        # The app reads every stylesheet at start (WalkthroughApp.CSS_PATH), so a new stage is styled when it
        # mounts; marked so, its first visit does not restyle every screen (twice).
        textual_private.mark_styled(self, self.app)

    @property
    def STAGE(self) -> str:
        """This stage's id."""
        return self.stage.id

    @property
    def state(self):
        """The app's `RequestState`."""
        return self.app.state

    def on_key(self, event: events.Key) -> None:
        """A greyed key pressed: say what it needs (`GREYED_HINTS`); typing into a field is left alone."""
        if not self.GREYED_HINTS or isinstance(self.focused, Input):
            return
        for binding in self._bindings.key_to_bindings.get(event.key, ()):
            action = binding.action.split("(")[0]
            if action in self.GREYED_HINTS and self.check_action(action, ()) is None:
                self.notify(f"{self.app.get_key_display(binding)} ({binding.description}): "
                            f"{self.GREYED_HINTS[action]}.", title="Not now", severity="warning", markup=False)
                return

    async def on_event(self, event: events.Event) -> None:
        await super().on_event(event)
        # Textual handles a widget's queued messages one after another without returning to the event loop while
        # the queue is not empty. After a storm of keys and resizes a stage's queue held seconds of restyling, and
        # nothing else ran meanwhile, not even the driver handing over `q` (tests/bench/key_storm.py: SmolLM2,
        # q ignored for 30 s). Let the loop in between events.
        await textual_private.let_the_loop_in()

    def compose(self) -> ComposeResult:
        yield StageBar(self.STAGE)
        if self.CAPTION and getattr(self.app, "walk", None) is not None:
            yield Static(self.CAPTION, id="caption", markup=False)
        yield from self.compose_body()
        yield TermsLine()
        yield KeysFooter(compact=True)

    def compose_body(self) -> ComposeResult:
        yield from ()

    def on_mount(self) -> None:
        self.watch(self.app, "state_changed", self._state_changed, init=False)
        self.watch(self.app, "status", self._status_changed)
        self.watch(self.app, "pass_status", self._status_changed)
        self.redraw()

    def on_screen_resume(self) -> None:
        if self._stale:
            self.redraw()

    def _state_changed(self, _fields: frozenset[str]) -> None:
        if self.app.screen is self:
            self.redraw()
        else:
            self._stale = True

    def on_resize(self) -> None:
        # At 80 columns the stage's keys need the footer's room; ctrl+p is listed in the help.
        self.query_one(KeysFooter).show_command_palette = self.size.width >= WIDE_FOOTER

    def _status_changed(self, _status: str) -> None:
        status = " · ".join(s for s in (self.app.pass_status, self.app.status) if s)
        self.query_one(StageBar).show(status)

    def redraw(self) -> None:
        """Redraw the stage and then its terms line (call this, not `refresh_view`, after changing a view)."""
        self._stale = False
        self.refresh_view()
        self.refresh_terms()

    def refresh_terms(self) -> None:
        """List on the terms line the terms the stage shows, once the widgets have drawn their new content."""
        if not self._terms_pending:
            self._terms_pending = True
            self.call_after_refresh(self._show_terms)

    def _show_terms(self) -> None:
        self._terms_pending = False
        self.query_one(TermsLine).show(terms_in(stage_text(self, self.stage.label)))

    @property
    def terms(self) -> tuple[str, ...]:
        """The glossary keys on the terms line now, in the order the screen shows them."""
        return self.query_one(TermsLine).terms or ()

    def cursor_text(self) -> str:
        """The text under the cursor (the focused table's row; stages with their own cursor override)."""
        return cursor_row_text(self.focused)

    def refresh_view(self) -> None:
        """Redraw the stage from `self.state` (override)."""

    def autoplay_step(self) -> bool:
        """One autoplay tick: do something and return True, or return False when the stage is done."""
        return False

    def unavailable_reason(self, *parts: str) -> str | None:
        """Why this stage cannot be shown yet (or at all), or None when its parts are ready."""
        for part in parts:
            if part in self.state.unavailable:
                return self.state.unavailable[part]
        return None

    def action_stage_help(self) -> None:
        from walkthrough.screens.help import HelpScreen

        self.app.push_screen(HelpScreen(self))

    def action_glossary(self) -> None:
        from walkthrough.screens.glossary import GlossaryScreen

        under = most_specific(self.cursor_text())
        self.app.push_screen(GlossaryScreen(self.terms, select=under[0] if under else None, under=under))
