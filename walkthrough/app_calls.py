"""The four calls (over the Chat stage): played and measured as jobs of the run service, kept in the
request state.

A worker plays the scripted sequence from the current messages
(`request.calls.play_calls`) on the request's own model (`calls_model`: the
one the stage's run uses, so the file's weights are held once), and, when
asked, measures the first request's first token from a fresh process (a cold
start) against this process (warm, and with the prompt's KV cache kept). Every
pass runs through the run service, so none computes beside a pass of the
stage's run or a speculative round. The jobs post each result
(`request.events`); the handlers here store it in `state.calls` on the UI
thread, and the screen (`screens/four_calls.py`) shows it.

Replaying, measuring again and closing the screen cancel the worker running:
it stops at the next layer of its pass (the engine's `Cancelled`) or kills the
cold start's process, and whatever it posted is dropped once it was cancelled
(each record travels with its worker), so a new play starts from nothing and
gives what an uncancelled one gives.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from textual import work
from textual.app import App
from textual.worker import get_current_worker

from walkthrough.request import calls as jobs
from walkthrough.request import events
from walkthrough.request.state import Calls

if TYPE_CHECKING:
    from walkthrough.engine.protocol import Engine
    from walkthrough.request.calls import CallsInput

MEASURING = "measure cold and warm starts"  # the starts' worker


class PlaysTheCalls(App):
    """Mixin of the app: the four calls' play and their cold and warm starts."""

    def play_calls(self, calls: CallsInput) -> None:
        """Play the four calls from the start (a play or a measurement in flight stops within a
        layer)."""
        self.stop_calls()
        old = self.state.calls
        self.state.calls = Calls(play=old.play + 1 if old is not None else 1)
        self._play_calls(calls, self.state.model)

    def measure_starts(self, calls: CallsInput) -> None:
        """Measure the first request's cold and warm starts, once the calls were played (one at a
        time)."""
        played = self.state.calls
        if played is None or played.model is None or not played.turns or self.measuring:
            return
        self.state.calls = replace(played, status="cold start: a fresh process opens the file")
        self._measure_starts(calls, played.model, list(played.turns[0].chat.ids))

    @property
    def measuring(self) -> bool:
        """The cold and warm starts are being measured."""
        return any(w.name == MEASURING and not w.is_finished and not w.is_cancelled
                   for w in self.workers)

    def stop_calls(self) -> None:
        """Cancel the play or the measurement in flight (it stops within a layer and posts
        nothing)."""
        self.workers.cancel_group(self, "four-calls")

    @work(thread=True, exclusive=True, group="four-calls", name="play the four calls")
    def _play_calls(self, c: CallsInput, model: Engine | None) -> None:
        worker = get_current_worker()
        jobs.play_calls(self.runs, c, jobs.calls_model(model, c.file, c.max_memory), lambda: worker.is_cancelled)

    @work(thread=True, exclusive=True, group="four-calls", name=MEASURING)
    def _measure_starts(self, c: CallsInput, model: Engine, first: list[int]) -> None:
        worker = get_current_worker()
        jobs.measure_starts(self.runs, c, model, first, lambda: worker.is_cancelled)

    # ---- what the workers post (UI thread) ----------------------------------------------------
    def apply_call_passed(self, message: events.CallPassed) -> None:
        if (calls := self.state.calls) is not None:
            self.state.calls = replace(calls, status=message.what)

    def apply_call_played(self, message: events.CallPlayed) -> None:
        if (calls := self.state.calls) is not None:
            self.state.calls = replace(calls, turns=(*calls.turns, message.turn),
                                       model=message.model)

    def apply_calls_finished(self, message: events.CallsFinished) -> None:
        if (calls := self.state.calls) is not None:
            self.state.calls = replace(calls, summary=message.summary,
                                       status="c measures the cold and warm starts")

    def apply_starts_measured(self, message: events.StartsMeasured) -> None:
        if (calls := self.state.calls) is not None:
            self.state.calls = replace(calls, starts=message.starts,
                                       prompt_tokens=message.prompt_tokens, status="")

    def apply_calls_failed(self, message: events.CallsFailed) -> None:
        if (calls := self.state.calls) is not None:
            self.state.calls = replace(calls, status=f"stopped: {message.error}")
