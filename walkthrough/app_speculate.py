"""The Speculate stage's run: its rounds are jobs of the run service, their Steps kept in the
request state.

The stage asks (`speculate_round`, `play_rounds`, `restart_speculation`) and
shows `state.speculation`; a round runs in a worker that calls the run service
(`RunService.next_round`, under the model's one lock, so a round and a pass of
the Decode play take turns), which posts its Step in a `RoundDone`; the
handler here stores on the UI thread. The run starts again (a new `run_id`,
nothing held) when k or the drafter change, on `r`, and when the request, its
model or its sampler knobs change (`speculation_follows_the_request`, called
by the app where those change): drawing never starts work.

Stopping a round: restarting the run, leaving the stage and quitting cancel
the round in flight, which stops at its next layer and posts nothing.
"""

from __future__ import annotations

from dataclasses import replace

from textual import work
from textual.app import App
from textual.worker import get_current_worker

from walkthrough.app_run import pass_status
from walkthrough.request import events
from walkthrough.request.run import RoundPlan
from walkthrough.request.state import Speculation


class SpeculatesRounds(App):
    """Mixin of the app: the Speculate stage's rounds."""

    def _speculation_key(self) -> tuple:
        """What a speculative run is of: the model, the prompt, the sampler knobs."""
        state = self.state
        return id(state.model), tuple(state.prompt_ids), state.settings

    def speculation_follows_the_request(self) -> None:
        """Start the speculative run again if the request, its model or its knobs changed since it
        began."""
        if self.state.speculation.started_for != self._speculation_key():
            self.restart_speculation()

    def restart_speculation(self, *, drafter: str | None = None, k: int | None = None) -> None:
        """A new speculative run of the request as it is now, with this drafter and k (default: as
        before); nothing runs until a round is asked for, and a round in flight stops at its next
        layer."""
        state = self.state
        self.stop_round()
        old = state.speculation
        new = Speculation(old.run_id + 1, drafter or old.drafter, k or old.k,
                          started_for=self._speculation_key())
        state.speculation = new
        if state.can_run:
            self.runs.start_rounds(RoundPlan(new.run_id, state.model, tuple(state.prompt_ids),
                                             state.chunk, state.settings, state.max_new_tokens,
                                             new.drafter, new.k, state.draft))
        else:
            self.runs.stop_rounds()

    def speculate_round(self) -> None:
        """Run the next round (the prompt's prefill first) in a worker, unless one runs or the
        answer is done."""
        s = self.state.speculation
        if s.busy or s.finished or s.error or not self.state.can_run:
            return
        self.state.speculation = replace(s, busy=True)
        self._round(s.run_id, s.shown)

    def play_rounds(self) -> None:
        """Rounds one after another (again: stop after the round in flight)."""
        s = self.state.speculation
        self.state.speculation = replace(s, playing=not s.playing)
        if not s.playing:
            self.speculate_round()

    def stop_round(self) -> None:
        """Cancel the round in flight (it stops at its next layer and posts nothing); stop
        playing."""
        self.workers.cancel_group(self, "speculate")
        s = self.state.speculation
        if s.busy or s.playing:
            self.state.speculation = replace(s, busy=False, playing=False)
        self._round_status_off()

    @work(thread=True, group="speculate", name="speculative round")
    def _round(self, run_id: int, shown: int) -> None:
        worker = get_current_worker()
        self.runs.run_round(run_id, shown, lambda: worker.is_cancelled)

    def apply_round_progress(self, message: events.RoundProgress) -> None:
        s = self.state.speculation
        if message.run_id == s.run_id and s.busy:
            self.pass_status = "round " + pass_status(message.done, message.total)

    def _round_status_off(self) -> None:
        """No round in flight: its progress leaves the stage bar (a pass of the stage's run says its
        own)."""
        if self.pass_status.startswith("round "):
            self.pass_status = ""

    def apply_round_done(self, message: events.RoundDone) -> None:
        s = self.state.speculation
        if message.run_id == s.run_id:
            self._round_status_off()
        if message.run_id != s.run_id:
            # a round of a run replaced since (`busy` was cleared then); a stopped round's record
            # was dropped before this, as its worker was cancelled
            return
        step = message.step
        if message.error:
            s = replace(s, error=message.error)
        elif step is None:
            s = replace(s, finished=True)
        elif step.draft is None:
            s = replace(s, prefill=step, finished=step.stopped)
        else:
            s = replace(s, rounds=(*s.rounds, step), finished=step.stopped)
        playing = s.playing and not s.finished and not s.error
        self.state.speculation = replace(s, busy=False, playing=playing)
        if playing:
            self.speculate_round()
