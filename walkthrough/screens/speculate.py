"""The Speculate stage: the same request decoded by drafting k tokens and checking them in one pass.

The stage runs a speculative run of its own (`walkthrough.engine.speculative`)
on the request's model, prompt and sampler settings, one round per key press:
a drafter proposes up to k tokens, one verification pass over the pending
token and the drafts keeps the longest prefix the model agrees with plus the
model's own next token. The answer is the one Decode writes (same seed, same
settings); what changes is how many passes it takes and what they read.

A round runs in a worker thread (`RoundRunner.next` under a lock); its Step
travels back in a `RoundDone` message and is kept by the screen on the UI
thread. Changing k or the drafter restarts this stage's run.

Stopping a round: restarting the stage's run (r, k, the drafter, a changed
request), leaving the stage and quitting cancel the round in flight, which
stops at its next layer (the engine's `Cancelled`, checked at every layer of
the drafter's, the verification's and a replay's passes) and posts nothing.
A round cut off that way leaves its session mid-round, so the runner drops it;
the next round builds the run again and computes the steps the screen already
holds before the new one (same seed, same steps). The screen says how many it
holds, so a step computed but dropped (its worker cancelled just after) is
computed again, not skipped.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from rich.console import Group
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.widgets import Static
from textual.worker import get_current_worker

from walkthrough.engine.drafters import DEFAULT_DRAFT_MAX
from walkthrough.engine.session import Cancelled, Progress, stop_when
from walkthrough.errors import WalkthroughError
from walkthrough.screens.base import StageScreen
from walkthrough.screens.experts_view import ExpertsGrid
from walkthrough.screens.messages import FromWorker
from walkthrough.screens.speculate_view import figures, rounds_table
from walkthrough.textsafe import safe_text
from walkthrough.words import count

DRAFTERS = ("lookup", "mtp", "draft")  # the kinds the stage cycles through ("draft" with the app's --draft)
MAX_DRAFTS = 8
ROUNDS_SHOWN = 8


@dataclass(frozen=True)
class RoundPlan:
    """What a speculative run needs, frozen when it starts."""

    run_id: int
    model: Any  # walkthrough.engine.model.Model
    prompt_ids: tuple[int, ...]
    chunk: int
    settings: Any  # walkthrough.engine.sampler.SamplerSettings
    max_tokens: int
    drafter: str
    k: int
    draft: Path | None = None  # the draft model's file, for drafter "draft"


class _Run:
    """A started speculative run: its plan, its cancel flag, its generator of Steps and how many it made."""

    def __init__(self, plan: RoundPlan) -> None:
        self.plan = plan
        self.cancel = threading.Event()  # set when another run replaces this one
        self.rounds = None  # the generator of Steps: the prompt's last prefill pass, then one per round
        self.made = 0  # Steps the generator made so far
        self.report: Progress | None = None  # the pass hook of the call in flight


class RoundRunner:
    """The stage's speculative run, advanced one round at a time from a worker (one at a time, under a lock)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._run: _Run | None = None

    def start(self, plan: RoundPlan) -> None:
        """Make `plan` the current run (nothing runs until `next`); a round of the previous run stops at its
        next layer."""
        old, self._run = self._run, _Run(plan)
        if old is not None:
            old.cancel.set()

    def next(self, run_id: int, shown: int, cancelled: Callable[[], bool] = lambda: False):
        """The Step of run `run_id` after the `shown` first ones (the prefill's last pass first), None when the
        answer is done.

        Args:
            shown: Steps of this run the caller holds.
            cancelled: the caller's own stop request (its worker was cancelled), checked at every layer.

        Raises:
            Cancelled: the run was replaced (before or during the round), or `cancelled()`; the run itself
                can go on at the next call.
            WalkthroughError: the engine refused the round.
        """
        with self._lock:
            run = self._run
            if run is None or run.plan.run_id != run_id or run.cancel.is_set():
                raise Cancelled()

            run.report = stop_when(lambda: run.cancel.is_set() or cancelled())
            try:
                if run.rounds is None or run.made != shown:  # a round was cut off, or its step not kept
                    run.rounds, run.made = self._begin(run.plan, lambda done, total: run.report(done, total)), 0
                    while run.made < shown:  # the steps the caller holds, computed again
                        next(run.rounds)
                        run.made += 1
                step = next(run.rounds, None)
            except Cancelled:
                run.rounds = None  # the exception closed the generator, and its session is mid-round
                raise
            run.made += step is not None
            return step

    @staticmethod
    def _begin(plan: RoundPlan, progress: Progress):
        from walkthrough.engine import speculative
        from walkthrough.engine.model import Model
        from walkthrough.engine.sampler import Sampler
        from walkthrough.engine.session import Session

        if not isinstance(plan.model, Model):
            raise WalkthroughError("speculative decoding runs on the numpy engine; open the file without "
                                   "--engine llama.cpp to see it")
        drafter = speculative.make_drafter(plan.drafter, plan.model, draft=plan.draft)
        session = Session(plan.model, keep_hidden=drafter.needs_hidden)
        sampler = Sampler(plan.settings)
        last = None
        for last in speculative.prefill(session, drafter, plan.prompt_ids, chunk=plan.chunk, sampler=sampler,
                                        progress=progress):
            pass
        yield last
        if not last.stopped:
            yield from speculative.speculate(session, sampler, drafter, plan.max_tokens - 1, k=plan.k,
                                             progress=progress)


class SpeculateScreen(StageScreen):
    """Rounds of drafts, accepted and rejected, and what speculation saves (or costs) on this model."""

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

    @dataclass
    class RoundDone(FromWorker):
        """A worker finished a round (or the prefill) of run `run_id`; `step` None: the answer is done.

        Dropped once its worker was cancelled (the round was stopped, or the run replaced).
        """

        run_id: int
        step: Any
        error: str | None = None

    def __init__(self) -> None:
        super().__init__()
        self.k = DEFAULT_DRAFT_MAX
        self.drafter = DRAFTERS[0]
        self.runner = RoundRunner()
        self.run_id = 0
        self.started_for: object = None  # the (model, prompt, settings) the current run was started for
        self.prefill = None  # the prompt's last pass (it chose the first token)
        self.rounds: list = []  # verification passes, in order
        self.finished = False
        self.busy = False  # a round is in flight (its worker not cancelled)
        self.playing = False
        self.error: str | None = None

    def compose_body(self) -> ComposeResult:
        with VerticalScroll(id="speculate-main"):
            yield Static(id="speculate-head")
            yield Static(id="speculate-rounds")
            yield Static(id="speculate-figures")
            yield Static(id="speculate-answer")

    # ---- the run ------------------------------------------------------------------------
    def _restart(self) -> None:
        state = self.state
        self._stop_round()
        self.run_id += 1
        self.prefill, self.rounds, self.finished, self.error, self.playing = None, [], False, None, False
        self.started_for = (state.model, tuple(state.prompt_ids), state.settings)
        if state.can_run:
            self.runner.start(RoundPlan(self.run_id, state.model, tuple(state.prompt_ids), state.chunk,
                                        state.settings, state.max_new_tokens, self.drafter, self.k, state.draft))

    def _next_round(self) -> None:
        if self.busy or self.finished or self.error or not self.state.can_run:
            return
        self.busy = True
        run_id, shown = self.run_id, (self.prefill is not None) + len(self.rounds)

        def work() -> None:
            worker = get_current_worker()
            try:
                step = self.runner.next(run_id, shown, lambda: worker.is_cancelled)
            except Cancelled:
                return
            except WalkthroughError as exc:
                self.post_message(self.RoundDone(run_id, None, str(exc), worker=worker))
                return
            self.post_message(self.RoundDone(run_id, step, worker=worker))

        self.run_worker(work, thread=True, group="speculate", name="speculative round")

    def _stop_round(self) -> None:
        """Cancel the round in flight (it stops at its next layer and posts nothing); stop playing."""
        self.workers.cancel_group(self, "speculate")
        self.busy = self.playing = False

    def on_screen_suspend(self) -> None:
        if self.app.current_mode != self.STAGE:  # left the stage (an overlay on top of it stops nothing)
            self._stop_round()

    def on_speculate_screen_round_done(self, message: RoundDone) -> None:
        if message.stale or message.run_id != self.run_id:
            return  # a round stopped, or of a run replaced since (either way `busy` was cleared then)
        self.busy = False
        if message.error:
            self.error = message.error
        elif message.step is None:
            self.finished = True
        elif message.step.draft is None:
            self.prefill = message.step
            self.finished = message.step.stopped
        else:
            self.rounds.append(message.step)
            self.finished = message.step.stopped
        self.redraw()
        if self.playing and not self.finished and not self.error:
            self._next_round()
        else:
            self.playing = False

    def action_round(self) -> None:
        self.playing = False
        self._next_round()

    def action_play(self) -> None:
        self.playing = not self.playing
        if self.playing:
            self._next_round()

    def action_restart(self) -> None:
        self._restart()
        self.redraw()

    def action_drafts(self, delta: int) -> None:
        self.k = min(MAX_DRAFTS, max(1, self.k + delta))
        self.action_restart()

    def action_drafter(self) -> None:
        kinds = [kind for kind in DRAFTERS if kind != "draft" or self.state.draft is not None]
        self.drafter = kinds[(kinds.index(self.drafter) + 1) % len(kinds)]
        self.action_restart()

    def autoplay_step(self) -> bool:
        """An autoplay tick: one round until the answer is done."""
        if self.finished or self.error or not self.state.can_run:
            return False
        self._next_round()
        return True

    # ---- drawing ---------------------------------------------------------------------------
    def refresh_view(self) -> None:
        state = self.state
        head = self.query_one("#speculate-head", Static)
        blocker = state.run_blocker()
        if blocker:
            head.update(Text.assemble(("Cannot run the request: ", "bold"), safe_text(blocker)))
            return
        if self.started_for != (state.model, tuple(state.prompt_ids), state.settings):
            self._restart()  # the request or its knobs changed since this stage's run began
        line = Text.assemble(("drafter ", "bold"), self.drafter, ("  k ", "bold"), str(self.k),
                             ("  (d drafter, + - k, space round, enter play, r restart)", "dim"))
        if self.error:
            line.append("\n")
            line.append_text(safe_text(self.error, "bold"))
        elif self.prefill is None:
            line.append("\nPress space: the prompt is prefilled, then each press runs one round.")
        head.update(line)
        rounds = self.query_one("#speculate-rounds", Static)
        figures_view = self.query_one("#speculate-figures", Static)
        if not self.rounds:
            rounds.update("")
            figures_view.update("")
        else:
            rounds.update(Group(Text("rounds (\u2713 accepted, \u2717 rejected)", style="bold"),
                                rounds_table(self.rounds, state.piece, ROUNDS_SHOWN)))
            parts = [figures(self.rounds, state.card)]
            if state.card.is_moe:
                parts.append(Group(Text("experts woken by the last verification pass", style="bold"),
                                   ExpertsGrid(self.rounds[-1], state.card.n_experts, last_token_only=False)))
            figures_view.update(Group(*parts))
        answer = [] if self.prefill is None else [self.prefill.chosen]
        for step in self.rounds:
            answer += step.generated
        text = state.tokenizer.decode(answer) if state.tokenizer and answer else ""
        ending = " (done)" if self.finished else ""
        self.query_one("#speculate-answer", Static).update(
            Group(Text(f"the answer so far: {count(len(answer), 'token')}{ending}", style="bold"),
                  safe_text(text, keep_newlines=True)))
