"""The live panel beside the stepping stages: KV cache, experts lit, bytes read, top candidates.

On a run split over RPC workers, the figures name each host's layers and the
KV cache by layer is grouped by host.

It redraws from the last Step of the run whenever the app's state changes. On a
wide screen it is a column on the right, its sections one under another; on a
narrow one (80 columns) it sits under the stage in a short strip whose
sections stand side by side.

The next-token candidates are never pushed out: the panel counts each
section's lines at its width and keeps, in this order, the candidates, the KV cache
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

from walkthrough.render.experts_view import ExpertsGrid
from walkthrough.render.format import human_bytes
from walkthrough.render.views import candidates_table, hosts_text, kv_table, kv_table_height
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
        width, height = self.size.width, self.size.height
        candidates = Group(Text("next token", style="bold"), candidates_table(state, step, CANDIDATES, PIECE_CHARS))
        candidates_lines = 2 + min(CANDIDATES, len(step.logits))  # title, header, rows: short cells do not wrap
        texts = (kv, read, *([hosts_text(step.split)] if step.split is not None else []))
        figures = Group(*texts)
        figures_lines = sum(len(t.wrap(self.app.console, max(width, 1))) for t in texts)
        layers = Group(Text("KV cache by layer", style="bold"), kv_table(step))
        layers_lines = 1 + kv_table_height(step, width)
        once = Text("")
        if step.first_use_bytes:  # one-time work this pass did, not in its time (shown when there is room)
            once = Text.assemble(("first use, once\n", "bold"),
                                 f"{human_bytes(step.first_use_bytes)}, {step.first_use_seconds:.1f} s")
        once_lines = len(once.wrap(self.app.console, max(width, 1))) if once.plain else 0
        if width >= WIDE_ENOUGH:  # the figures, then the first-use work, then the KV cache by layer, as room allows
            kept, left = [figures], height - figures_lines
            for part, lines in ((once, once_lines), (layers, layers_lines)):
                if lines and lines <= left:
                    kept.append(part)
                    left -= lines
            self.update(self._side_by_side(Group(*kept), candidates, height))
        else:
            sections = [(figures, figures_lines), *([(once, once_lines)] if once_lines else []), (layers, layers_lines)]
            self.update(self._stacked(sections, candidates, height - candidates_lines))

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

    def _stacked(self, sections: list[tuple[RenderableType, int]], candidates: RenderableType, left: int) -> Group:
        """One under another, in `left` lines above the candidates: the sections (with their heights) that fit,
        then the experts in the lines left."""
        kept = []
        for section, lines in sections:
            if lines <= left:
                kept.append(section)
                left -= lines
        experts = self._experts(left)
        return Group(*kept, *([experts] if experts is not None else []), candidates)

    def _side_by_side(self, column: RenderableType, candidates: RenderableType, height: int) -> Table:
        """Columns: the figures (and the KV cache by layer when it fits under them), the experts, the candidates."""
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
