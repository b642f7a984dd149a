"""The Speculate stage: the same request decoded by drafting k tokens and checking them in one pass.

The stage shows a speculative run of the request (`walkthrough.engine.serving.speculative`)
on its model, prompt and sampler settings, one round per key press: a drafter
proposes up to k tokens, one verification pass over the pending token and the
drafts keeps the longest prefix the model agrees with plus the model's own
next token. The answer is the one Decode writes (same seed, same settings);
what changes is how many passes it takes and what they read.

The run is the app's (`app_speculate.py`): the keys here ask for a round, a
play or a restart, a round runs as a job of the run service, and its Step is
kept in `state.speculation`, which this screen draws. Drawing starts nothing:
the app starts the run again when the request, its model or its knobs change.
Leaving the stage stops the round in flight (within a layer); the next round
computes it again.
"""

from __future__ import annotations

from typing import ClassVar

from rich.console import Group
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.widgets import Static

from walkthrough.render.experts_view import ExpertsGrid
from walkthrough.render.ngram_view import round_ngrams
from walkthrough.render.speculate_view import figures, rounds_table
from walkthrough.request.state import Speculation
from walkthrough.screens.base import StageScreen
from walkthrough.screens.confirm import speculate_question
from walkthrough.textsafe import safe_text
from walkthrough.words import count

# the kinds the stage cycles through ("draft" with the app's --draft)
DRAFTERS = ("lookup", "mtp", "draft")
MAX_DRAFTS = 8
ROUNDS_SHOWN = 8


class SpeculateScreen(StageScreen):
    """Rounds of drafts, accepted and rejected, and what speculation saves (or costs) on this
    model."""

    HEADING = "speculative decoding"
    CAPTION = ("Speculative decoding: cheap guesses are checked in one pass, so one "
               "read of the weights can give several tokens.")
    HELP = """
Decoding reads every weight it uses to write one token. Speculative decoding
guesses several tokens cheaply and checks them all in one pass, so one read of
the weights can write several tokens.

Each round, the drafter proposes up to k tokens: prompt lookup copies what
followed the latest earlier occurrence of the last few tokens (no weights
read); MTP runs the file's multi-token-prediction block, where it has one; a
draft model (walkthrough --draft MODEL) decodes greedily on its own. One
pass then runs the model over the pending token and the drafts. Row i of that
pass is the model's own next-token distribution after draft i: the sampler
draws from it with the same random number plain decoding would use, and the
draft is accepted when the draws agree. The first disagreement ends the round
(rejected drafts are struck through); the model's own token is kept instead.
So the answer is exactly Decode's, in fewer passes when the drafts are right.

alpha is the share of drafts accepted; at a given alpha a round of k drafts
writes (1 - alpha^(k+1)) / (1 - alpha) tokens on average, shown beside the
measured figure. For a mixture of experts the k + 1 tokens of a pass wake the
union of their experts, so a verification pass reads more than one decode
pass: the reason speculation pays less on MoE models.

With prompt lookup, the table under the rounds is the last round's search:
for n from 4 down to 1, the context's last n tokens and where they occurred
before (in the prompt or the answer); the longest n seen before wins, and its
latest occurrence is the match, the tokens after it the drafts.

space runs a round, enter plays, r restarts, + and - change k, d the drafter.
"""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("space", "round", "Round", id="speculate.round"),
        Binding("enter", "play", "Play", id="speculate.play"),
        Binding("r", "restart", "Restart", id="speculate.restart"),
        Binding("plus,equals_sign", "drafts(1)", "k+", id="speculate.more"),
        Binding("minus", "drafts(-1)", "k-", id="speculate.fewer"),
        Binding("d", "drafter", "Drafter", id="speculate.drafter"),
    ]

    def compose_body(self) -> ComposeResult:
        with VerticalScroll(id="speculate-main"):
            yield Static(id="speculate-head")
            yield Static(id="speculate-rounds")
            yield Static(id="speculate-ngrams")
            yield Static(id="speculate-figures")
            yield Static(id="speculate-answer")

    @property
    def speculation(self) -> Speculation:
        """The stage's run, as the app keeps it (`RequestState.speculation`)."""
        return self.state.speculation

    def on_screen_suspend(self) -> None:
        # left the stage (an overlay on top of it stops nothing)
        if self.app.current_mode != self.STAGE:
            self.app.stop_round()

    def action_round(self) -> None:
        if self.speculation.playing:
            self.app.play_rounds()  # stop playing after the round in flight
        self.app.speculate_round()

    def action_play(self) -> None:
        self.app.play_rounds()

    def action_restart(self) -> None:
        self._discard_then()

    def action_drafts(self, delta: int) -> None:
        k = min(MAX_DRAFTS, max(1, self.speculation.k + delta))
        if k != self.speculation.k:
            self._discard_then(k=k)

    def drafter_kinds(self) -> list[str]:
        """The drafters this file and these options offer: the MTP block only if the file has one, a draft
        model only with --draft."""
        state = self.state
        has_mtp = bool(state.card is not None and state.card.n_mtp_layers)
        return [kind for kind in DRAFTERS
                if (kind != "draft" or state.draft is not None) and (kind != "mtp" or has_mtp)]

    def action_drafter(self) -> None:
        kinds = self.drafter_kinds()
        current = self.speculation.drafter
        if kinds == [current]:
            self.notify("This file has no MTP block and no --draft model was given: prompt lookup is the only "
                        "drafter.", title="Drafter", markup=False)
            return
        later = kinds[(kinds.index(current) + 1) % len(kinds)] if current in kinds else kinds[0]
        self._discard_then(drafter=later)

    def _discard_then(self, *, drafter: str | None = None, k: int | None = None) -> None:
        """Start the speculative run again (with this drafter and k), once the user agreed to lose
        what it wrote (asked only when it wrote something or a round runs)."""
        s = self.speculation
        question = speculate_question(len(s.answer()), len(s.rounds), s.busy)
        self.app.ask_then(question, lambda: self.app.restart_speculation(drafter=drafter, k=k))

    def autoplay_step(self) -> bool:
        """An autoplay tick: one round until the answer is done."""
        s = self.speculation
        if s.finished or s.error or not self.state.can_run:
            return False
        self.app.speculate_round()
        return True

    # ---- drawing ---------------------------------------------------------------------------
    def _ngrams(self) -> Group | str:
        """Prompt lookup's search for the last round."""
        s = self.speculation
        if s.drafter != "lookup" or not s.rounds:
            return ""
        return round_ngrams(self.state.prompt_ids, s.answer(), s.rounds[-1], self.state.piece)

    def refresh_view(self) -> None:
        state = self.state
        head = self.query_one("#speculate-head", Static)
        blocker = state.run_blocker()
        if blocker:
            head.update(Text.assemble(("Cannot run the request: ", "bold"), safe_text(blocker)))
            return
        s = self.speculation
        line = Text.assemble(("drafter ", "bold"), s.drafter, ("  k ", "bold"), str(s.k),
                             ("  (d drafter, + - k, space round, enter play, r restart)", "dim"))
        if s.error:
            line.append("\n")
            line.append_text(safe_text(s.error, "bold"))
        elif s.prefill is None and s.busy:
            line.append(f"\nPrefilling the prompt ({count(len(state.prompt_ids), 'token')}): the "
                        "stage bar says the layer.")
        elif s.prefill is None:
            line.append("\nPress space: the prompt is prefilled, then each press runs one round.")
        head.update(line)
        rounds = self.query_one("#speculate-rounds", Static)
        figures_view = self.query_one("#speculate-figures", Static)
        self.query_one("#speculate-ngrams", Static).update(self._ngrams())
        if not s.rounds:
            rounds.update("")
            figures_view.update("")
        else:
            rounds.update(Group(Text("rounds (\u2713 accepted, \u2717 rejected)", style="bold"),
                                rounds_table(list(s.rounds), state.piece, ROUNDS_SHOWN)))
            parts = [figures(list(s.rounds), state.card)]
            if state.card.is_moe:
                grid = ExpertsGrid(s.rounds[-1], state.card.n_experts, last_token_only=False)
                woken = Text("experts woken by the last verification pass", style="bold")
                parts.append(Group(woken, grid))
            figures_view.update(Group(*parts))
        answer = s.answer()
        text = state.tokenizer.decode(answer) if state.tokenizer and answer else ""
        ending = " (done)" if s.finished else ""
        self.query_one("#speculate-answer", Static).update(
            Group(Text(f"the answer so far: {count(len(answer), 'token')}{ending}", style="bold"),
                  safe_text(text, keep_newlines=True)))
