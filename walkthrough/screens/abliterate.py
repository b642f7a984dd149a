"""Abliteration, over the Prefill stage: a behaviour's direction in the residual stream, each prompt's
projection on it, and, on `w`, the edited file written and measured.

Opened with `x` on the Prefill stage. The bundled prompt sets (the same questions, to be answered in
French or in English) run through the numpy engine on the opened file in a worker; the view shows
the direction at the layer that separates the sets best, every prompt's projection and each layer's
separation. `[` / `]` move the direction to another layer (no prompt runs again). `w` writes the
edited copy into the current folder (`NAME-abliterated-LN.gguf`, a free name: no file is replaced)
and measures it: what its writers and residual stream still hold along the direction, `compare`'s
figures on a held-out prompt and both files' greedy answers. escape closes (a running worker is
stopped at its next prompt). The records are `walkthrough.engine.abliterate.run`'s, the drawing
`walkthrough.render.abliterate_view`'s.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from rich.console import Group
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.message import Message
from textual.widgets import Static

from walkthrough.engine.abliterate import run as abl
from walkthrough.engine.abliterate.prompts import load_prompt_sets
from walkthrough.engine.glassbox.model import Model
from walkthrough.errors import WalkthroughError
from walkthrough.inspect.gguf import GGUFFile
from walkthrough.inspect.tokenizer import GGUFTokenizer
from walkthrough.render.abliterate_view import abliteration_view
from walkthrough.safewrite import Writer
from walkthrough.screens.footer import KeysFooter
from walkthrough.screens.overlay import OverlayScreen
from walkthrough.textsafe import safe_text

FREE_NAMES = 100  # NAME-abliterated-LN.gguf, then -2 ... before giving up


class Stopped(WalkthroughError):
    """The view was closed while its worker ran."""


class AbliterationScreen(OverlayScreen):
    """Two prompt sets, their direction, and the weights without it."""

    CSS_PATH = "help.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q,x", "dismiss", "Close", id="abliterate.close"),
        Binding("left_square_bracket", "layer(-1)", "Previous layer", id="abliterate.previous"),
        Binding("right_square_bracket", "layer(1)", "Next layer", id="abliterate.next"),
        Binding("w", "write", "Write the edited file", id="abliterate.write"),
    ]

    @dataclass
    class Done(Message):
        """A worker's result: the direction found, or the edited file measured, or what went wrong."""

        found: abl.Found | None = None
        edited: abl.Edited | None = None
        problem: str | None = None

    @dataclass
    class Doing(Message):
        what: str

    def __init__(self, f: GGUFFile, tokenizer: GGUFTokenizer | None) -> None:
        super().__init__()
        self.file = f
        self.found: abl.Found | None = None
        self.edited: abl.Edited | None = None
        self.problem: str | None = None
        self.doing = "starting"
        self.closed = False
        self.piece = tokenizer.piece if tokenizer is not None else str  # the request's own vocabulary

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-box"):
            yield Static(id="abliterate-view")
        yield KeysFooter()

    def on_mount(self) -> None:
        self.show()
        self.run_worker(self._find, thread=True, exclusive=True)

    def _say(self, what: str) -> None:
        if self.closed:
            raise Stopped("closed")
        self.post_message(self.Doing(what))

    def _find(self) -> None:
        try:
            found = abl.find(Model(self.file), load_prompt_sets(), say=self._say)
            self.post_message(self.Done(found=found))
        except WalkthroughError as exc:
            self.post_message(self.Done(problem=str(exc)))

    def _free_name(self, writer: Writer) -> Path:
        stem = f"{Path(self.file.path).stem}-abliterated-L{self.found.layer}"
        for k in range(FREE_NAMES):
            path = Path(f"{stem}{'' if k == 0 else f'-{k + 1}'}.gguf")
            if not path.exists():
                return path
        raise WalkthroughError(f"{stem}.gguf and {FREE_NAMES - 1} more names are taken in this folder")

    def _edit(self) -> None:
        writer = Writer([("the model", Path(p)) for p in self.file.paths])

        @contextmanager
        def open_out():
            path = self._free_name(writer)
            with writer.stream(path, "abliteration") as stream:
                yield path, stream

        try:
            edited = abl.edit(Model(self.file), self.found, open_out, say=self._say)
            self.post_message(self.Done(found=self.found, edited=edited))
        except WalkthroughError as exc:
            self.post_message(self.Done(found=self.found, problem=str(exc)))

    def on_abliteration_screen_doing(self, message: Doing) -> None:
        self.doing = message.what
        self.show()

    def on_abliteration_screen_done(self, message: Done) -> None:
        self.found, self.edited, self.problem = message.found, message.edited, message.problem
        self.doing = ""
        self.show()

    def show(self) -> None:
        parts = []
        if self.doing:
            parts.append(Text(f"Working: {self.doing}...", style="bold"))
        if self.problem:
            parts.append(Text.assemble(("Cannot go on: ", "bold"), safe_text(self.problem)))
        if self.found is not None:
            parts.append(abliteration_view(self.found, self.edited, self.piece))
        self.query_one("#abliterate-view", Static).update(Group(*parts))

    def action_layer(self, delta: int) -> None:
        if self.found is None or self.doing:
            return
        n = len(self.found.direction.separation)
        try:
            self.found = self.found.at_layer(min(max(self.found.layer + delta, 0), n - 1))
        except WalkthroughError as exc:
            self.problem = str(exc)
        self.edited = None
        self.show()

    def action_write(self) -> None:
        if self.found is None or self.doing:
            return
        self.doing, self.problem = "writing the edited file", None
        self.show()
        self.run_worker(self._edit, thread=True, exclusive=True)

    def action_dismiss(self, result=None) -> None:
        self.closed = True
        self.dismiss(result)
