"""The Tokens stage: the rendered prompt cut into tokens, with counts and a token cursor.

Pieces are shown in alternating styles, special tokens reversed; `i` shows each
token's id after it. left/right (or h/l) move the cursor; the selected token's
id, stored bytes, specialness and message are shown under the counts.
"""

from __future__ import annotations

import re
from typing import ClassVar

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.widgets import Static

from walkthrough.render.views import token_style
from walkthrough.screens.base import StageScreen
from walkthrough.textsafe import safe_text, token_label

CURSOR_STYLE = "bold reverse yellow"
BYTE_PIECE = re.compile(r"<0x[0-9A-Fa-f]{2}>")  # a byte-fallback token's piece
TOKEN_KEYS = Binding.Group("Token", compact=True)  # the cursor keys, one footer entry


class TokensScreen(StageScreen):
    """What the model actually reads."""

    HEADING = "tokens"
    CAPTION = ("That text is cut into tokens by the model's own vocabulary; the model "
               "only ever sees these ids.")
    HELP = """
The model never sees characters: the tokenizer from the file cuts the rendered
prompt into tokens, each a number (its id) in the vocabulary. Pieces alternate
in style so you can see where one token ends and the next begins; special tokens
are reversed. Special-token text inside a message stays ordinary text: only the
template's own markers become special tokens.

Counts: characters, bytes (UTF-8), tokens, and characters per token, over the
whole prompt and per message.

Text the vocabulary cannot encode (a character with no token and no byte token
to spell it) is dropped, as llama.cpp drops it: the model never sees it. When
that happens a yellow "Text lost" line names how many characters, which ones,
and where the first one is, and the counts gain a "lost" column.

Keys: left / right (or h / l) move the cursor, home / end jump, i shows the ids,
m replays the file's BPE merges on this prompt one merge per key press (and t
there trains a small BPE on a paragraph, to show where merges come from).
The selected token's id, stored bytes, whether it is special and which message
it came from are shown above the strip.
"""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("i", "toggle_ids", "Ids", id="tokens.ids"),
        Binding("m", "merges", "Merges", id="tokens.merges"),
        Binding("left,h", "move(-1)", "Previous token", group=TOKEN_KEYS),
        Binding("right,l", "move(1)", "Next token", group=TOKEN_KEYS),
        Binding("home", "jump(0)", "First token", show=False),
        Binding("end", "jump(-1)", "Last token", show=False),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.cursor = 0
        self.show_ids = False

    def compose_body(self) -> ComposeResult:
        yield Static(id="token-counts")
        yield Static(id="token-lost")
        yield Static(id="token-selected")
        with VerticalScroll(id="token-strip-box"):
            yield Static(id="token-strip")

    def cursor_text(self) -> str:
        """What the selected token is, in glossary words: a byte token, a special token or a token."""
        chat = self.state.chat
        if chat is None or not chat.tokens:
            return ""
        token = chat.tokens[self.cursor]
        kind = "special token" if token.special else "token"
        return f"byte token {kind}" if BYTE_PIECE.fullmatch(token.piece) else kind

    def refresh_view(self) -> None:
        state = self.state
        chat = state.chat
        counts = self.query_one("#token-counts", Static)
        if chat is None:
            problem = state.unavailable.get("tokenizer") or state.unavailable.get("tokens")
            counts.update(Text.assemble(("No tokens: ", "bold"), safe_text(problem or "still preparing")))
            return
        self.cursor = min(max(self.cursor, 0), max(len(chat.tokens) - 1, 0))
        counts.update(self._counts(chat))
        lost = chat.lost_message(state.tokenizer)
        warning = self.query_one("#token-lost", Static)
        warning.display = lost is not None
        warning.update(Text.assemble(("Text lost: ", "bold"), lost or "", style="yellow"))
        self.query_one("#token-selected", Static).update(self._selected(chat))
        self.query_one("#token-strip", Static).update(self._strip(chat))

    def _counts(self, chat) -> Table:
        state = self.state
        table = Table(box=None, padding=(0, 1), show_edge=False)
        lost = bool(chat.lost)  # the column only when the vocabulary dropped text
        for name in ("", "characters", "bytes", "tokens", "chars/token", *(("lost",) if lost else ())):
            table.add_column(name, justify="right" if name else "left")
        rows = [("whole prompt", chat.counts())]
        rows += [(f"{i + 1}. {message.get('role', '?')}", chat.counts(i)) for i, message in enumerate(state.messages)]
        for label, c in rows:
            per = "" if c.chars_per_token is None else f"{c.chars_per_token:.2f}"
            cells = [str(c.characters), str(c.bytes), str(c.tokens), per, *((str(c.lost),) if lost else ())]
            table.add_row(safe_text(label), *cells)
        return table

    def _selected(self, chat) -> Text:
        if not chat.tokens:
            return Text("The prompt has no tokens.")
        token = chat.tokens[self.cursor]
        raw = self.state.tokenizer.token_bytes(token.id)
        where = "template text" if token.message is None else f"message {token.message + 1}"
        return Text.assemble(
            ("token ", "bold"), f"{self.cursor + 1}/{len(chat.tokens)}  ",
            ("id ", "bold"), f"{token.id}  ",
            ("piece ", "bold"), token_label(token.piece, "reverse"), "  ",
            ("bytes ", "bold"), raw.hex(" ") or "(none)", "  ",
            ("special" if token.special else "ordinary", "bold" if token.special else ""), "  ",
            ("from ", "bold"), where,
        )

    def _strip(self, chat) -> Text:
        text = Text()
        for i, token in enumerate(chat.tokens):
            style = CURSOR_STYLE if i == self.cursor else token_style(i, token.special)
            text.append_text(token_label(token.piece, style))  # whitespace as signs: ␣ ↵ →
            if token.piece.endswith("\n"):
                text.append("\n")  # and the prompt's lines kept as lines
            if self.show_ids:
                text.append(f"{token.id} ", style="dim")
        return text

    def action_move(self, delta: int) -> None:
        self.cursor += delta
        self.redraw()
        self._follow_cursor()

    def _follow_cursor(self) -> None:
        """Scroll the strip so the cursor's part of the prompt is in view (by its share of the tokens)."""
        chat = self.state.chat
        if not chat or not chat.tokens:
            return
        box = self.query_one("#token-strip-box", VerticalScroll)
        line = self.cursor / len(chat.tokens) * box.virtual_size.height
        if not box.scroll_y <= line < box.scroll_y + box.size.height - 1:
            box.scroll_to(y=max(line - box.size.height // 2, 0), animate=False)

    def action_jump(self, where: int) -> None:
        self.cursor = where if where >= 0 else len(self.state.chat.tokens) - 1 if self.state.chat else 0
        self.redraw()
        self._follow_cursor()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "merges":  # greyed until the prompt is tokenized
            return self.state.chat is not None and self.state.tokenizer is not None
        return super().check_action(action, parameters)

    def action_merges(self) -> None:
        from walkthrough.screens.merges import MergesScreen

        if self.state.chat is not None and self.state.tokenizer is not None:
            self.app.push_screen(MergesScreen(self.state.tokenizer, self.state.chat))

    def action_toggle_ids(self) -> None:
        self.show_ids = not self.show_ids
        self.redraw()
