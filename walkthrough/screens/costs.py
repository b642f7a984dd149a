"""Stage 7, Costs: the opened file's request on a real machine: memory, time to first token, decode speed.

Every figure comes from `walkthrough.engine.costs.estimate` (the model card and a
hardware profile), with its formula; the rows are the ones `walkthrough
estimate` prints. `h` cycles the hardware profiles. Beside them, what this run
measured on this machine (`engine.measured`, either engine): prefill and decode
rates and the bandwidth achieved, next to the profile's ceiling and realistic
figures, and the bytes the engine read for its last decoded token.
"""

from __future__ import annotations

from typing import ClassVar

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.widgets import Static

from walkthrough.errors import WalkthroughError
from walkthrough.screens.base import StageScreen
from walkthrough.screens.format import human_bytes
from walkthrough.textsafe import safe_text


class CostsScreen(StageScreen):
    """The same request, on a chosen machine."""

    STAGE = "costs"
    HEADING = "costs"
    TERMS = ("memory bandwidth", "bytes read", "roofline", "arithmetic intensity", "time to first token",
             "KV cache", "active parameters", "context length")
    HELP = """
What this request would cost with this model file on a real machine. Decode
reads every active weight and the whole KV cache for each token, so its speed
is capped at bandwidth / bytes read per token; prefill does about two FLOPs per
active parameter per prompt token, so its speed is capped by compute. Memory
must hold the weights, the KV cache for the context, and working buffers.

The figures come from the model card and a hardware profile (each profile's
figures have sources in the bundled hardware file); the dim column shows the
formula and its inputs. h changes the machine. The request's size is this
prompt's token count plus the answer budget. Once the run has picked a token,
"measured here" puts what this machine did (prefill and decode tokens/s,
bandwidth achieved, on the engine that ran it) beside the profile's figures.
"""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("h", "next_profile(1)", "Machine", id="costs.hardware"),
        Binding("H", "next_profile(-1)", "Previous machine", show=False),
    ]

    def compose_body(self) -> ComposeResult:
        with VerticalScroll(id="costs-box"):
            yield Static(id="costs-head")
            yield Static(id="costs-measured")
            yield Static(id="costs-table")

    def refresh_view(self) -> None:
        state = self.state
        head = self.query_one("#costs-head", Static)
        if state.card is None:
            return
        from walkthrough.engine.costs import rows

        try:
            result = state.estimate()
        except WalkthroughError as exc:  # a broken user hardware file is shown, not raised
            head.update(Text.assemble(("No hardware profiles: ", "bold"), safe_text(str(exc))))
            return
        profile = result.hardware
        n = len(state.profiles())
        head.update(Group(
            Text.assemble(("machine ", "bold"), safe_text(profile.name), (f"  ({state.profile_index % n + 1}/{n}, h)", "dim")),
            Text(f"{profile.memory_gib:g} GiB {profile.memory_kind}, {profile.bandwidth_gbs:g} GB/s, "
                 f"{profile.compute_tflops:g} TFLOPS useful compute"),
            Text(f"request: {result.prompt_tokens} prompt tokens + {result.output_tokens} answer tokens "
                 "(decimal units: 1 GB = 1e9 bytes)", style="dim"),
            self._measured(),
        ))
        self.query_one("#costs-measured", Static).update(self._comparison(result))
        table = Table(box=None, padding=(0, 1), show_edge=False)
        table.add_column("")
        table.add_column("value", justify="right", no_wrap=True)
        table.add_column("why", style="dim")
        for label, value, why in rows(result):
            table.add_row(Text(label), Text(value), Text(why))
        self.query_one("#costs-table", Static).update(table)

    def _measured(self) -> Text:
        state = self.state
        decode = state.decode_steps
        if not decode:
            return Text("measured: decode a token (stage 5) to compare with the engine's own count", style="dim")
        last = decode[-1]
        return Text.assemble(("measured by the engine: ", "bold"),
                             f"the last decoded token read {human_bytes(last.bytes_read.get('total', 0))} "
                             f"({last.bytes_read.get('total', 0):,} bytes) at {last.kv_len} positions")

    def _comparison(self, result) -> Text | Table:
        """Modelled (this profile) beside measured (this machine, this run), once the run has a first token."""
        from walkthrough.engine.measured import compare

        measured = self.state.measured()
        if measured is None:
            return Text("measured here: run the request (stages 4 and 5) to compare speeds", style="dim")
        table = Table(box=None, padding=(0, 1), show_edge=False,
                      title=f"modelled beside measured here ({measured.engine} engine)", title_justify="left")
        table.add_column("")
        for name in ("ceiling", "realistic", "measured"):
            table.add_column(name, justify="right", no_wrap=True)
        for row in compare(result, measured):
            table.add_row(row.label, row.ceiling, row.realistic, row.measured)
        return table

    def action_next_profile(self, delta: int) -> None:
        self.state.profile_index += delta
        self.app.revision += 1
