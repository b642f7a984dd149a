"""The base of the screens opened over a stage (a stored block, the attention matrix, a metadata value).

`g` there opens the glossary with the terms that screen shows listed first,
as it does on the stages, so a term read in a block's fields or under the
attention map is one key away.
"""

from __future__ import annotations

from typing import ClassVar

from textual.binding import Binding, BindingType
from textual.screen import ModalScreen

from walkthrough.render.term_words import terms_in
from walkthrough.screens.stage_text import stage_text


class OverlayScreen(ModalScreen):
    """A modal screen over a stage whose words link to the glossary."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("g", "glossary", "Terms", id="overlay.glossary")]

    @property
    def terms(self) -> tuple[str, ...]:
        """The glossary keys this screen's text uses, in the order it shows them."""
        return terms_in(stage_text(self))

    def action_glossary(self) -> None:
        from walkthrough.screens.glossary import GlossaryScreen

        self.app.push_screen(GlossaryScreen(self.terms))
