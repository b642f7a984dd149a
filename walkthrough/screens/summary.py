"""The Summary stage: the request's trace, stage by stage, with the figures this run measured."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from walkthrough.errors import WalkthroughError
from walkthrough.render.format import answer_ending, human_bytes, human_count
from walkthrough.request import stages
from walkthrough.screens.base import StageScreen
from walkthrough.textsafe import safe_text
from walkthrough.units import fmt
from walkthrough.words import count

if TYPE_CHECKING:
    from walkthrough.costs.fitted import Band


class SummaryScreen(StageScreen):
    """One table: what each stage did to this request."""

    HEADING = "summary"
    CAPTION = ("Summary: the whole request, from the file on disk to the last token, "
               "and what each stage cost.")
    HELP = """
The whole request in one table: the file, the chat, the tokens, the prefill
passes, the decoded tokens, the sampler, and the reply. Every figure is from
the file or from the passes this run actually made (wall times are this
machine's, on the engine that ran the passes, labelled "measured here"; the
costs row is the roofline modelled for the chosen machine, labelled "modelled
for", not this run). Surprisal is how unexpected
each token was to the model (-log p, in nats): its mean is the loss, and
e^loss the perplexity, over the request and over the reply. Go back to any stage with
its number key; r on a stepping stage restarts the request.
"""

    def compose_body(self) -> ComposeResult:
        with VerticalScroll(id="summary-box"):
            yield Static(id="summary-table")
            yield Static(id="summary-reply")

    def refresh_view(self) -> None:
        state = self.state
        if state.card is None:
            return
        card, f = state.card, state.file
        table = Table(box=None, padding=(0, 1), show_edge=False)
        table.add_column("stage", style="bold", no_wrap=True)
        table.add_column("what happened")
        row = stages.label  # "5 Decode": each row names its stage by the stage list's number
        table.add_row(row("file"), Text.assemble(
            safe_text(f.path.name), ": ", safe_text(card.architecture), f", {human_bytes(f.file_size)}, ",
            f"{human_count(card.n_params)} parameters ({human_count(card.n_params_active)} active), ",
            f"{card.bits_per_weight:.2f} bits per weight"))
        chat = state.chat
        if chat is not None:
            n = len(state.messages)
            table.add_row(row("template"), f"{count(n, 'message')} rendered to {count(len(chat.text), 'character')}")
            counts = chat.counts()
            per = f" ({counts.chars_per_token:.2f} characters per token)" if counts.tokens else ""
            table.add_row(row("tokens"), f"{count(counts.tokens, 'token')}{per}")
        else:
            reason = state.unavailable.get("tokens") or state.unavailable.get("template") or "not ready"
            table.add_row(f"{row('template')}, {row('tokens')}", safe_text(reason))
        prefill, decode = state.prefill_steps, state.decode_steps
        if prefill:
            table.add_row(row("prefill"), self._passes(prefill, "prompt token"))
        if decode:
            table.add_row(row("decode"), self._passes(decode, "token"))
        from walkthrough.costs.measured import first_use_line

        once = first_use_line([*prefill, *decode])
        if once is not None:  # one-time work, apart from the prefill and decode times above
            table.add_row("first use", once.removeprefix("first use: "))
        if "speculate" in stages.ids():  # a build without the stage has no row for it
            table.add_row(row("speculate"), self._speculation())
        sampling = self._sampling()
        if sampling:
            table.add_row(row("sampling"), sampling)
        costs = self._costs()
        if costs is not None:
            table.add_row(row("costs"), costs)
        if state.steps:
            table.add_row("surprisal", self._surprisal(state.steps))
            last = state.steps[-1]
            table.add_row("KV cache", f"{count(last.kv_len, 'position')}, {human_bytes(last.kv_bytes)}")
            table.add_row("read in all", human_bytes(state.cumulative_bytes().get("total", 0)))
        if not state.steps:
            blocker = state.run_blocker()
            first = stages.number("prefill")
            table.add_row("run", safe_text(blocker) if blocker else Text(f"not run yet: press {first} then enter"))
        self.query_one("#summary-table", Static).update(table)
        reply = state.tokenizer.decode(state.answer_ids()) if state.tokenizer and state.steps else ""
        ending = answer_ending(state)
        end = f" ({ending})" if ending else ""
        self.query_one("#summary-reply", Static).update(
            Group(Text(f"\nthe reply{end}", style="bold"), safe_text(reply, keep_newlines=True)) if reply else ""
        )

    def _speculation(self) -> Text:
        """The Speculate stage's run (its own request, drafted and verified), or how to start one."""
        from walkthrough.render.speculate_view import summary_text

        spec = self.state.speculation
        if not spec.rounds:
            return Text(f"not run: press {stages.number('speculate')} to decode the request with drafts "
                        "verified in one pass", style="dim")
        return Text(summary_text(spec.rounds, spec.drafter, spec.k, spec.finished))

    def _costs(self) -> Text | None:
        """The Costs stage's headline for the chosen machine: time to first token and decode speed."""

        try:
            e = self.state.estimate()
        except WalkthroughError:
            return None
        from walkthrough.costs.measured import modelled_for

        text = Text(f"{modelled_for(e.hardware)}: ")
        if not e.fits:
            return text.append(f"does not fit ({e.memory.verdict})")
        return text.append(f"first token after {fmt(e.prefill.seconds.value, 's')}{_band(e.prefill.band)}, "
                           f"decode {fmt(e.decode.tokens_per_s.value, 'tokens/s')}{_band(e.decode.band)}")

    def _sampling(self) -> str:
        """The knobs each answer token was drawn with (kept with the token), then the knobs now if they differ."""
        from walkthrough.engine.steps import drawn_with

        runs = drawn_with(self.state.steps)
        now = self.state.settings
        if not runs:
            return "" if now is None else f"no token drawn yet; knobs now: {now.describe()}"
        if len(runs) == 1:
            parts = [f"every token drawn with {runs[0].settings.describe()}"]
        else:
            parts = [f"{_tokens(r.first, r.last)}: {r.settings.describe()}" for r in runs]
        if now is not None and now != runs[-1].settings:
            parts.append(f"knobs now (for the tokens still to draw): {now.describe()}")
        return "; ".join(parts)

    @staticmethod
    def _surprisal(steps) -> str:
        """Loss and perplexity of the request and of the answer so far (the engine's `run_summary`)."""
        from walkthrough.engine.surprisal import run_summary

        parts = []
        for name, s in run_summary(steps).items():
            if s["tokens"]:
                parts.append(f"{name}: {s['loss']:.3f} nats per token, perplexity {s['perplexity']:.3f} "
                             f"({count(s['tokens'], 'token')})")
        return "; ".join(parts) or "no token measured yet"

    @staticmethod
    def _passes(steps, unit: str) -> str:
        from walkthrough.costs.measured import measured_here
        from walkthrough.engine.steps import totals

        t = totals(steps)
        return (f"{count(t.passes, 'pass', 'passes')}, {count(t.tokens, unit)}, "
                f"{human_bytes(t.bytes_read.get('total', 0))} read ({human_bytes(t.bytes_per_pass)} per pass), "
                f"{fmt(t.flops, 'FLOP')} computed, {t.seconds:.2f} s {measured_here(steps[0].engine)}")


def _tokens(first: int, last: int) -> str:
    """ "token 3" or "tokens 1-40" (answer tokens, 1-based)."""
    return f"token {first}" if first == last else f"tokens {first}-{last}"


def _band(band: Band | None) -> str:
    """' ±24%' after a modelled figure, or ' (no band: Costs says why)'."""
    if band is None or band.fraction is None:
        return " (no band: Costs says why)"
    return f" ±{band.fraction * 100:.0f}%"
