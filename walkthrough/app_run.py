"""The stage's run of the request: its passes, step by step or played, as jobs of the run service.

`start_run` makes a fresh run of the request as it is now (nothing runs yet);
space runs one pass (`action_step`) in a worker that asks the run service
(`RunService.run_pass`), which posts the Step; enter plays, a pass every
`PLAY_SECONDS` once the last one was stored. The handlers here store each
Step in the request state on the UI thread, note the run's first token, and
show a long pass's progress in the stage bar. `r` runs the request again from
an empty KV cache and `u` unloads the model, each asking first when the run so
far would be lost.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from textual import work
from textual.app import App
from textual.worker import get_current_worker

from walkthrough.engine.sampler import SamplerSettings
from walkthrough.request import events, parts
from walkthrough.request.parts import Part
from walkthrough.request.run import PromptSource, RunPlan
from walkthrough.request.state import FirstToken
from walkthrough.screens.confirm import ConfirmDiscard, discard_question
from walkthrough.units import binary_bytes

if TYPE_CHECKING:
    from walkthrough.inspect.chat import ChatTokens

PLAY_SECONDS = 0.1  # pause between passes while playing


class RunsTheStage(App):
    """Mixin of the app: the stage's run (step, play, restart, unload) and the handlers of its
    passes."""

    def __init__(self) -> None:
        super().__init__()
        self._in_flight: int | None = None  # run id of the pass a worker is running

    def start_run(self) -> None:
        """A fresh run from the first token (nothing runs yet); a pass in flight is abandoned at its
        next layer."""
        state = self.state
        state.run_id += 1
        state.steps = ()
        state.finished = False
        self._in_flight = None
        self.pass_status = ""
        if state.can_run:
            self.runs.start(RunPlan(state.run_id, state.model, tuple(state.prompt_ids), state.chunk,
                                    state.max_new_tokens, state.settings,
                                    attention_rows=state.attention_rows_blocker() is None,
                                    request=self._prompt_source()))
        else:
            self.runs.stop()
        state.loaded = state.loaded | {Part.RUN}
        self.speculation_follows_the_request()

    def _prompt_source(self) -> PromptSource | None:
        """Where the run's prompt comes from (messages, rendering), so its first pass can say why
        reuse stopped."""
        state = self.state
        tokenizer, source, f = state.tokenizer, state.template_source, state.file
        if tokenizer is None or source is None or state.chat is None or f is None:
            return None
        origin = parts.template_origin(f, state.template_file)

        def render(messages: list[dict]) -> ChatTokens:
            return parts.build_tokens(tokenizer, source, messages, origin)

        return PromptSource(list(state.messages), state.chat, render, tokenizer.decode)

    def action_unload(self) -> None:
        """Drop what the engine holds (the session's KV cache, the model's dequantized weights),
        then prepare the model again: the next run pays the first use of every weight, as after a
        server unloaded the model. Asks first when the run so far would be lost (`discard_then`)."""
        self.discard_then(self.unload)

    def unload(self) -> None:
        """Unload (see `action_unload`), now."""
        state = self.state
        if state.file is None or state.card is None:
            return
        self.playing = False
        self.runs.unload()
        state.model = None
        if state.calls is not None and state.calls.model is not None:
            # the four calls ran on that model: let go of it too (a file's weights are held once)
            state.calls = replace(state.calls, model=None)
        state.loaded = state.loaded - {Part.ENGINE, Part.RUN}
        state.unloads += 1
        self.start_run()
        self._reload_engine(state.engine, state.file, state.card, state.max_memory, state.exact_products)

    @property
    def stepping(self) -> bool:
        """A pass of the current run is being computed."""
        return self._in_flight is not None and self._in_flight == self.state.run_id

    def step_blocked(self, *, counting_the_pass: bool = True) -> str | None:
        """Why space would do nothing now, saying what to do instead; None when it runs a pass.

        With counting_the_pass=False, a pass in flight is not a reason (what the key will do once it
        ends).
        """
        blocker = self.state.run_blocker()
        if blocker:
            return f"Cannot run: {blocker}"
        if self.stepping and counting_the_pass:
            return "A pass is running: wait for it, or press r to restart the request."
        if self.state.finished:
            why = "the token cap was reached" if self.state.capped else "the answer is complete"
            return f"Nothing left to run ({why}): press r to run again."
        return None

    def action_explain(self, action: str) -> None:
        """A key whose action is disabled now was pressed: say why and what to do instead."""
        done = "Nothing left to play: press r to run again." if self.state.finished else None
        reason = self.step_blocked() if action == "step" else (self.state.run_blocker() or done)
        if reason:
            self.notify(reason, title="Nothing to do", severity="warning", markup=False)

    def action_step(self) -> None:
        """Run one pass (a prefill chunk or one decoded token)."""
        reason = self.step_blocked()
        if reason:
            self.notify(reason, title="Step", severity="warning", markup=False)
            return
        self._in_flight = self.state.run_id
        self.run_pass(self.state.run_id)

    def action_play(self) -> None:
        self.playing = not self.playing and not self.state.finished

    def action_restart(self) -> None:
        """Run the request again from an empty KV cache (edits and follow-ups keep the cache; r does
        not), once the user agreed to lose the run so far (`discard_then`)."""
        self.discard_then(self.restart)

    def restart(self) -> None:
        """Run the request again from an empty KV cache, now."""
        self.playing = False
        self.runs.unload()
        self.start_run()

    def discard_then(self, then: Callable[[], None]) -> None:
        """Call `then`, which throws the current run away: at once when nothing would be lost, else
        only if the user says yes (screens/confirm.py)."""
        self.ask_then(discard_question(self.state, self.stepping), then)

    def ask_then(self, question: str | None, then: Callable[[], None]) -> None:
        """Call `then` at once when `question` is None (nothing would be lost), else only if the
        user says yes."""
        if question is None:
            then()
        else:
            self.push_screen(ConfirmDiscard(question), lambda discard: then() if discard else None)

    @work(thread=True, group="step", name="run one pass")
    def run_pass(self, run_id: int) -> None:
        worker = get_current_worker()
        self.runs.run_pass(run_id, lambda: worker.is_cancelled)

    def set_settings(self, settings: SamplerSettings) -> None:
        """New sampler knobs: shown at once, used by the passes still to run (a new seed restarts
        the draws)."""
        self.state.settings = settings
        self.runs.set_settings(settings)
        self.speculation_follows_the_request()

    def apply_pass_progress(self, message: events.PassProgress) -> None:
        if message.run_id == self.state.run_id and self.stepping:
            self.pass_status = pass_status(message.done, message.total, message.head_bytes)
            self._sync_bindings()

    def apply_step_done(self, message: events.StepDone) -> None:
        state = self.state
        if message.run_id != state.run_id:
            return  # a pass of a run that was restarted meanwhile
        self._in_flight = None
        self.pass_status = ""
        step = message.step
        if step is not None:
            state.steps = (*state.steps, step)
            if step.phase == "prefill" and step.chosen is not None:
                self._first_token(state.prefill_steps)
        if step is None or step.stopped or step.capped:
            state.finished = True
            self.playing = False

    def _first_token(self, prompt: list) -> None:
        """Note how this run reached its first token (the Chat stage lists every run's: cold, warm,
        reused)."""
        state = self.state
        first = FirstToken(prompt[-1].end, prompt[0].reused, sum(s.seconds for s in prompt),
                           state.runs_on_model == 0, prompt[0].engine)
        state.first_tokens = (*state.first_tokens, first)
        state.runs_on_model += 1

    def apply_pass_cancelled(self, message: events.PassCancelled) -> None:
        if message.run_id == self.state.run_id:
            self._in_flight = None
            self.pass_status = ""
            self._sync_bindings()

    def apply_run_failed(self, message: events.RunFailed) -> None:
        if message.run_id != self.state.run_id:
            return
        self._in_flight = None
        self.pass_status = ""
        self.playing = False
        self._sync_bindings()
        self.notify(message.error, title="The pass failed", severity="error", markup=False)

    def _play_tick(self) -> None:
        if self.playing and not self.stepping:
            if self.state.finished or self.state.run_blocker():
                self.playing = False
            else:
                self.action_step()

def pass_status(done: int, total: int, head_bytes: int = 0) -> str:
    """The stage bar's words for a pass in flight: the layer it is at, then the output head's first
    use.

    Example: pass_status(18, 18, 1 << 30) -> "pass: layer 18 of 18 done, output head: first use,
    decoding 1.0 GiB"
    """
    if done < total:
        return f"pass: layer {done} of {total}"
    head = (f", output head: first use, decoding {binary_bytes(head_bytes)}" if head_bytes
            else ", output head")
    return f"pass: layer {done} of {total} done{head}"
