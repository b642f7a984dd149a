"""The layer x expert grid of one pass, fitted to the width it is drawn at, with a legend of every glyph used.

A row per MoE layer: its label (`L12`), a cell per expert, and how many of
the layer's experts were chosen (`8/256`). When the experts do not fit (256
experts at 80 or 120 columns), each cell stands for a run of experts
(`engine.layer_groups.per_cell`) and shows how many of them were chosen. The
fitting happens when Rich draws the grid, at the width it is given, so a
resize redraws it without any screen rebuilding it. Every glyph drawn is
named in the legend under the grid:

- one expert per cell: `·` not chosen, `█` chosen (by the last token, or by
  one token of the pass), `2`-`9` chosen by that many tokens, `+` by 10 or more;
- k experts per cell: `·` none of them chosen, `1`-`9` that many, `+` 10 or
  more, `█` all k.

With `max_height`, the grid keeps to that many lines (legend included): the
layers that do not fit are named in one last row instead.
"""

from __future__ import annotations

from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from walkthrough.engine.layer_groups import lit_per_cell, per_cell, ranges_text
from walkthrough.words import count

LIT, DIM, MANY = "\u2588", "\u00b7", "+"
CELL_STYLE = {LIT: "bold green", DIM: "dim", MANY: "bold reverse green"}
DIGIT_STYLE = "bold reverse green"


class ExpertsGrid:
    """A Rich renderable: the experts each MoE layer of a pass chose (or the last token of it)."""

    def __init__(self, step, n_experts: int, *, last_token_only: bool, counts: bool = True,
                 max_height: int | None = None) -> None:
        self.step = step
        self.n_experts = n_experts
        self.last_token_only = last_token_only
        self.counts = counts
        self.max_height = max_height

    def _label_width(self) -> int:
        return max((len(f"L{t.index}") for t in self.step.layers), default=2)

    def _fixed_width(self) -> int:
        """Cells the label and count columns take, with the padding between columns."""
        used = len(f"{self.n_experts}/{self.n_experts}") + 1 if self.counts else 0
        return self._label_width() + 1 + used

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement(self._fixed_width() + 4, self._fixed_width() + self.n_experts)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        k = per_cell(self.n_experts, options.max_width - self._fixed_width())
        used: set[str] = set()
        rows = []
        for layer in self.step.layers:
            tokens = layer.tokens_per_expert(self.n_experts, last_token_only=self.last_token_only)
            if tokens is None:
                rows.append((f"L{layer.index}", Text("dense", style="dim"), ""))
                continue
            cells = _cells(tokens, k, self.last_token_only, used)
            rows.append((f"L{layer.index}", cells, f"{int((tokens > 0).sum())}/{self.n_experts}"))
        legend = Text(self.legend(k, used), style="dim")
        if self.max_height is not None and len(rows) > self.max_height - self._lines(console, options, legend):
            room = self.max_height - self._lines(console, options, legend)
            for shown in range(max(room - 1, 1), 0, -1):  # the note on the layers left out may wrap
                hidden = [int(label[1:]) for label, _, _ in rows[shown:]]
                more = Text(f"L{ranges_text(hidden)} not shown ({count(len(hidden), 'layer')})", style="dim")
                if shown + self._lines(console, options, more) <= room:
                    break
            rows = rows[:shown]
            legend = Text.assemble(more, "\n", legend)
        table = Table.grid(padding=(0, 1))
        table.add_column(justify="right", style="bold", no_wrap=True)
        table.add_column(no_wrap=True)
        if self.counts:
            table.add_column(justify="right", no_wrap=True)
        for label, cells, lit in rows:
            table.add_row(label, cells, *([lit] if self.counts else []))
        yield table
        yield legend

    @staticmethod
    def _lines(console: Console, options: ConsoleOptions, text: Text) -> int:
        return len(text.wrap(console, options.max_width))

    def legend(self, k: int, used: set[str]) -> str:
        """Each glyph in `used` (and only those) with what it means here.

        Example: k=4, used {"·", "1", "2"} -> "4 experts a cell: · none, 1 2 that many chosen"
        """
        digits = " ".join(sorted(g for g in used if g.isdigit()))
        if k > 1:
            meanings = {DIM: "none", digits: "that many chosen", MANY: "10 or more", LIT: f"all {k}"}
        else:
            meanings = {DIM: "not chosen", LIT: "chosen" if self.last_token_only else "by 1 token",
                        digits: "by that many tokens", MANY: "by 10 or more"}
        parts = [f"{glyph} {words}" for glyph, words in meanings.items() if glyph and (glyph in used or glyph == digits)]
        return (f"{k} experts a cell: " if k > 1 else "") + ", ".join(parts)


def _cells(tokens, k: int, last_token_only: bool, used: set[str]) -> Text:
    """One layer's cells (`tokens`: [n_experts] tokens per expert); the glyphs drawn are added to `used`."""
    cells = Text(no_wrap=True)
    for n in (tokens if k == 1 else lit_per_cell(tokens, k)).tolist():  # [n_cells]
        if n == 0:
            glyph = DIM
        elif (k == 1 and (last_token_only or n == 1)) or (k > 1 and n == k):
            glyph = LIT
        else:
            glyph = str(n) if n < 10 else MANY
        used.add(glyph)
        cells.append(glyph, style=CELL_STYLE.get(glyph, DIGIT_STYLE))
    return cells
