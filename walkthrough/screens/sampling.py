"""The Sampling stage: the last pass's candidates through each stage of the sampler, with keys to turn the knobs.

The engine keeps every stage of a sampling decision (raw logits, top-k, top-p,
min-p, temperature, final probabilities, the draw). Turning a knob re-runs the
stages on the same logits (`SampleResult.resample`), so the table shows how the
distribution changes; the new knobs also apply to the passes still to run.
"""

from __future__ import annotations

from typing import ClassVar

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import Static

from walkthrough.screens.stepping import SteppingScreen
from walkthrough.textsafe import token_label

# The values the keys step through (lower case: down, upper case: up).
TEMPERATURES = (0.0, 0.1, 0.2, 0.3, 0.5, 0.7, 0.8, 1.0, 1.2, 1.5, 2.0, 3.0)
TOP_KS = (1, 2, 5, 10, 20, 40, 100, 0)  # 0: keep all
TOP_PS = (0.1, 0.3, 0.5, 0.7, 0.8, 0.9, 0.95, 0.99, 1.0)
MIN_PS = (0.0, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5)
CANDIDATES_SHOWN = 10
KNOBS = Binding.Group("Knobs", compact=True)  # one footer entry for the knob and seed keys


def _step_value(values: tuple, current: float, delta: int):
    """The next value up or down from `current` in `values` (the nearest one first if current is off the list)."""
    index = min(range(len(values)), key=lambda i: abs(values[i] - current))
    return values[min(max(index + delta, 0), len(values) - 1)]


class SamplingScreen(SteppingScreen):
    """From logits to the chosen token."""

    HEADING = "sampling"
    CAPTION = ("Sampling: the scores for the next token become probabilities, and a "
               "seeded draw picks one.")
    HELP = """
The last pass ends with one score (logit) per vocabulary token. The sampler
turns them into a choice, in llama.cpp's order: top-k keeps the k best, top-p
keeps the shortest run of best tokens whose probabilities reach p, min-p drops
tokens less likely than min-p times the best one, temperature sharpens (below 1)
or flattens (above 1) what is left, and a seeded random draw picks one.
Temperature 0 is greedy: always the best token.

Keys: t / T temperature down / up, k / K top-k, o / O top-p, m / M min-p, s a new
seed. The table re-runs the stages on the same logits and the same draw, so you
see what each knob does; the passes still to run use the new knobs too.
Columns: p(T=1) is the plain softmax of the logits; p(T) the softmax at the
temperature over the whole vocabulary; the marks say which stages kept the
token; final is the probability the draw used.
"""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("t", "knob('temperature', -1)", "Temperature down", group=KNOBS),
        Binding("T", "knob('temperature', 1)", "Temperature up", group=KNOBS),
        Binding("k", "knob('top_k', -1)", "Top-k down", group=KNOBS),
        Binding("K", "knob('top_k', 1)", "Top-k up", group=KNOBS),
        Binding("o", "knob('top_p', -1)", "Top-p down", group=KNOBS),
        Binding("O", "knob('top_p', 1)", "Top-p up", group=KNOBS),
        Binding("m", "knob('min_p', -1)", "Min-p down", group=KNOBS),
        Binding("M", "knob('min_p', 1)", "Min-p up", group=KNOBS),
        Binding("s", "new_seed", "New seed", group=KNOBS),
    ]
    _KNOBS: ClassVar[dict[str, tuple]] = {
        "temperature": TEMPERATURES, "top_k": TOP_KS, "top_p": TOP_PS, "min_p": MIN_PS,
    }

    def __init__(self) -> None:
        super().__init__()
        self._autoplay_moves = ["T", "T", "T", "k", "t", "t", "t", "K"]

    def compose_main(self) -> ComposeResult:
        yield Static(id="sampling-knobs")
        yield Static(id="sampling-table")

    def refresh_view(self) -> None:
        state = self.state
        knobs = self.query_one("#sampling-knobs", Static)
        if state.settings is None:
            knobs.update(Text(state.run_blocker() or "waiting for the engine"))
            return
        s = state.settings
        top_k = "all" if s.top_k <= 0 else str(s.top_k)
        knobs.update(Text.assemble(
            ("temperature ", "bold"), f"{s.temperature:g}", (" t/T", "dim"),
            ("  top-k ", "bold"), top_k, (" k/K", "dim"),
            ("  top-p ", "bold"), f"{s.top_p:g}", (" o/O", "dim"),
            ("  min-p ", "bold"), f"{s.min_p:g}", (" m/M", "dim"),
            ("  seed ", "bold"), str(s.seed), (" s", "dim"), ("  greedy" if s.greedy else "", "italic"),
        ))
        step = next((st for st in reversed(state.steps) if st.sample is not None), None)
        result = state.preview_sample(step)
        table_view = self.query_one("#sampling-table", Static)
        if result is None:
            table_view.update(Text("No token sampled yet: run prefill to its end (space, or enter to play)."))
            return
        table_view.update(self._table(step, result))

    def _table(self, step, result) -> Group:
        state = self.state
        order = result.best(CANDIDATES_SHOWN)
        plain = result.resample(result.settings.with_(temperature=1.0)).probs_at_temperature()
        at_t = result.probs_at_temperature()
        final = dict(zip(result.candidates.tolist(), result.probs.tolist()))
        kept = [set(result.after_top_k.tolist()), set(result.after_top_p.tolist()), set(result.after_min_p.tolist())]
        table = Table(box=None, padding=(0, 1), show_edge=False)
        for name, justify in (("", "left"), ("token", "left"), ("logit", "right"), ("p(T=1)", "right"),
                              ("p(T)", "right"), ("k", "center"), ("p", "center"), ("min", "center"),
                              ("final", "right")):
            table.add_column(name, justify=justify)
        for token_id in order.tolist():
            marks = ["✓" if token_id in stage else "·" for stage in kept]
            chosen = token_id == result.chosen
            table.add_row(
                "▶" if chosen else "",
                token_label(state.piece(token_id), "bold" if chosen else ""),
                f"{result.logits[token_id]:.2f}",
                f"{plain[token_id]:.3f}",
                f"{at_t[token_id]:.3f}",
                *marks,
                f"{final[token_id]:.3f}" if token_id in final else "",
            )
        verdict = Text.assemble(
            ("kept: ", "bold"), f"top-k {len(result.after_top_k)}, top-p {len(result.after_top_p)}, ",
            f"min-p {len(result.after_min_p)} of {len(result.logits)}",
        )
        if result.settings.greedy:  # the sampler draws u all the same (to keep the seed's sequence); it is unused
            verdict.append("  greedy: no draw", style="bold")
            choice = Text.assemble(("temperature 0 takes the most likely token: ", "bold"),
                                   token_label(state.piece(result.chosen)))
        else:
            verdict.append_text(Text.assemble(("  draw u=", "bold"), f"{result.u:.3f}"))
            choice = Text.assemble(("greedy would pick ", "bold"), token_label(state.piece(int(order[0]))),
                                   ("; this draw picks ", "bold"), token_label(state.piece(result.chosen)))
        where = Text(f"after the pass at positions {step.start}-{step.end - 1} ({step.phase})", style="dim")
        lines = [where, verdict, choice]
        if result is not step.sample:  # a what-if: the knobs moved since this token was drawn
            lines.append(Text(f"what-if under the knobs above; the token was drawn with "
                              f"{step.sample.settings.describe()}", style="italic"))
        return Group(*lines, table)

    def action_knob(self, name: str, delta: int) -> None:
        state = self.state
        if state.settings is None:
            return
        value = _step_value(self._KNOBS[name], getattr(state.settings, name), delta)
        self.app.set_settings(state.settings.with_(**{name: value}))

    def action_new_seed(self) -> None:
        state = self.state
        if state.settings is not None:
            self.app.set_settings(state.settings.with_(seed=state.settings.seed + 1))

    def autoplay_step(self) -> bool:
        if self.step_until(self.state.prefill_done):
            return True
        if self._autoplay_moves and self.state.settings is not None:
            key = self._autoplay_moves.pop(0)
            name = {"t": "temperature", "k": "top_k"}[key.lower()]
            self.action_knob(name, 1 if key.isupper() else -1)
            return True
        return False
