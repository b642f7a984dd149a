"""The Decode stage: one token per pass; what each pass chose, lit, read and attended to.

Per pass: the token fed and the token chosen, the experts lit per layer for it,
bytes read this pass by group and over the run, the KV cache by groups of layers
that keep the same (`views.kv_table`), one
attention head's weights over the earlier tokens (layer and head selectable),
and the reply so far.
"""

from __future__ import annotations

from typing import ClassVar

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import Static

from walkthrough.render.experts_view import ExpertsGrid
from walkthrough.render.format import answer_ending, bar, head_name
from walkthrough.render.views import (
    activations_line,
    balance_line,
    bytes_table,
    flops_line,
    kv_table,
)
from walkthrough.screens.stage_text import plain
from walkthrough.screens.stepping import SteppingScreen
from walkthrough.textsafe import safe_text, token_label

ATTENTION_SHOWN = 8  # earlier tokens listed in the attention view
ATTENTION_BELOW = Text("↓ the attention view is below: j jumps to it (or scroll)", style="italic")


class DecodeScreen(SteppingScreen):
    """The answer, token by token."""

    HEADING = "decode"
    CAPTION = ("Decode: one pass per new token, and every pass reads the weights "
               "again to write one token.")
    HELP = """
Decode writes the answer one token per pass: the token chosen by the previous
pass goes in, every layer runs on that one position, and the sampler picks the
next token. Press space for one token, enter to play.

Each pass reads all the weights it uses (for a mixture of experts, only the
experts this token was routed to) but does little arithmetic with them, so its
speed is set by memory bandwidth: bytes read per token is the number to watch.
The KV cache grows by one position per token and is read in full every pass;
its table groups the layers that keep the same (a sliding-window or linear layer
keeps less, and a strip of one letter per layer shows which is which).

The attention view lists, for one layer and head, the earlier tokens the new
token attended to most, with their weights. [ and ] change the layer, , and .
change the head. On a small terminal it sits below the fold: a line under the
token says so, and j jumps to it (j again: back to the top).
"""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("left_square_bracket", "layer(-1)", "Previous layer", group=Binding.Group("Layer", compact=True)),
        Binding("right_square_bracket", "layer(1)", "Next layer", group=Binding.Group("Layer", compact=True)),
        Binding("comma", "head(-1)", "Previous head", group=Binding.Group("Head", compact=True)),
        Binding("full_stop", "head(1)", "Next head", group=Binding.Group("Head", compact=True)),
        Binding("j", "jump_attention", "Attention view", id="decode.jump", show=False),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.attn_layer = 0
        self.attn_head = 0

    def compose_main(self) -> ComposeResult:
        yield Static(id="decode-token")
        yield Static(ATTENTION_BELOW, id="decode-hint")
        yield Static(id="decode-reply")
        yield Static(id="decode-detail")
        yield Static(id="decode-attention")

    def on_mount(self) -> None:  # (Textual runs StageScreen.on_mount too)
        self.watch(self.query_one("#stage-main"), "scroll_y", lambda _y: self._show_hint(), init=False)

    def on_resize(self) -> None:
        self.call_after_refresh(self._show_hint)

    def _attention_below(self) -> bool:
        """True when the attention view has content and starts below what the stage's scroll area shows."""
        main, view = self.query_one("#stage-main"), self.query_one("#decode-attention", Static)
        if not plain(view.content).strip():
            return False
        return view.virtual_region.y >= main.scroll_y + main.scrollable_content_region.height

    def _show_hint(self) -> None:
        """The hint keeps its line while the stage scrolls (so the view does not jump), shown only when needed."""
        hint, main = self.query_one("#decode-hint"), self.query_one("#stage-main")
        hint.display = main.max_scroll_y > 0 or self._attention_below()
        hint.visible = self._attention_below()

    def action_jump_attention(self) -> None:
        """Scroll the attention view to the top of the stage (or, when it is there already, back to the top)."""
        main, view = self.query_one("#stage-main"), self.query_one("#decode-attention")
        at_view = main.scroll_y >= min(view.virtual_region.y, main.max_scroll_y) > 0
        main.scroll_to(y=0 if at_view else view.virtual_region.y, animate=False)

    def refresh_view(self) -> None:
        state = self.state
        token_view = self.query_one("#decode-token", Static)
        if self.show_blocker(token_view):
            return
        steps = state.decode_steps
        reply = state.tokenizer.decode(state.answer_ids()) if state.tokenizer else ""
        self.query_one("#decode-reply", Static).update(
            Group(Text("the reply so far", style="bold"), safe_text(reply, keep_newlines=True))
        )
        if not steps:
            done = state.steps[-1].end if state.steps else 0
            note = (f"Prefill has run {done} of {len(state.prompt_ids)} prompt tokens: space runs its next chunk, "
                    "enter plays on into the answer." if not state.prefill_done else "Press space to decode a token.")
            token_view.update(Text(note))
            self.query_one("#decode-detail", Static).update("")
            self.query_one("#decode-attention", Static).update("")
            self.call_after_refresh(self._show_hint)
            return
        step = steps[-1]
        fed = step.input_ids[0]
        line = Text.assemble(("token ", "bold"), f"{len(steps)} at position {step.start}: fed ",
                             token_label(state.piece(fed), "reverse"), " -> chose ")
        if step.chosen is not None:
            line.append_text(token_label(state.piece(step.chosen), "bold reverse"))
        ending = answer_ending(state)
        if ending:
            line.append(f"  ({ending})", style="italic")
        verdict = balance_line(step, state)
        token_view.update(Group(line, flops_line(step), *([verdict] if verdict else []),
                                activations_line(step, state.card)))
        parts = []
        if state.card.is_moe:
            parts.append(Group(Text("experts lit for this token", style="bold"),
                               ExpertsGrid(step, state.card.n_experts, last_token_only=True)))
        parts.append(Group(Text("bytes read", style="bold"), bytes_table(step, state.cumulative_bytes())))
        parts.append(Group(Text("KV cache", style="bold"), kv_table(step)))
        self.query_one("#decode-detail", Static).update(Group(*parts))
        self.query_one("#decode-attention", Static).update(self._attention(step))
        self.call_after_refresh(self._show_hint)

    def _attention(self, step) -> Group:
        state = self.state
        layers = [layer for layer in step.layers if layer.attention is not None]
        if not layers:
            return Group(Text("attention: not recorded for this pass", style="dim"))
        layer = layers[self.attn_layer % len(layers)]
        n_head, kv_len = layer.attention.shape  # [n_head, kv_len]
        head = self.attn_head % n_head
        title = Text.assemble(("attention ", "bold"),
                              f"layer {layer.index}, {head_name(head, n_head)}: most attended earlier tokens",
                              (" ([ ] layer, , . head)", "dim"))
        table = Table(box=None, padding=(0, 1), show_edge=False)
        table.add_column("pos", justify="right")
        table.add_column("token")
        table.add_column("weight", justify="right")
        table.add_column("")
        ranked = layer.most_attended(head, ATTENTION_SHOWN)
        tokens = state.session_tokens(kv_len)
        for pos, weight in ranked:
            piece = state.piece(tokens[pos]) if pos < len(tokens) else "?"
            table.add_row(str(pos), token_label(piece), f"{weight:.3f}", bar(weight / ranked[0][1], 12))  # bars relative to the strongest
        return Group(title, table)

    def action_layer(self, delta: int) -> None:
        self.attn_layer += delta
        self.redraw()

    def action_head(self, delta: int) -> None:
        self.attn_head += delta
        self.redraw()

    def autoplay_step(self) -> bool:
        return self.step_until(self.state.finished)
