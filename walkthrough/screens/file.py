"""Stage 1, File: what is on disk, from the header alone (works for any GGUF, runnable or not).

Three views: the overview (layout, architecture, parameters, quant mix, whether
the engine can run the file and why not), the tensor table by layer (filterable
with `/`), and the metadata keys with their types and values shown literally.
"""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.timer import Timer
from textual.widgets import DataTable, Input, Static, TabbedContent, TabPane

from walkthrough.engine import closeness
from walkthrough.errors import WalkthroughError
from walkthrough.render import tensor_pages
from walkthrough.render.file_view import overview
from walkthrough.render.format import human_bytes, human_count
from walkthrough.request import stages
from walkthrough.screens import table_pages
from walkthrough.screens.base import StageScreen
from walkthrough.screens.stepping import SteppingScreen
from walkthrough.screens.typeahead import when_shown
from walkthrough.textsafe import safe_text

VIEWS = ("overview", "tensors", "metadata")
PAGED = {"tensors": "tensor", "metadata": "metadata"}  # views with a table a page at a time: their ids' prefix
TENSOR_COLUMNS = ("layer", "name", "group", "type", "shape", "params", "bytes")
METADATA_COLUMNS = ("key", "type", "value", "bytes")
FILTER_PAUSE = 0.12  # seconds without typing before the tensor filter runs: a burst of keys costs one pass
MAX_VALUE_CHARS = 80  # metadata values longer than this are cut in the table


def metadata_value(f, key: str) -> Text:
    """A metadata value as literal text: long arrays by count and first items (`inspect.metadata`), cut if long."""
    from walkthrough.inspect.metadata import describe, summarize_value

    return safe_text(describe(summarize_value(f, key), MAX_VALUE_CHARS))


class FileScreen(StageScreen):
    """The GGUF file: layout, architecture, parameters, quant mix, tensors and metadata."""

    HEADING = "the file"
    CAPTION = ("The model file on disk: its header says what the network is and how "
               "each weight is stored.")
    HELP = """
What is on disk before anything runs. A GGUF file is a fixed header, typed
metadata (hyperparameters, tokenizer, chat template), a table of tensors (name,
shape, type, offset) and the tensor bytes. Everything here comes from the
header: nothing is loaded yet, so even a very large file opens at once.

Overview: the bytes per region, the architecture in plain words, parameters in
total and active per token (for a mixture of experts, only the experts a token
uses count), bits per weight, and the quant mix (how many bytes each storage
type holds). It also says whether the engine can run this file, and if not, why.

Tensors: every tensor by layer, with its group (attention, experts, norm...),
storage type, shape (GGUF order: row length first), parameters and bytes.
Press / to filter (by name, group or type), escape to leave the filter.
The table shows 1,000 tensors at a time: with more, ] and [ turn the pages.
Enter (or b) on a tensor opens its first block as stored: the bytes, the
decoded fields (scale, min, sub-block scales), every value with its code, the
bits-per-weight arithmetic of its type, and the same values rounded to other
types with their errors and the size the tensor and the file would have.

With --mmproj (the model's projector), the overview ends with the images or
video the request adds: i types them (2 or 2x1024x768 images, v16x640x360 a
16-frame video), the projector's rules turn each into tokens, and the Costs
stage adds them to the prompt.

Metadata: every key with its type and value, shown literally. A long value is
cut with …: enter on its row opens the whole value (a template, every item of
an array), scrollable, escape to close. The table shows 1,000 keys at a time:
with more, ] and [ turn the pages.
"""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("v", "next_view", "View", id="file.view"),
        Binding("slash", "filter", "Filter", id="file.filter"),
        Binding("escape", "leave_filter", "Leave filter", show=False, priority=True),  # in order (typeahead.py)
        Binding("b", "block", "Block", id="file.block"),
        Binding("i", "media", "Images", id="file.media"),
        Binding("left_square_bracket", "page(-1)", "Previous page", id="file.prev_page",
                group=Binding.Group("Page", compact=True)),
        Binding("right_square_bracket", "page(1)", "Next page", id="file.next_page",
                group=Binding.Group("Page", compact=True)),
    ]

    def __init__(self) -> None:
        super().__init__()
        self._shown = None  # the GGUFFile on display
        self._filtering = False  # `/` pressed from another view: focus the filter when the view is shown
        self._filter = tensor_pages.TensorFilter([])  # every tensor, in table order, and the filter over them
        self._pages = {"tensors": table_pages.Pages("tensors"), "metadata": table_pages.Pages("keys")}
        self._typing: Timer | None = None  # runs the filter once typing pauses

    def compose_body(self) -> ComposeResult:
        with TabbedContent(id="file-views"):
            with TabPane("Overview", id="overview"):
                yield Input(placeholder="images: 2 or 2x1024x768; a video: v16 or v16x640x360 (enter)",
                            id="media-input")
                with VerticalScroll(id="overview-box"):
                    yield Static(Text("Opening the file…"), id="overview-text")
            with TabPane("Tensors", id="tensors"):
                yield Input(placeholder="filter: name, group or type (press / )", id="tensor-filter")
                yield Static("", id="tensor-page")
                yield DataTable(id="tensor-table", cursor_type="row", zebra_stripes=True)
            with TabPane("Metadata", id="metadata"):
                yield Static(Text("enter: the selected key's whole value", style="dim"), id="metadata-hint")
                yield Static("", id="metadata-page")
                yield DataTable(id="metadata-table", cursor_type="row", zebra_stripes=True)

    def refresh_view(self) -> None:
        f, card = self.state.file, self.state.card
        if f is None or card is None:
            return
        self.query_one("#overview-text", Static).update(overview(f, card, self._engine_note(), self._media()))
        if self._shown is not f:
            self._shown = f
            self._filter = tensor_pages.TensorFilter(tensor_pages.ordered_rows(f))
            self._fill_tensors("", new_file=True)
            self._pages["metadata"].start(list(f.fields))
            self._show_page("metadata")

    def _media(self) -> Text | None:
        """The projector's count of the user's images or video (--mmproj), or why it cannot count them."""
        from walkthrough.render.media_view import media_lines

        if self.state.mmproj is None:
            return None
        try:
            projector, tokens = self.state.projector(), self.state.media_tokens()
        except WalkthroughError as exc:
            return Text.assemble(("Cannot count image tokens: ", "bold"), safe_text(str(exc)))
        return media_lines(projector, tokens, self.state.prompt_with_media())

    def _engine_note(self) -> Text:
        reason = self.state.unavailable.get("engine")
        if reason:
            return Text.assemble(("The engine cannot run this file: ", "bold"), safe_text(reason))
        if self.state.engine_ready:
            steps = [stage.number for stage in stages.STAGES if issubclass(stage.screen(), SteppingScreen)]
            engine = self.state.engine + (" engine, with exact products," if self.state.exact_products else " engine")
            note = Text(f"The {engine} can run this file: stages {min(steps)} to {max(steps)} "
                        "step through it.", style="bold")
            if self.state.exact_products:
                note.append("\nExact products: ", style="bold")
                note.append("every product as ggml's CPU kernels compute it, so each pass gives llama.cpp's numbers "
                            "bit for bit (F32 or F16 cache; the types docs/op-diff.md lists; 10 to 25 times slower).")
            advice = self.state.engine_advice()
            if advice:
                note.append("\nTry llama.cpp: ", style="bold")
                note.append(advice)
            memory, problem = self.state.memory_lines()
            note.append("\nMemory: ", style="bold")
            note.append(memory)
            if problem:
                note.append("\nWill not fit: ", style="bold yellow")
                note.append(problem, style="yellow")
            f, card = self.state.file, self.state.card
            measured = None if self.state.exact_products else closeness.note(  # (measured on the default products)
                f.path.name, f.file_size, set(card.bytes_by_type))
            if measured:
                note.append("\n")
                note.append_text(safe_text(measured))
            return note
        return Text("Checking whether the engine can run this file…", style="italic")

    def _fill_tensors(self, needle: str, *, new_file: bool = False) -> None:
        """Filter the tensors and show the first page of those kept (the table is filled again only if that
        page changes: measuring 1,000 rows costs a DataTable a few tenths of a second)."""
        pages = self._pages["tensors"]
        if pages.start(self._filter.matching(needle), len(self._filter.rows)) or new_file:
            self._show_page("tensors")
        else:
            table_pages.show_label(self.query_one("#tensor-page", Static), pages)
            self.refresh_bindings()

    def _show_page(self, view: str) -> None:
        """Put the page on show of a view's rows in its table (which holds one page: see `table_pages`)."""
        columns, row = (TENSOR_COLUMNS, self._tensor_row) if view == "tensors" else (METADATA_COLUMNS, self._key_row)
        prefix = PAGED[view]
        table_pages.fill(self.query_one(f"#{prefix}-table", DataTable), self.query_one(f"#{prefix}-page", Static),
                         self._pages[view], columns, row)
        self.refresh_bindings()

    @staticmethod
    def _tensor_row(row: tensor_pages.Row) -> tuple[tuple, str]:
        t = row.tensor
        return ("" if row.layer is None else str(row.layer),
                safe_text(t.name if row.layer is None else t.name.split(".", 2)[2]),
                row.group,
                t.type_name,
                " x ".join(str(d) for d in t.shape),
                Text(human_count(t.n_elements), justify="right"),
                Text(human_bytes(t.nbytes), justify="right")), t.name

    def _key_row(self, key: str) -> tuple[tuple, str]:
        f = self.state.file
        field = f.fields[key]
        return (safe_text(key), field.type_name, metadata_value(f, key),
                Text(human_bytes(field.end - field.offset), justify="right")), key

    def action_page(self, step: int) -> None:
        view = self.query_one(TabbedContent).active
        if view in self._pages:
            self._pages[view].turn(step)
            self._show_page(view)

    def on_input_changed(self, event: Input.Changed) -> None:
        if self.state.file is None or event.input.id != "tensor-filter":
            return
        if self._typing is not None:
            self._typing.stop()
        self._typing = self.set_timer(FILTER_PAUSE, self._filter_typed)

    def _filter_typed(self) -> None:
        """Run the filter on what the filter field holds now (typing paused, or enter or escape pressed)."""
        if self._typing is not None:
            self._typing.stop()
            self._typing = None
            self._fill_tensors(self.query_one("#tensor-filter", Input).value)

    @when_shown
    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "media-input":
            self._media_typed(event.value)
            return
        self._filter_typed()
        self.query_one("#tensor-table").focus()

    def action_media(self) -> None:
        """Type the images or video to count (the field over the overview)."""
        self.query_one(TabbedContent).active = "overview"
        field = self.query_one("#media-input", Input)
        field.display = True
        field.focus()

    def _media_typed(self, spec: str) -> None:
        """The typed images or video become the request's (a bad spec is a notice; the text stays)."""
        from walkthrough.inspect.projector import parse_media

        try:
            self.state.media = parse_media(spec)
        except WalkthroughError as exc:
            self.notify(str(exc), title="Images", severity="error", markup=False)
            return
        self.query_one("#overview-box").focus()
        self.refresh_view()

    def on_mount(self) -> None:  # (Textual runs StageScreen.on_mount after this one)
        self._focus_view()

    def _focus_view(self) -> None:
        """Focus what scrolls in the active view, so up/down/page keys move through it."""
        target = {"overview": "#overview-box", "tensors": "#tensor-table", "metadata": "#metadata-table"}
        active = self.query_one(TabbedContent).active
        if active == "tensors" and self._filtering:
            self._filtering = False
            target["tensors"] = "#tensor-filter"
        self.query_one(target[active]).focus()

    def on_tabbed_content_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        self._focus_view()
        self.refresh_bindings()  # b (block) works in the tensors view only

    def action_next_view(self) -> None:
        tabs = self.query_one(TabbedContent)
        tabs.active = VIEWS[(VIEWS.index(tabs.active) + 1) % len(VIEWS)]

    def action_filter(self) -> None:
        tabs = self.query_one(TabbedContent)
        if tabs.active == "tensors":
            self.query_one("#tensor-filter", Input).focus()
        else:
            self._filtering = True  # focus the filter once the tensors view is shown
            tabs.active = "tensors"

    GREYED_HINTS: ClassVar[dict[str, str]] = {
        "media": "it counts a multimodal prompt's images or video: open the app with --mmproj F (the model's projector)",
        "block": "it opens the selected tensor's stored block: v to the Tensors view first"}

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "media":  # with a projector to count them
            return True if self.state.mmproj is not None else None
        if action == "block":  # a tensor row must be in view
            return None if self.query_one(TabbedContent).active != "tensors" else True
        if action == "page":  # only for a table longer than one page, in its view
            pages = self._pages.get(self.query_one(TabbedContent).active)
            return pages is not None and pages.count > 1
        return super().check_action(action, parameters)

    def action_block(self) -> None:
        table = self.query_one("#tensor-table", DataTable)
        if self.state.file is None or not table.row_count:
            return
        key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        from walkthrough.screens.block import BlockScreen

        self.app.push_screen(BlockScreen(self.state.file, key))

    @when_shown
    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.data_table.id == "tensor-table":
            self.action_block()
        elif event.data_table.id == "metadata-table" and self.state.file is not None:
            from walkthrough.screens.metadata_value import MetadataValueScreen

            self.app.push_screen(MetadataValueScreen(self.state.file, event.row_key.value))

    def action_leave_filter(self) -> None:
        if self.focused is not None and self.focused.id == "media-input":
            self.query_one("#overview-box").focus()
            return
        if self.query_one(TabbedContent).active == "tensors":
            self._filter_typed()
            self.query_one("#tensor-table").focus()
