"""One stored block of a tensor, over the File stage: its bytes, fields, values, and the same values at other types.

Opened with enter (or b) on a row of File -> Tensors. left/right (or p/n) go to
the previous/next block of the tensor, home to the first; escape closes. The
tables are `block_view`'s, the numbers `walkthrough.inspect.block` and
`walkthrough.inspect.requant`'s, the same as `walkthrough inspect --block`.
"""

from __future__ import annotations

from typing import ClassVar

from rich.console import Group
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.widgets import Static

from walkthrough.errors import WalkthroughError
from walkthrough.inspect.block import read_block
from walkthrough.inspect.gguf import GGUFFile
from walkthrough.inspect.requant import round_stored_block
from walkthrough.render.block_view import block_heading, block_tables
from walkthrough.screens.footer import KeysFooter
from walkthrough.screens.overlay import OverlayScreen
from walkthrough.textsafe import safe_text


class BlockScreen(OverlayScreen):
    """One block of one tensor."""

    CSS_PATH = "help.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q,b", "dismiss", "Close", id="block.close"),
        Binding("right,n", "move(1)", "Next block", id="block.next"),
        Binding("left,p", "move(-1)", "Previous block", id="block.previous"),
        Binding("home", "first", "First block", id="block.first", show=False),
    ]

    def __init__(self, f: GGUFFile, tensor: str, index: int = 0) -> None:
        super().__init__()
        self.file, self.tensor, self.index = f, tensor, index
        self.n_blocks = 0

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-box"):
            yield Static(id="block-view")
        yield KeysFooter()

    def on_mount(self) -> None:
        self.show()

    def show(self) -> None:
        view = self.query_one("#block-view", Static)
        try:
            block = read_block(self.file, self.tensor, self.index)
        except WalkthroughError as exc:
            view.update(Text.assemble(("Cannot show this block: ", "bold"), safe_text(str(exc))))
            return
        self.n_blocks = block.n_blocks
        view.update(Group(block_heading(block), *block_tables(self.file, block, round_stored_block(self.file, block))))
        self.query_one("#help-box").scroll_home(animate=False)

    def action_move(self, delta: int) -> None:
        if self.n_blocks:
            self.index = (self.index + delta) % self.n_blocks
            self.show()

    def action_first(self) -> None:
        self.index = 0
        self.show()
