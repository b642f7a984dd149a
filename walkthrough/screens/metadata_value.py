"""One metadata value in full, over the File stage: the text the metadata table cuts with "…".

Opened with enter on a row of File -> Metadata; escape closes, the arrow and
page keys scroll, g opens the glossary. A string is shown whole (up to `MAX_BYTES`: a longer one, which
the reader leaves unread on open, is shown from a bounded head), line breaks kept;
an array one item per line, numbered (up to `MAX_ITEMS`, saying how many more
there are). Values are data from the file: shown through `textsafe.visible`,
never as markup.
"""

from __future__ import annotations

from typing import ClassVar

from gguf.constants import GGUFValueType
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.widgets import Static

from walkthrough.inspect.gguf import GGUFFile
from walkthrough.inspect.metadata import array_items, json_scalar
from walkthrough.screens.footer import KeysFooter
from walkthrough.screens.overlay import OverlayScreen
from walkthrough.textsafe import safe_text, visible

MAX_BYTES = 256 * 1024  # a string longer than this is shown up to here (a chat template is a few KiB)
MAX_ITEMS = 2_000  # array items listed


def value_text(f: GGUFFile, key: str) -> Text:
    """The key's heading and its whole value as literal text."""
    field = f.fields[key]
    text = Text.assemble(safe_text(key, "bold"), f"  {field.type_name}")
    if field.is_array:
        shown = min(field.count, MAX_ITEMS)
        text.append(f", {field.count:,} items" + (f" (the first {shown:,} listed)" if shown < field.count else "")
                    + "\n\n")
        width = len(str(shown - 1))
        for i, item in enumerate(array_items(f, key, shown)):
            text.append(f"{i:>{width}}  ", style="dim")
            text.append(visible(item if isinstance(item, str) else repr(item)) + "\n")
        return text
    if field.type != GGUFValueType.STRING:
        return text.append(f"\n\n{json_scalar(field.scalar)!r}")
    value, cut = f.string_head(key, MAX_BYTES)
    text.append(f", {field.nbytes:,} bytes" + (f" (the first {MAX_BYTES:,} shown)" if cut else "") + "\n\n")
    text.append(visible(value, keep_newlines=True))
    return text


class MetadataValueScreen(OverlayScreen):
    """A metadata key's whole value, scrollable."""

    CSS_PATH = "help.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q,enter", "dismiss", "Close", id="metadata.close"),
    ]

    def __init__(self, f: GGUFFile, key: str) -> None:
        super().__init__()
        self.file, self.key = f, key

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-box"):
            yield Static(value_text(self.file, self.key), id="metadata-value")
        yield KeysFooter()

    def on_mount(self) -> None:
        self.query_one("#help-box").focus()
