"""The Costs stage: the opened file's request on a real machine: memory, time to first token, decode speed.

Every figure comes from `walkthrough.costs.estimate.estimate` (the model card and a
hardware profile), with its formula; the rows are the ones `walkthrough
estimate` prints. `h` cycles the hardware profiles; c/l/o/u double the
context, prompt, answer and users (shift halves), k cycles the KV cache type,
r goes back to the request on screen; v shows the curves (engine.curves) as
plots, m every machine side by side (engine.machines), s sorts them, w
replays the run's answer at each machine's speed (engine.race), at the rates the
user types in the race's field (t) and at reading speed (costs.race_rates), x the request over
several hosts (costs.several_hosts: + and - hosts, i the link), e bytes held against bytes read per
token of this file and another one at the file's quantization and other ggml types (b,
costs.held_read), d the same request written by a diffusion LM beside autoregression
(costs.diffusion: ] and [ double and halve its steps). Beside them, what this run
measured on this machine (`engine.measured`, either engine): prefill and decode
rates and the bandwidth achieved, next to the profile's ceiling and realistic
figures, and the bytes the engine read for its last decoded token.
"""

from __future__ import annotations

import time
from typing import ClassVar

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.widgets import Input, Static

from walkthrough.errors import WalkthroughError
from walkthrough.request import stages
from walkthrough.screens.base import StageScreen
from walkthrough.screens.cost_views import CurvePlot, curve_table, machines_table, race_lines
from walkthrough.textsafe import safe_text
from walkthrough.units import fmt
from walkthrough.words import count

RACE_TICK = 0.1  # seconds between redraws of the race
MIN_CURVE_END = 4096  # curves reach at least this many tokens, even for a file declaring a shorter context


class CostsScreen(StageScreen):
    """The same request, on a chosen machine."""

    HEADING = "costs"
    CAPTION = ("Costs: what this file needs on a real machine: memory, time to the "
               "first token, tokens per second.")
    HELP = """
What this request would cost with this model file on a real machine. Decode
reads every active weight and the whole KV cache for each token, so its speed
is capped at bandwidth / bytes read per token; prefill does about two FLOPs per
active parameter per prompt token, so its speed is capped by compute. Memory
must hold the weights, the KV cache for the context, and working buffers.

The figures come from the model card and a hardware profile (each profile's
figures have sources in the bundled hardware file); the dim column shows the
formula and its inputs. The bar under it stacks what the request fills the
machine's memory with: weights, KV cache, compute buffers and the profile's
reserve for the system, with what is left free (or, past a red edge, what does
not fit). h changes the machine. Knobs: c context, l prompt
length, o answer length, u users (each doubles; shift halves), k KV cache type
(f16, q8_0, q4_0), r back to this request. v cycles table / KV cache plot /
first-token plot / decode plot / users plot (the table view lists every
curve's points as text); m lists every machine side by side for this request, s sorts it
(decode, first token, bandwidth, memory, name). x splits the model over
several hosts of this machine joined by a link (+ and - change the number of
hosts, i the link): one token's time host by host with each link hop, the
prompt in chunks, what each host keeps, beside one box and beside how many of
each machine (SRAM chips, or hosts) hold it. d sets the same request as a
diffusion language model would write it: every step a pass over the whole
canvas (prompt + answer, attention both ways, no KV cache), steps instead of
tokens (] and [ double and halve them), beside the token-by-token way. w races this run's answer:
each machine writes it token by token at its predicted decode rate after its
predicted time to first token (and this machine at its measured rate); t types
your own rates (3 12 60 tokens/s), raced beside a reader's pace: adults read
about 238 words a minute (Brysbaert 2019), turned into tokens/s with this
answer's own words per token. e shows bytes held against bytes read per token
for this file and a second one (--beside, else the bundled tiny model) on one
axis, b / B switch both to another ggml type (bits per weight from ggml's
block sizes; norms and routers keep theirs). The request's size is this
prompt's token count plus the answer budget. Once the run has picked a token,
"measured here" puts what this machine did (prefill and decode tokens/s,
bandwidth achieved, on the engine that ran it) beside the profile's figures.
"""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("h", "next_profile(1)", "Machine", id="costs.hardware"),
        Binding("H", "next_profile(-1)", "Previous machine", show=False),
        Binding("v", "next_view", "Plot", id="costs.view"),
        Binding("m", "machines", "All machines", id="costs.machines"),
        Binding("s", "sort", "Sort", id="costs.sort"),
        Binding("w", "race", "Race", id="costs.race"),
        Binding("t", "rates", "Your rates", id="costs.rates"),
        Binding("x", "hosts", "Hosts", id="costs.hosts"),
        Binding("e", "held", "Held/read", id="costs.held"),
        Binding("b", "bits(1)", "Bits", id="costs.bits"),
        Binding("B", "bits(-1)", "Bits back", show=False),
        Binding("plus,equals_sign", "host_count(1)", "More hosts", show=False),
        Binding("minus", "host_count(-1)", "Fewer hosts", show=False),
        Binding("i", "next_link", "Link", show=False),
        Binding("d", "diffusion", "Diffusion", id="costs.diffusion"),
        Binding("right_square_bracket", "steps(2)", "Steps x 2", id="costs.steps_up"),
        Binding("left_square_bracket", "steps(0.5)", "Steps / 2", id="costs.steps_down"),
        Binding("c", "knob('context', 2)", "Context", id="costs.context"),
        Binding("C", "knob('context', 0.5)", "Context / 2", show=False),
        Binding("l", "knob('prompt_tokens', 2)", "Prompt", id="costs.prompt"),
        Binding("L", "knob('prompt_tokens', 0.5)", "Prompt / 2", show=False),
        Binding("o", "knob('output_tokens', 2)", "Answer", id="costs.output"),
        Binding("O", "knob('output_tokens', 0.5)", "Answer / 2", show=False),
        Binding("u", "knob('users', 2)", "Users", id="costs.users"),
        Binding("U", "knob('users', 0.5)", "Users / 2", show=False),
        Binding("k", "cache_type", "KV type", id="costs.cache"),
        Binding("r", "reset", "This request", show=False),
    ]
    VIEWS = ("table", "kv", "ttft", "decode", "users")

    def __init__(self) -> None:
        super().__init__()
        self.size_knobs = None  # engine.request_size.RequestSize once a knob turned; None: the request on screen
        self.view = "table"  # one of VIEWS, or "machines", "race", "hosts"
        self.hosts = 2  # the hosts view's number of hosts
        self.link_index = 1  # the hosts view's link, in costs.several_hosts.links() (10 GbE)
        self.sort_key = "decode"
        self._curves: tuple = (None, {})  # (inputs, {view: Curve}) of the last drawing
        self.race_clock = time.monotonic  # seconds; replaced by tests
        self._race_start = 0.0
        self._race_timer = None
        self._race_lanes: list = []  # engine.race.Lane, fastest first
        self.race_rates: list[float] = []  # the rates typed in the race's field (t), tokens/s
        self.quant_index = 0  # the held-vs-read view's quantization: 0 as stored, then costs.held_read.TYPES
        self.diffusion_steps: int | None = None  # the diffusion view's steps; None: one per answer token

    def compose_body(self) -> ComposeResult:
        yield Static(id="costs-head")
        with VerticalScroll(id="costs-box"):
            yield Static(id="costs-measured")
            yield Static(id="costs-table")
            yield Static(id="costs-memory")  # under the table: at 80x24 the table's first rows stay in view
            yield Static(id="costs-curves")
        yield CurvePlot(id="costs-plot")
        with VerticalScroll(id="costs-machines-box"):
            yield Static(id="costs-machines")
        with VerticalScroll(id="costs-race-box"):
            yield Static(id="costs-race")
            yield Input(placeholder="your rates in tokens/s, e.g. 3 12 60, then enter (t)", id="costs-rates")
        with VerticalScroll(id="costs-hosts-box"):
            yield Static(id="costs-hosts")
        with VerticalScroll(id="costs-held-box"):
            yield Static(id="costs-held")
        with VerticalScroll(id="costs-diffusion-box"):
            yield Static(id="costs-diffusion")

    def refresh_view(self) -> None:
        state = self.state
        head = self.query_one("#costs-head", Static)
        if state.card is None:
            return
        from walkthrough.costs.estimate import rows
        from walkthrough.costs.machines import machine_rows, sort_rows
        from walkthrough.costs.measured import modelled_for
        from walkthrough.costs.race import lanes
        from walkthrough.costs.request_size import estimate_for

        size = self.request_size()
        try:
            profiles = state.profiles()
            result = estimate_for(state.card, state.profile, size)
        except WalkthroughError as exc:  # a broken user hardware file is shown, not raised
            head.update(Text.assemble(("No hardware profiles: ", "bold"), safe_text(str(exc))))
            return
        profile = result.hardware
        n = len(profiles)
        head.update(Group(
            Text.assemble(("machine ", "bold"), safe_text(profile.name),
                          (f"  ({state.profile_index % n + 1}/{n}, h)", "dim")),
            Text(f"{fmt(profile.memory_bytes, 'B')} {profile.memory_kind}, {fmt(profile.bandwidth, 'B/s')}, "
                 f"{profile.compute_tflops:g} TFLOPS useful compute"),
            Text.assemble(("request: " if self.size_knobs is None else "knobs (r resets): ", "bold"),
                          size.describe(), self._media_note(), (" (1 GB = 1e9 bytes)", "dim")),
        ))
        self._show_view()
        if self.view == "race":
            listed = sort_rows(machine_rows(state.card, profiles, size), "decode")
            self._race_lanes = lanes(listed, state.measured())
            self._draw_race()
            return
        if self.view == "hosts":
            from walkthrough.costs.several_hosts import links, several
            from walkthrough.screens.hosts_view import hosts_view

            known = links()
            h = several(state.card, state.profile, profiles, known[self.link_index % len(known)], self.hosts, size)
            self.query_one("#costs-hosts", Static).update(hosts_view(h))
            return
        if self.view == "held":
            self._draw_held(profile)
            return
        if self.view == "diffusion":
            from walkthrough.costs.diffusion import compare
            from walkthrough.render.diffusion_view import diffusion_view

            steps = self.diffusion_steps or size.output_tokens
            c = compare(state.card, profile, size.prompt_tokens, size.output_tokens, steps, cache_type=size.cache_type)
            self.diffusion_steps = c.steps
            keys = Text("] / [ double / halve the steps, l and o the prompt and answer, d back to the table.",
                        style="dim")
            self.query_one("#costs-diffusion", Static).update(
                Group(diffusion_view(c, state.card.architecture, profile.name), keys))
            return
        if self.view == "machines":
            listed = sort_rows(machine_rows(state.card, profiles, size), self.sort_key)
            self.query_one("#costs-machines", Static).update(machines_table(listed, self.sort_key))
            return
        curves = self._curves_for(state.card, state.profile, size)
        if self.view != "table":
            plot = self.query_one("#costs-plot", CurvePlot)
            plot.show(curves[self.view])
            return
        from walkthrough.costs.memory_bar import memory_bar
        from walkthrough.render.memory_bar_view import memory_bar_view

        bar = self.query_one("#costs-memory", Static)
        bar.update(memory_bar_view(memory_bar(result.memory, profile), (bar.size.width or self.size.width - 4) - 1,
                                   f" ({profile.id})"))
        self.query_one("#costs-measured", Static).update(Group(self._measured(), self._comparison(result)))
        table = Table(box=None, padding=(0, 1), show_edge=False)
        table.add_column("")
        table.add_column(modelled_for(profile), justify="right", no_wrap=True)
        table.add_column("why", style="dim")
        for label, value, why in rows(result):
            table.add_row(Text(label), Text(value), Text(why))
        self.query_one("#costs-table", Static).update(table)
        self.query_one("#costs-curves", Static).update(Group(*(curve_table(c) for c in curves.values())))

    def _media_note(self) -> str:
        """What the prompt's images or video add (--mmproj), for the request line; "" without them."""
        if self.size_knobs is not None:
            return ""
        try:
            media = self.state.media_tokens()
        except WalkthroughError:
            return ""
        return "" if media is None else f"; the prompt holds {media.tokens:,} tokens of {media.media.describe()}"

    def request_size(self):
        """The knobs' request, or the request on screen (its prompt and answer budget)."""
        if self.size_knobs is not None:
            return self.size_knobs
        from walkthrough.costs.request_size import RequestSize

        return RequestSize(None, self.state.prompt_with_media(), self.state.max_new_tokens)

    def _curves_for(self, card, hw, size) -> dict:
        """The three curves for this file, machine and request size (kept until one of them changes)."""
        from walkthrough.costs.curves import (
            contexts,
            decode_curve,
            kv_curve,
            ttft_curve,
            users_curve,
        )

        key = (id(card), hw.id, size)
        if self._curves[0] != key:
            xs = contexts(max(card.context_length or 0, size.context, MIN_CURVE_END))
            prompts = contexts(max(size.prompt_tokens, MIN_CURVE_END))
            self._curves = (key, {"kv": kv_curve(card, hw, xs), "ttft": ttft_curve(card, hw, prompts, size.cache_type),
                                  "decode": decode_curve(card, hw, xs, size.cache_type),
                                  "users": users_curve(card, hw, size.context, size.cache_type)})
        return self._curves[1]

    def _show_view(self) -> None:
        self.query_one("#costs-box").display = self.view == "table"
        self.query_one("#costs-plot").display = self.view in self.VIEWS[1:]
        self.query_one("#costs-machines-box").display = self.view == "machines"
        self.query_one("#costs-race-box").display = self.view == "race"
        self.query_one("#costs-hosts-box").display = self.view == "hosts"
        self.query_one("#costs-held-box").display = self.view == "held"
        self.query_one("#costs-diffusion-box").display = self.view == "diffusion"

    def _draw_held(self, profile) -> None:
        """This file and the one beside it (--beside, or the tiny model): held and read at the view's type."""
        from walkthrough.costs.held_read import at_index, largest_held
        from walkthrough.render.held_read_view import held_read_view

        state = self.state
        files = [(state.card.name or state.path.name, state.card, list(state.file.tensors.values()))]
        note = Text("e: back to the table; b / B: the next / previous type; --beside MODEL: another file",
                    style="dim")
        try:
            other = state.beside_card()
        except WalkthroughError as exc:
            other, note = None, Text.assemble(("--beside: ", "bold"), safe_text(str(exc)))
        if other is not None:
            files.append(other)
        box = self.query_one("#costs-held", Static)
        rows = [at_index(card, tensors, name, self.quant_index) for name, card, tensors in files]
        width = (box.size.width or self.size.width - 4) - 1
        box.update(Group(Text("bytes held and read per token, by quantization", style="bold"),
                         held_read_view(rows, profile.memory_bytes, profile.id, width, largest_held(files)), note))

    def _measured(self) -> Text:
        state = self.state
        decode = state.decode_steps
        if not decode:
            return Text(f"measured: decode a token (stage {stages.number('decode')}) to compare with the engine's "
                        "own count", style="dim")
        last = decode[-1]
        return Text.assemble((f"counted by the {last.engine} engine: ", "bold"),
                             f"the last decoded token read {fmt(last.bytes_read.get('total', 0), 'B')} "
                             f"({last.bytes_read.get('total', 0):,} bytes) at {count(last.kv_len, 'position')}")

    def _comparison(self, result) -> Text | Table:
        """Modelled (this profile) beside measured (this machine, this run), once the run has a first token."""
        from walkthrough.costs.measured import compare, comparison_title

        measured = self.state.measured()
        if measured is None:
            return Text(f"measured here: run the request (stages {stages.number('prefill')} and "
                        f"{stages.number('decode')}) to compare speeds", style="dim")
        table = Table(box=None, padding=(0, 1), show_edge=False,
                      title=comparison_title(result.hardware, measured), title_justify="left")
        table.add_column("", no_wrap=True)
        for name in ("ceiling", "realistic", "measured"):  # the measured bandwidth's share wraps at 80 columns
            table.add_column(name, justify="right", no_wrap=name != "measured")
        for row in compare(result, measured):
            table.add_row(row.label, row.ceiling, row.realistic, row.measured)
        return table

    def action_next_profile(self, delta: int) -> None:
        self.state.profile_index += delta

    GREYED_HINTS: ClassVar[dict[str, str]] = {
        "sort": "it sorts the all-machines view: press m first", "rates": "it types rates for the race: press w first",
        "bits": "it works in the held-versus-read view: press e first",
        "host_count": "it works in the several-hosts view: press x first",
        "next_link": "it works in the several-hosts view: press x first",
        "steps": "it works in the diffusion view: press d first"}

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "sort":
            return True if self.view == "machines" else None
        if action == "reset":
            return True if self.size_knobs is not None else None
        if action == "rates":
            return True if self.view == "race" else None
        if action in ("host_count", "next_link"):
            return True if self.view == "hosts" else None
        if action == "bits":
            return True if self.view == "held" else None
        if action == "steps":
            return True if self.view == "diffusion" else None
        return super().check_action(action, parameters)

    def action_next_view(self) -> None:
        self._stop_race()
        i = self.VIEWS.index(self.view) if self.view in self.VIEWS else -1
        self.view = self.VIEWS[(i + 1) % len(self.VIEWS)]
        self._changed()

    def action_machines(self) -> None:
        self._stop_race()
        self.view = "table" if self.view == "machines" else "machines"
        self._changed()

    def action_hosts(self) -> None:
        self._stop_race()
        self.view = "table" if self.view == "hosts" else "hosts"
        self._changed()

    def action_held(self) -> None:
        self._stop_race()
        self.view = "table" if self.view == "held" else "held"
        self._changed()

    def action_bits(self, delta: int) -> None:
        self.quant_index += delta
        self._changed()

    def action_diffusion(self) -> None:
        self._stop_race()
        self.view = "table" if self.view == "diffusion" else "diffusion"
        self._changed()

    def action_steps(self, factor: float) -> None:
        if self.diffusion_steps is not None:
            self.diffusion_steps = max(1, round(self.diffusion_steps * factor))
        self._changed()

    def action_host_count(self, delta: int) -> None:
        from walkthrough.costs.several_hosts import MAX_HOSTS

        self.hosts = min(max(self.hosts + delta, 1), MAX_HOSTS)
        self._changed()

    def action_next_link(self) -> None:
        self.link_index += 1
        self._changed()

    def action_race(self) -> None:
        """Start the race (again), or leave it."""
        if self.view == "race":
            self.view = "table"
            self._stop_race()
        else:
            self.view = "race"
            self._race_start = self.race_clock()
            self._race_timer = self.set_interval(RACE_TICK, self._draw_race)
        self._changed()

    def action_rates(self) -> None:
        """Type rates to race (the field under the race)."""
        self.query_one("#costs-rates", Input).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        from walkthrough.costs.race_rates import parse_rates

        try:
            self.race_rates = parse_rates(event.value)
        except WalkthroughError as exc:  # what was typed stays in the field, to be corrected
            self.notify(str(exc), title="Rates", severity="error", markup=False)
            return
        self.query_one("#costs-race-box").focus()
        self._race_start = self.race_clock()  # the race starts again with the new lanes
        self._draw_race()

    def _stop_race(self) -> None:
        if self._race_timer is not None:
            self._race_timer.stop()
            self._race_timer = None

    def on_screen_suspend(self) -> None:
        self._stop_race()
        if self.view == "race":
            self.view = "table"

    def _draw_race(self) -> None:
        """The answer so far in every lane, at the clock's time since the race started."""
        state = self.state
        answer = [state.piece(t) for t in state.answer_ids()]
        t = self.race_clock() - self._race_start
        box = self.query_one("#costs-race", Static)
        if not answer:
            box.update(Text(f"race: run the request (stage {stages.number('decode')}) to replay its answer at each machine's speed",
                            style="dim"))
            return
        from walkthrough.costs.race_rates import typed_lanes
        from walkthrough.render.race_view import reading_line

        text = "".join(answer)
        runners = self._race_lanes + typed_lanes(self.race_rates, text, len(answer))
        width = box.size.width or self.size.width
        box.update(Group(race_lines(runners, answer, t, width), reading_line(text, len(answer))))

    def action_sort(self) -> None:
        from walkthrough.costs.machines import SORT_KEYS

        self.sort_key = SORT_KEYS[(SORT_KEYS.index(self.sort_key) + 1) % len(SORT_KEYS)]
        self._changed()

    def action_knob(self, knob: str, factor: float) -> None:
        self.size_knobs = self.request_size().scaled(knob, factor)
        self._changed()

    def action_cache_type(self) -> None:
        self.size_knobs = self.request_size().next_cache_type()
        self._changed()

    def action_reset(self) -> None:
        self.size_knobs = None
        self._changed()

    def _changed(self) -> None:
        """Redraw this stage (the knobs and views are this screen's own, not the request's)."""
        self.redraw()
        self.refresh_bindings()
