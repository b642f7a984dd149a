"""The Prefill stage: the prompt goes through the model in chunks, filling the KV cache.

For the current chunk: which experts each layer woke (a layer x expert grid,
`experts_view.ExpertsGrid`, its legend naming each glyph), FLOPs, bytes read and their
ratio against the chosen machine's balance point; the prompt with the chunk
highlighted; progress through the chunks.
"""

from __future__ import annotations

from typing import ClassVar

from rich.console import Group
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import Static

from walkthrough.render.experts_view import ExpertsGrid
from walkthrough.render.format import bar, human_bytes
from walkthrough.render.views import activations_line, balance_line, flops_line, token_strip
from walkthrough.screens.stepping import SteppingScreen
from walkthrough.textsafe import token_label
from walkthrough.words import count

CHUNK_SIZES = (16, 32, 64, 128, 256, 512)  # what `c` cycles through


class PrefillScreen(SteppingScreen):
    """The prompt, chunk by chunk."""

    HEADING = "prefill"
    CAPTION = ("Prefill: the whole prompt goes through the model in a few large "
               "passes that fill the KV cache.")
    HELP = """
Prefill runs the whole prompt through the model before the first new token can
be chosen. The prompt is cut into chunks; each chunk is one pass through every
layer. Press space for the next chunk, enter to play.

The grid shows, per layer, which experts the chunk's tokens were routed to (a
digit counts the tokens that chose that expert). When the experts outnumber the
columns, a cell stands for a run of experts and its digit counts how many of
them were chosen; the line under the grid says which. FLOPs over bytes read is the
pass's arithmetic intensity: a chunk of many tokens reuses every weight it
reads, so its intensity is high; compare it with the machine's balance point
(compute / bandwidth, from the hardware profile): above it, the pass is limited
by compute, below it by memory.

Activations are the arrays the chunk's layers produced (norms, matrix-product
outputs, attention weights), measured from the engine's own arrays, beside the
compute buffer the cost model assumes for that many tokens.

The prompt strip shows the chunk just run highlighted, the tokens still to run
dimmed. The KV cache fills by one row per token per attention layer.

c changes the chunk size and restarts the request (asking first when passes
would be lost): bigger chunks read each
weight once for more tokens, so their intensity rises; the results do not
change with the chunk size.

x opens abliteration: the residual stream at the end of two sets of prompts
that differ in one behaviour (answer in French, or in English), the direction
between their means, each prompt's projection on it; w there writes a copy of
the file with that direction projected out of every matrix that writes into
the stream, and shows how the answers change.
"""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("c", "chunk", "Chunk size", id="prefill.chunk"),
        Binding("x", "abliterate", "Abliterate", id="prefill.abliterate"),
    ]

    def action_abliterate(self) -> None:
        """Open the abliteration view on the opened file (the numpy engine runs it)."""
        if self.state.file is None:
            return
        from walkthrough.screens.abliterate import AbliterationScreen

        self.app.push_screen(AbliterationScreen(self.state.file, self.state.tokenizer))

    def compose_main(self) -> ComposeResult:
        yield Static(id="prefill-figures")
        yield Static(id="prefill-experts")
        yield Static(id="prefill-prompt")

    def refresh_view(self) -> None:
        state = self.state
        figures = self.query_one("#prefill-figures", Static)
        steps = state.prefill_steps
        total = len(state.prompt_ids)
        if self.show_blocker(figures):
            return
        reused = steps[0].reused if steps else 0  # a follow-up's prefix already in the KV cache
        n_chunks = -(-(total - reused) // state.chunk) if total > reused else 0
        if not steps:
            figures.update(Text(f"{count(total, 'prompt token')} in {count(n_chunks, 'chunk')} of up to {state.chunk}"
                                f"{' (fewer if the KV cache holds its start)' if state.runs_on_model else ''}. "
                                "Press space to run the first chunk."))
            self.query_one("#prefill-experts", Static).update("")
            self.query_one("#prefill-prompt", Static).update(self._prompt(None, 0))
            return
        step = steps[-1]
        done = step.end
        lines = [
            Text.assemble(("chunk ", "bold"), f"{len(steps)} of {n_chunks}: positions {step.start}-{step.end - 1}",
                          f"  {bar(done / total, 20)} {done}/{total} tokens"
                          + (f" ({reused} reused from the KV cache)" if reused else "")),
            flops_line(step),
        ]
        verdict = balance_line(step, state)
        if verdict is not None:
            lines.append(verdict)
        lines.append(Text.assemble(("KV cache ", "bold"), f"{count(step.kv_len, 'position')}, {human_bytes(step.kv_bytes)}"))
        lines.append(activations_line(step, state.card))
        if state.prefill_done and step.chosen is not None:
            lines.append(Text.assemble(("first token chosen: ", "bold"), token_label(state.piece(step.chosen))))
        figures.update(Group(*lines))
        if state.card.is_moe:
            self.query_one("#prefill-experts", Static).update(Group(
                Text("\nexperts woken by this chunk", style="bold"),
                ExpertsGrid(step, state.card.n_experts, last_token_only=False),
            ))
        self.query_one("#prefill-prompt", Static).update(self._prompt((step.start, step.end), done))

    def _prompt(self, current: tuple[int, int] | None, done: int) -> Group:
        state = self.state
        specials = frozenset(t.id for t in state.chat.tokens if t.special) if state.chat else frozenset()
        strip = token_strip(state, state.prompt_ids, specials=specials, current=current, done=done)
        return Group(Text("\nthe prompt", style="bold"), strip)

    def action_chunk(self) -> None:
        """The next chunk size, and the request from its start (once the user agreed to lose the run so far)."""
        self.app.discard_then(self._next_chunk_size)

    def _next_chunk_size(self) -> None:
        state = self.state
        later = [size for size in CHUNK_SIZES if size > state.chunk]
        state.chunk = later[0] if later else CHUNK_SIZES[0]
        self.app.restart()

    def autoplay_step(self) -> bool:
        return self.step_until(self.state.prefill_done)
