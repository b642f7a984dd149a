"""The glossary: the terms the stages use, from `glossary.json`, in a list beside the selected definition.

Opened with `g` (or the command palette) from any stage. The list starts with
the terms under the cursor (the focused table's row, the selected token), then
the terms the stage shows now (its terms line), then every term; the first term
under the cursor is selected, so `g` on a row opens that row's term. Related
terms ("see also") are shown under each definition; enter follows the first.
"""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option, OptionDoesNotExist

from walkthrough.render.terms import Term, load_terms
from walkthrough.screens.footer import KeysFooter
from walkthrough.screens.typeahead import when_shown


class GlossaryScreen(ModalScreen):
    """Terms on the left, the highlighted term's definition on the right."""

    CSS_PATH = "glossary.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,g,q", "dismiss", "Close", id="glossary.close"),
        Binding("enter", "follow", "Next related", id="glossary.follow"),
    ]

    def __init__(self, first: tuple[str, ...] = (), select: str | None = None, under: tuple[str, ...] = ()) -> None:
        super().__init__()
        terms = load_terms()
        self.under = tuple(k for k in under if k in terms)
        self.first = tuple(k for k in first if k in terms)
        self.select = select if select in terms else next(iter(self.under + self.first), None)

    def compose(self) -> ComposeResult:
        terms = load_terms()
        options: list[Option | None] = []
        for heading, prefix, keys in (("Under the cursor", "under:", self.under), ("On this screen", "here:", self.first)):
            if keys:
                options.append(Option(Text(heading, style="bold"), disabled=True))
                options += [Option(terms[k].title, id=prefix + k) for k in keys]
        if options:
            options.append(Option(Text("All terms", style="bold"), disabled=True))
        options += [Option(t.title, id=f"all:{t.key}") for t in sorted(terms.values(), key=lambda t: t.title.lower())]
        with Horizontal(id="glossary-box"):
            yield OptionList(*options, id="glossary-list")
            with VerticalScroll(id="glossary-text-box"):
                yield Static(id="glossary-text")
        yield KeysFooter()

    def on_mount(self) -> None:
        option_list = self.query_one(OptionList)
        option_list.focus()
        target = self.select or next(iter(load_terms()))
        self._highlight(target)
        self._show(load_terms()[target])

    def _highlight(self, key: str) -> None:
        option_list = self.query_one(OptionList)
        for prefix in ("under:", "here:", "all:"):
            try:
                option_list.highlighted = option_list.get_option_index(prefix + key)
                return
            except OptionDoesNotExist:
                pass

    @property
    def current(self) -> Term | None:
        option_list = self.query_one(OptionList)
        if option_list.highlighted is None:
            return None
        option_id = option_list.get_option_at_index(option_list.highlighted).id
        return load_terms().get(option_id.split(":", 1)[1]) if option_id else None

    def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        if self.current is not None:
            self._show(self.current)

    def _show(self, term: Term) -> None:
        text = Text(term.title + "\n\n", style="bold")
        text.append(term.text)
        if term.see:
            text.append("\n\nSee also: ", style="bold")
            text.append(", ".join(term.see))
        self.query_one("#glossary-text", Static).update(text)

    @when_shown
    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.action_follow()

    def action_follow(self) -> None:
        """Jump to the first related term of the highlighted one."""
        term = self.current
        if term and term.see:
            self._highlight(term.see[0])
