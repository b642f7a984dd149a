"""The live panel beside the stepping stages: KV cache, experts lit, bytes read, top candidates.

It redraws from the last Step of the run whenever the app's state changes. On a
wide screen it is a column on the right; on a narrow one (80 columns) it sits
under the stage in a short strip whose sections stand side by side.
"""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.widgets import Static

from walkthrough.screens.format import human_bytes
from walkthrough.screens.views import candidates_table, experts_grid, kv_table

WIDE_ENOUGH = 60  # columns from which the sections are laid side by side


class LivePanel(Static):
    """What the run holds and read, after its last pass."""

    def on_mount(self) -> None:
        self.watch(self.app, "state_changed", lambda _fields: self.redraw())
        self.redraw()

    def on_resize(self) -> None:
        self.redraw()

    def redraw(self) -> None:
        state = self.app.state
        step = state.last_step
        if step is None:
            blocker = state.run_blocker()
            self.update(Text(f"Live panel: waiting for the first pass.\n{blocker or 'Press space to run one.'}"))
            return
        card = state.card
        kv = Text.assemble(("KV cache\n", "bold"), f"{step.kv_len} tokens\n{human_bytes(step.kv_bytes)}")
        if step.state_bytes:
            kv.append(f" + state {human_bytes(step.state_bytes)}")
        read = Text.assemble(
            ("bytes read\n", "bold"), f"{human_bytes(step.bytes_read.get('total', 0))} this pass\n",
            f"{human_bytes(state.cumulative_bytes().get('total', 0))} in all",
        )
        sections = [Group(kv, read)]
        if card.is_moe:
            tokens = step.end - step.start
            if tokens == 1:
                sections.append(Group(Text("experts lit", style="bold"),
                                      experts_grid(step, card.n_experts, last_token_only=True, counts=False)))
            else:
                sections.append(Group(
                    Text("experts: last token | pass", style="bold"),
                    _side_by_side(experts_grid(step, card.n_experts, last_token_only=True, counts=False),
                                  experts_grid(step, card.n_experts, last_token_only=False, counts=False)),
                ))
        sections.append(Group(Text("next token", style="bold"), candidates_table(state, step, 3)))
        if self.size.width >= WIDE_ENOUGH:
            grid = Table.grid(padding=(0, 2))
            for _section in sections:
                grid.add_column(no_wrap=True)
            grid.add_row(*sections)
            self.update(grid)
        else:
            if self.size.height > 30:
                sections.insert(1, kv_table(step))
            self.update(Group(*sections))


def _side_by_side(left, right) -> Table:
    grid = Table.grid(padding=(0, 1))
    grid.add_column()
    grid.add_column()
    grid.add_row(left, right)
    return grid
