"""The live panel beside the stepping stages: KV cache, experts lit, bytes read, top candidates.

It redraws from the last Step of the run whenever the app's state changes. On a
wide screen it is a column on the right, its sections one under another; on a
narrow one (80 columns) it sits under the stage in a short strip whose
sections stand side by side.

The next-token candidates are never pushed out: the panel measures each
section at its width and keeps, in this order, the candidates, the KV cache
and bytes read figures, the KV cache by layer (layers that keep the same
grouped, `views.kv_table`) and, in the lines left, the experts grid (fitted
to its width by `experts_view.ExpertsGrid`, layers beyond its height named
in one row). A 30- or 64-layer model fits at 80x24 and 120x40.
"""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual.widgets import Static

from walkthrough.screens.experts_view import ExpertsGrid
from walkthrough.screens.format import human_bytes
from walkthrough.screens.views import candidates_table, kv_table
from walkthrough.words import count

WIDE_ENOUGH = 60  # columns from which the sections are laid side by side
CANDIDATES = 3  # next-token candidates listed
PIECE_CHARS = 12  # longest candidate text, so the figures beside it keep their room
MIN_GRID_LINES = 4  # an experts grid gets at least its title, one row, a note on the others and its legend


class LivePanel(Static):
    """What the run holds and read, after its last pass."""

    def on_mount(self) -> None:
        self.watch(self.app, "state_changed", lambda _fields: self.redraw())
        self.redraw()

    def on_resize(self) -> None:
        self.redraw()

    def redraw(self) -> None:
        self._draw()
        refresh_terms = getattr(self.screen, "refresh_terms", None)
        if refresh_terms is not None:  # the panel is part of the stage's text: its terms line follows it
            refresh_terms()

    def _draw(self) -> None:
        state = self.app.state
        step = state.last_step
        if step is None:
            blocker = state.run_blocker()
            self.update(Text(f"Live panel: waiting for the first pass.\n{blocker or 'Press space to run one.'}"))
            return
        kv = Text.assemble(("KV cache\n", "bold"), f"{count(step.kv_len, 'token')}\n{human_bytes(step.kv_bytes)}")
        if step.state_bytes:
            kv.append(f" + state {human_bytes(step.state_bytes)}")
        read = Text.assemble(
            ("bytes read\n", "bold"), f"{human_bytes(step.bytes_read.get('total', 0))} this pass\n",
            f"{human_bytes(state.cumulative_bytes().get('total', 0))} in all",
        )
        candidates = Group(Text("next token", style="bold"), candidates_table(state, step, CANDIDATES, PIECE_CHARS))
        layers = Group(Text("KV cache by layer", style="bold"), kv_table(step))
        width, height = self.size.width, self.size.height
        if width >= WIDE_ENOUGH:
            self.update(self._side_by_side(Group(kv, read), layers, candidates, width, height))
        else:
            self.update(self._stacked([Group(kv, read), layers], candidates, width, height))

    def _lines(self, renderable: RenderableType, width: int) -> int:
        console = self.app.console
        return len(console.render_lines(renderable, console.options.update_width(max(width, 1)), pad=False))

    def _experts(self, max_height: int) -> Group | None:
        """The experts grid in `max_height` lines (title included); None for a dense model or too few lines."""
        state = self.app.state
        step = state.last_step
        if not state.card.is_moe or max_height < MIN_GRID_LINES:
            return None
        one_token = step.end - step.start == 1
        title = "experts lit" if one_token else "experts woken by the pass"
        return Group(Text(title, style="bold"), ExpertsGrid(step, state.card.n_experts, last_token_only=one_token,
                                                            counts=False, max_height=max_height - 1))

    def _stacked(self, sections: list[RenderableType], candidates: RenderableType, width: int,
                 height: int) -> Group:
        """One under another: the candidates kept, then the figures that fit, the experts in the lines left."""
        left = height - self._lines(candidates, width)
        kept = []
        for section in sections:
            need = self._lines(section, width)
            if need <= left:
                kept.append(section)
                left -= need
        experts = self._experts(left)
        return Group(*kept, *([experts] if experts is not None else []), candidates)

    def _side_by_side(self, figures: RenderableType, layers: RenderableType, candidates: RenderableType,
                      width: int, height: int) -> Table:
        """Columns: the figures (and the KV cache by layer when it fits under them), the experts, the candidates."""
        column = figures
        if self._lines(figures, width) + self._lines(layers, width) <= height:
            column = Group(figures, layers)
        grid = Table.grid(padding=(0, 2))
        grid.add_column(no_wrap=True)
        cells = [column]
        experts = self._experts(height)
        if experts is not None:  # the experts take the width the other two leave
            grid.expand = True
            grid.add_column(ratio=1)
            cells.append(experts)
        grid.add_column(no_wrap=True)
        cells.append(candidates)
        grid.add_row(*cells)
        return grid
