"""The glossary: the terms the stages use, from `glossary.json`, in a list beside the selected definition.

Opened with `g` (or the command palette) from any stage; the stage's own terms
are listed first. Related terms ("see also") are shown under each definition.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Footer, OptionList, Static
from textual.widgets.option_list import Option, OptionDoesNotExist

GLOSSARY_FILE = Path(__file__).with_name("glossary.json")


@dataclass(frozen=True)
class Term:
    key: str
    title: str
    text: str
    see: tuple[str, ...]


@lru_cache(maxsize=1)
def load_terms() -> dict[str, Term]:
    """Every glossary term by key, in file order."""
    data = json.loads(GLOSSARY_FILE.read_text(encoding="utf-8"))
    return {
        t["key"]: Term(t["key"], t["title"], t["text"], tuple(t.get("see", ())))
        for t in data["terms"]
    }


def term_title(key: str) -> str:
    """The display title of a term key (the key itself if the glossary lacks it)."""
    term = load_terms().get(key)
    return key if term is None else term.title


class GlossaryScreen(ModalScreen):
    """Terms on the left, the highlighted term's definition on the right."""

    CSS_PATH = "glossary.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,g,q", "dismiss", "Close", id="glossary.close"),
        Binding("enter", "follow", "Next related", id="glossary.follow"),
    ]

    def __init__(self, first: tuple[str, ...] = (), select: str | None = None) -> None:
        super().__init__()
        terms = load_terms()
        self.first = tuple(k for k in first if k in terms)
        self.select = select if select in terms else (self.first[0] if self.first else None)

    def compose(self) -> ComposeResult:
        terms = load_terms()
        options: list[Option | None] = []
        if self.first:
            options.append(Option(Text("On this screen", style="bold"), disabled=True))
            options += [Option(terms[k].title, id=f"here:{k}") for k in self.first]
            options.append(Option(Text("All terms", style="bold"), disabled=True))
        options += [Option(t.title, id=f"all:{t.key}") for t in sorted(terms.values(), key=lambda t: t.title.lower())]
        with Horizontal(id="glossary-box"):
            yield OptionList(*options, id="glossary-list")
            with VerticalScroll(id="glossary-text-box"):
                yield Static(id="glossary-text")
        yield Footer()

    def on_mount(self) -> None:
        option_list = self.query_one(OptionList)
        option_list.focus()
        target = self.select or next(iter(load_terms()))
        self._highlight(target)
        self._show(load_terms()[target])

    def _highlight(self, key: str) -> None:
        option_list = self.query_one(OptionList)
        for prefix in ("here:", "all:"):
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

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.action_follow()

    def action_follow(self) -> None:
        """Jump to the first related term of the highlighted one."""
        term = self.current
        if term and term.see:
            self._highlight(term.see[0])
