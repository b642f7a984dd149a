"""The attention matrix of the run so far, over the Prefill, Decode or Sampling stage (press a there).

One layer and one query head as a half-block heat map (`heatmap`): row i is
what the token at position i attended to, the grey upper triangle the causal
mask. up/down move the cursor over the tokens (page up/down by a screen), [ and
] change the layer, , and . the head; the list under the map names the keys the
cursor's token weighted most, as pieces with the message they came from.
Decoding adds a row per token; the rows already drawn do not change.
Linear-attention layers of hybrid models have no matrix, and the view says so.
v turns the map into two arrows: the cursor's query and one key (the one it weighted
most; left/right pick the next by weight), projected on the head's keys' first two
principal directions, with the run's score and the projection's (`engine.query_key`,
drawn by `render.dot_arrows`).
The rows are the engine's (`engine.attention_map`); nothing is computed here.
"""

from __future__ import annotations

from typing import ClassVar

from rich.console import Group
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import Static

from walkthrough.render.format import head_name
from walkthrough.render.heatmap import heat_map, legend
from walkthrough.screens.footer import KeysFooter
from walkthrough.screens.overlay import OverlayScreen
from walkthrough.textsafe import safe_text, token_label
from walkthrough.words import count

TOP_SHOWN = 4
RESERVED_LINES = 12  # heading, legend, axis lines, the top list and the footer
LABEL = 6  # row label cells before the map


class AttentionScreen(OverlayScreen):
    """One layer and head of the causal attention matrix, with a cursor over the tokens."""

    CSS_PATH = "help.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q,a", "dismiss", "Close", id="attention.close"),
        Binding("down,j", "move(1)", "Next token", id="attention.down"),
        Binding("up,k", "move(-1)", "Previous token", id="attention.up"),
        Binding("pagedown", "move(20)", "Page down", show=False),
        Binding("pageup", "move(-20)", "Page up", show=False),
        Binding("right_square_bracket", "layer(1)", "Layer +", id="attention.layer_up"),
        Binding("left_square_bracket", "layer(-1)", "Layer -", id="attention.layer_down"),
        Binding("full_stop", "head(1)", "Head +", id="attention.head_up"),
        Binding("comma", "head(-1)", "Head -", id="attention.head_down"),
        Binding("v", "vectors", "Arrows", id="attention.vectors"),
        Binding("right,l", "key(1)", "Next key", id="attention.key_up"),
        Binding("left,h", "key(-1)", "Previous key", id="attention.key_down"),
    ]

    def __init__(self, state) -> None:
        super().__init__()
        self.state = state
        self.at_layer = next((i for i, kind in enumerate(state.model.config.mixers) if kind != "linear"), 0)
        self.at_head = 0
        self.cursor = max(0, (state.last_step.end if state.last_step else 1) - 1)
        self.vectors = False  # two arrows of one dot product instead of the map
        self.key_rank = 0  # which key by weight the arrows show (0: the one weighted most)

    def compose(self) -> ComposeResult:
        yield Static(id="attention-view")
        yield KeysFooter()

    def on_mount(self) -> None:
        self.show()

    def on_resize(self) -> None:
        self.show()

    def show(self) -> None:
        view = self.query_one("#attention-view", Static)
        blocker = self.state.attention_rows_blocker()
        amap = self.state.attention_map()
        config = self.state.model.config
        heading = Text.assemble(("Attention ", "bold"), f"layer {self.at_layer} of {config.n_layers}, ")
        if blocker or not amap.length:
            why = blocker or "no pass has run yet: press space on the Prefill stage, then a"
            view.update(Group(heading, safe_text(why)))
            return
        self.cursor = min(self.cursor, amap.length - 1)
        missing = amap.missing(self.at_layer)
        if missing:
            attention = [i for i in range(config.n_layers) if amap.missing(i) is None]
            view.update(Group(heading, Text(f"{missing}. Layers with a matrix: {attention}; [ and ] move.")))
            return
        heading.append(f"{head_name(self.at_head, config.n_head)} (reads KV head {amap.kv_head(self.at_layer, self.at_head)} "
                       f"of {config.n_head_kv[self.at_layer]}); {count(amap.length, 'position')}")
        width, height = self.size.width or 80, self.size.height or 24
        if self.vectors:
            view.update(Group(heading, self._arrows(amap, width, height)))
            return
        drawing, _ = heat_map(amap.matrix(self.at_layer, self.at_head), self.cursor,
                              max(4, height - RESERVED_LINES), max(10, width - LABEL - 2))
        view.update(Group(heading, legend(), drawing, self._top(amap)))

    def _top(self, amap) -> Text:
        """The keys the cursor's token weighted most: position, weight, piece and where it came from."""
        tokens = self.state.session_tokens(amap.length)
        out = Text.assemble(("token ", "bold"), f"{self.cursor} ", self._piece(tokens, self.cursor),
                            (" attends most to:", "bold"))
        for pos, weight in amap.top(self.at_layer, self.at_head, self.cursor, TOP_SHOWN):
            out.append(f"\n  {pos:>4}  {weight:6.1%}  ")
            out.append_text(self._piece(tokens, pos))
            out.append(f"  ({self._origin(pos)})", style="dim")
        return out

    def _arrows(self, amap, width: int, height: int) -> Text | Group:
        """The cursor's query and one key as arrows, with their score (`render.dot_arrows`)."""
        from walkthrough.engine.query_key import MIN_KEYS
        from walkthrough.render.dot_arrows import arrows_canvas, pair_lines

        qk = self.state.query_keys()
        if self.at_layer not in qk.queries:
            return Text("This run recorded no queries (the numpy engine records them with the attention "
                        "rows; llama.cpp's does not): run the request on the numpy engine to see the arrows.")
        if qk.length < MIN_KEYS:
            return Text(f"{count(qk.length, 'position')}: the arrows need at least {MIN_KEYS} keys.")
        ranked = amap.top(self.at_layer, self.at_head, self.cursor, self.cursor + 1)
        self.key_rank = min(self.key_rank, len(ranked) - 1)
        key, weight = ranked[self.key_rank]
        pair = qk.pair(self.at_layer, self.at_head, self.cursor, key)
        tokens = self.state.session_tokens(amap.length)
        title = Text.assemble(("query ", "bold cyan"), f"{self.cursor} ", self._piece(tokens, self.cursor),
                              ("  key ", "bold magenta"), f"{key} ", self._piece(tokens, key),
                              (f"  (weighted #{self.key_rank + 1} of {len(ranked)}; left/right: another)", "dim"))
        caption = Text("projection on this head's keys' first two principal directions (u1 across, u2 up)",
                       style="dim")
        canvas = arrows_canvas(pair, min(width - 2, 61), max(5, height - RESERVED_LINES - 1))
        return Group(title, caption, canvas, pair_lines(pair, weight))

    def _piece(self, tokens: list[int], pos: int) -> Text:
        return token_label(self.state.piece(tokens[pos])) if pos < len(tokens) else Text("?")

    def _origin(self, pos: int) -> str:
        """Which message a prompt position came from (its role), template text, or the answer."""
        chat = self.state.chat
        if chat is None or pos >= len(chat.tokens):
            return "answer"
        message = chat.tokens[pos].message
        if message is None:
            return "template"
        role = self.state.messages[message].get("role", "?") if message < len(self.state.messages) else "?"
        return f"message {message + 1}, {role}"

    def action_move(self, delta: int) -> None:
        self.cursor = max(0, self.cursor + delta)
        self.show()

    def action_vectors(self) -> None:
        self.vectors = not self.vectors
        self.show()

    def action_key(self, delta: int) -> None:
        self.key_rank = max(0, self.key_rank + delta)
        self.show()

    def action_layer(self, delta: int) -> None:
        self.at_layer = (self.at_layer + delta) % self.state.model.config.n_layers
        self.show()

    def action_head(self, delta: int) -> None:
        self.at_head = (self.at_head + delta) % self.state.model.config.n_head
        self.show()
