"""The four calls (over the Chat stage): played and measured as jobs of the run service, kept in the
request state.

A worker plays the scripted sequence (`engine.turns.FourCalls`) from the current
messages in a session of its own, on its own `Model` of the opened file (so its
first call pays the first use of the weights, as a server's first request
does). Each call is also run from an empty cache, so "with" and "without reuse"
are both measured. Then, when asked, it measures the first request's first
token from a fresh process (a cold start) against this process (warm, and with
the prompt's KV cache kept). Every pass runs through the run service
(`RunService.steps`, `RunService.job`), so none computes beside a pass of the
stage's run or a speculative round. The worker posts each result; the handlers
here store it in `state.calls` on the UI thread, and the screen
(`screens/four_calls.py`) shows it.

Replaying, measuring again and closing the screen cancel the worker running:
it stops at the next layer of its pass (the engine's `Cancelled`) or kills the
cold start's process, and whatever it posted is dropped once it was cancelled
(each message names its worker), so a new play starts from nothing and gives
what an uncancelled one gives.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from textual import work
from textual.app import App
from textual.worker import get_current_worker

from walkthrough.engine.glassbox.session import Cancelled
from walkthrough.errors import WalkthroughError
from walkthrough.request.state import Calls
from walkthrough.screens import messages as msg

if TYPE_CHECKING:
    from walkthrough.engine.protocol import Engine
    from walkthrough.screens.four_calls import CallsInput

MEASURING = "measure cold and warm starts"  # the starts' worker


class PlaysTheCalls(App):
    """Mixin of the app: the four calls' play and their cold and warm starts."""

    def play_calls(self, calls: CallsInput) -> None:
        """Play the four calls from the start (a play or a measurement in flight stops within a
        layer)."""
        self.stop_calls()
        old = self.state.calls
        self.state.calls = Calls(play=old.play + 1 if old is not None else 1)
        self._play_calls(calls)

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
    def _play_calls(self, c: CallsInput) -> None:
        from walkthrough.engine.glassbox.model import Model
        from walkthrough.engine.glassbox.session import Session
        from walkthrough.engine.serving.turns import Conversation, FourCalls, summarize

        worker = get_current_worker()

        def cancelled() -> bool:
            return worker.is_cancelled

        try:
            model = Model(c.file)
            talk = Conversation(Session(model), c.tokenizer, c.template, settings=c.settings,
                                max_tokens=c.max_tokens, chunk=c.chunk, measure_fresh=True,
                                cancelled=cancelled)
            for label, messages in FourCalls.for_request(c.messages).requests(talk, c.messages):
                for step in self.runs.steps("four calls", talk.ask(messages, label), cancelled):
                    what = f"{label}: {step.phase} {step.start}:{step.end}"
                    self.post_message(msg.CallPassed(what, worker=worker))
                self.post_message(msg.CallPlayed(talk.turns[-1], model, worker=worker))
            self.post_message(msg.CallsFinished(summarize(talk.turns), worker=worker))
        except Cancelled:
            return
        except WalkthroughError as err:
            self.post_message(msg.CallsFailed(str(err), worker=worker))

    @work(thread=True, exclusive=True, group="four-calls", name=MEASURING)
    def _measure_starts(self, c: CallsInput, model: Engine, first: list[int]) -> None:
        from walkthrough.engine.serving.coldstart import cold_start, kept_start, warm_start

        worker = get_current_worker()

        def cancelled() -> bool:
            return worker.is_cancelled

        def measure() -> tuple:
            cold = cold_start(c.path, first, chunk=c.chunk, cancelled=cancelled)
            return (cold, warm_start(model, first, chunk=c.chunk, cancelled=cancelled),
                    kept_start(model, first, chunk=c.chunk, cancelled=cancelled))

        try:
            starts = self.runs.job("cold and warm starts", measure, cancelled)
        except Cancelled:
            return
        except WalkthroughError as err:
            self.post_message(msg.CallsFailed(str(err), worker=worker))
            return
        self.post_message(msg.StartsMeasured(starts, len(first), worker=worker))

    # ---- what the workers post (UI thread) ----------------------------------------------------
    def _calls_now(self, message: msg.FromWorker) -> Calls | None:
        """The calls a message is for (None: dropped, its worker was cancelled)."""
        return None if message.stale or self.state.calls is None else self.state.calls

    def on_call_passed(self, message: msg.CallPassed) -> None:
        if (calls := self._calls_now(message)) is not None:
            self.state.calls = replace(calls, status=message.what)

    def on_call_played(self, message: msg.CallPlayed) -> None:
        if (calls := self._calls_now(message)) is not None:
            self.state.calls = replace(calls, turns=(*calls.turns, message.turn),
                                       model=message.model)

    def on_calls_finished(self, message: msg.CallsFinished) -> None:
        if (calls := self._calls_now(message)) is not None:
            self.state.calls = replace(calls, summary=message.summary,
                                       status="c measures the cold and warm starts")

    def on_starts_measured(self, message: msg.StartsMeasured) -> None:
        if (calls := self._calls_now(message)) is not None:
            self.state.calls = replace(calls, starts=message.starts,
                                       prompt_tokens=message.prompt_tokens, status="")

    def on_calls_failed(self, message: msg.CallsFailed) -> None:
        if (calls := self._calls_now(message)) is not None:
            self.state.calls = replace(calls, status=f"stopped: {message.error}")
