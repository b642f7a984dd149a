"""The Textual app: registers one mode per stage, owns the request state and the workers that fill it.

`make_app(...)` builds it for the CLI (`walkthrough [MODEL]`) and for tests alike.

The contract: workers (loading the parts, running a pass) compute a value and
post it in a message (`walkthrough.screens.messages`); only the handlers here
and in the mixins, on the UI thread, write `self.state`. Every write is seen by
`_state_written`, which refuses writes from another thread and redraws the
screens once per batch (the `state_changed` reactive carries the names of the
fields that changed). Every pass on the model (the stage's run, Speculate's
rounds, the four calls, the warm starts) is a job of `self.runs`, the run
service, which holds the model's one lock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from textual import work
from textual.binding import Binding, BindingType
from textual.reactive import reactive, var
from textual.worker import get_current_worker

from walkthrough.app_calls import PlaysTheCalls
from walkthrough.app_keys import TypeaheadKeys
from walkthrough.app_load import LoadsTheRequest
from walkthrough.app_quit import EndsAtOnce
from walkthrough.app_speculate import SpeculatesRounds
from walkthrough.app_stages import StageModes
from walkthrough.engine.glassbox.session import Cancelled
from walkthrough.engine.sampler import SamplerSettings
from walkthrough.errors import WalkthroughError
from walkthrough.request import parts, stages
from walkthrough.request.autoplay import AUTOPLAY_SECONDS, Autoplay, check_picture_folder
from walkthrough.request.parts import Part
from walkthrough.request.run import PromptSource, RunPlan, RunService
from walkthrough.request.state import MAX_NEW_TOKENS, FirstToken, RequestState, load_messages
from walkthrough.safewrite import Writer, run_inputs
from walkthrough.screens import messages as msg
from walkthrough.screens.confirm import ConfirmDiscard, discard_question
from walkthrough.screens.registry import stage_screens
from walkthrough.screens.stepping import SteppingScreen
from walkthrough.units import binary_bytes

PLAY_SECONDS = 0.1  # pause between passes while playing
PROGRESS_AFTER = 0.3  # seconds into a pass before its progress is shown (short passes would only flood the queue)
PROGRESS_EVERY = 0.1  # seconds between progress reports of one pass


class WrongThread(RuntimeError):
    """The request state was written from a worker thread (only the UI thread writes it)."""


class WalkthroughApp(TypeaheadKeys, EndsAtOnce, LoadsTheRequest, SpeculatesRounds, PlaysTheCalls,
                     StageModes):
    """One request, stage by stage."""

    TITLE = "walkthrough"
    # Every stylesheet at start, the global one first: a screen's own sheet loaded on its first visit would reparse
    # all CSS and restyle every screen already made (then again on each return to them), about 0.3 s a stage.
    CSS_PATH: ClassVar[list[str | Path]] = ["screens/app.tcss", *sorted(
        f"screens/{sheet.name}" for sheet in (Path(__file__).parent / "screens").glob("*.tcss")
        if sheet.name != "app.tcss")]
    HORIZONTAL_BREAKPOINTS: ClassVar[list[tuple[int, str]]] = [(0, "-narrow"), (110, "-wide")]
    # Reached only when the stage's own key for the action is disabled (check_action): say what to do instead.
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("space", "explain('step')", show=False),
        Binding("enter", "explain('play')", show=False),
    ]

    state_changed: var[frozenset[str]] = var(frozenset(), always_update=True)  # fields written in the last batch
    status: reactive[str] = reactive("")  # what is loading, shown in the stage bar
    pass_status: reactive[str] = reactive("")  # the pass in flight ("layer 3 of 30"), shown in the stage bar
    playing: reactive[bool] = reactive(False)  # run passes one after another

    def __init__(
        self,
        state: RequestState,
        *,
        autoplay: bool = False,
        exit_at_end: bool = False,
        screenshots: Path | None = None,
        pace: float = AUTOPLAY_SECONDS,
        writer: Writer | None = None,
    ) -> None:
        self.MODES = stage_screens()  # read from the stage list when the app is made
        super().__init__()
        self.state = state
        self.runs = RunService()  # every pass on the model, one job at a time
        self.autoplay = autoplay or screenshots is not None
        self.exit_at_end = exit_at_end
        self.walk = Autoplay(self, pace, screenshots, exit_at_end, writer) if self.autoplay else None
        self.error: str | None = None
        self.first_screen_at: float | None = None  # wall-clock time the File stage first showed the file
        self._in_flight: int | None = None  # run id of the pass a worker is running
        self._ui_thread: int | None = None
        self._dirty: set[str] = set()
        self._keys_shown: tuple[bool | None, ...] = ()  # what the footer last showed of the run keys

    # ---- the state's one writer ---------------------------------------------------
    def _state_written(self, name: str) -> None:
        if threading.get_ident() != self._ui_thread:
            raise WrongThread(f"RequestState.{name} written from a worker thread; post a message instead")
        if not self._dirty:
            self.call_next(self._publish)
        self._dirty.add(name)

    def _publish(self) -> None:
        changed, self._dirty = frozenset(self._dirty), set()
        if self.return_code is not None:
            return  # the app is ending (its screens may be gone already): nothing to redraw
        self.state_changed = changed
        self._sync_bindings()

    def _sync_bindings(self) -> None:
        """Let the footer grey or restore the run keys when their state changed (a footer rebuild is not free)."""
        if self.return_code is not None:
            return  # the app is ending: its screens (and their footers) may be gone already
        now = (self.check_action("step", ()), self.check_action("play", ()))
        if now != self._keys_shown:
            self._keys_shown = now
            self.refresh_bindings()

    # ---- lifecycle ----------------------------------------------------------
    def on_mount(self) -> None:
        self._ui_thread = threading.get_ident()
        self.state.listen(self._state_written)
        self.switch_mode(stages.STAGES[0].id)
        s = self.state
        self.load_request(s.spec, list(s.messages), s.template_name, s.template_file, s.engine, s.max_memory)
        self.set_interval(PLAY_SECONDS, self._play_tick, name="play")
        if self.walk is not None:
            self.set_interval(self.walk.interval, self.walk.tick, name="autoplay")

    def quits_cleanly(self) -> bool:
        """A quit on a terminal may end the process at once: no error to print, no autoplay files to finish."""
        return self.error is None and self.walk is None

    def release_processes(self) -> None:
        self._file_shown.set()  # a load waiting for the first paint goes on, and sees it was cancelled
        super().release_processes()

    def on_unmount(self) -> None:
        self.release_processes()
        file = self.state.file
        self.runs.close(file.close if file is not None else lambda: None)

    # ---- running the request ----------------------------------------------------
    def start_run(self) -> None:
        """A fresh run from the first token (nothing runs yet); a pass in flight is abandoned at its next layer."""
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
        """Where the run's prompt comes from (messages, rendering), so its first pass can say why reuse stopped."""
        state = self.state
        tokenizer, source, f = state.tokenizer, state.template_source, state.file
        if tokenizer is None or source is None or state.chat is None or f is None:
            return None
        origin = parts.template_origin(f, state.template_file)
        return PromptSource(list(state.messages), state.chat,
                            lambda messages: parts.build_tokens(tokenizer, source, messages, origin), tokenizer.decode)

    def action_unload(self) -> None:
        """Drop what the engine holds (the session's KV cache, the model's dequantized weights), then prepare the
        model again: the next run pays the first use of every weight, as after a server unloaded the model.
        Asks first when the run so far would be lost (`discard_then`)."""
        self.discard_then(self.unload)

    def unload(self) -> None:
        """Unload (see `action_unload`), now."""
        state = self.state
        if state.file is None or state.card is None:
            return
        self.playing = False
        self.runs.unload()
        state.model = None
        state.loaded = state.loaded - {Part.ENGINE, Part.RUN}
        state.unloads += 1
        self.start_run()
        self._reload_engine(state.engine, state.file, state.card, state.max_memory)

    @property
    def stepping(self) -> bool:
        """A pass of the current run is being computed."""
        return self._in_flight is not None and self._in_flight == self.state.run_id

    def step_blocked(self, *, counting_the_pass: bool = True) -> str | None:
        """Why space would do nothing now, saying what to do instead; None when it runs a pass.

        With counting_the_pass=False, a pass in flight is not a reason (what the key will do once it ends).
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

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Keys that do nothing now show disabled in the footer (None); stage digits beyond the list are hidden."""
        if action == "step":  # a pass in flight greys the key only once it shows its progress (a long pass)
            blocked = self.step_blocked(counting_the_pass=bool(self.pass_status))
            return None if blocked else True
        if action == "play":
            return None if (self.state.run_blocker() or self.state.finished) and not self.playing else True
        if action == "goto_number":
            return bool(parameters) and int(parameters[0]) <= len(stages.STAGES)
        if action == "explain":
            return isinstance(self.screen, SteppingScreen)  # the stages whose space / enter run the request
        return True

    def action_explain(self, action: str) -> None:
        """A key whose action is disabled now was pressed: say why and what to do instead."""
        reason = self.step_blocked() if action == "step" else (
            self.state.run_blocker() or ("Nothing left to play: press r to run again." if self.state.finished
                                         else None))
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
        """Run the request again from an empty KV cache (edits and follow-ups keep the cache; r does not),
        once the user agreed to lose the run so far (`discard_then`)."""
        self.discard_then(self.restart)

    def restart(self) -> None:
        """Run the request again from an empty KV cache, now."""
        self.playing = False
        self.runs.unload()
        self.start_run()

    def discard_then(self, then: Callable[[], None]) -> None:
        """Call `then`, which throws the current run away: at once when nothing would be lost, else only
        if the user says yes (screens/confirm.py)."""
        self.ask_then(discard_question(self.state, self.stepping), then)

    def ask_then(self, question: str | None, then: Callable[[], None]) -> None:
        """Call `then` at once when `question` is None (nothing would be lost), else only if the user says yes."""
        if question is None:
            then()
        else:
            self.push_screen(ConfirmDiscard(question), lambda discard: then() if discard else None)

    @work(thread=True, group="step", name="run one pass")
    def run_pass(self, run_id: int) -> None:
        worker = get_current_worker()
        began = time.monotonic()
        reported = [began]

        def progress(done: int, total: int) -> None:
            now = time.monotonic()
            # The head's first use can take longer than all the layers: said whenever it comes.
            head = head_pending(self.state.model) if done == total else 0
            if head or (now - began >= PROGRESS_AFTER and now - reported[0] >= PROGRESS_EVERY):
                reported[0] = now
                self.post_message(msg.PassProgress(run_id, done, total, head))

        try:
            step = self.runs.next_pass(run_id, progress, lambda: worker.is_cancelled)
        except Cancelled:
            self.post_message(msg.PassCancelled(run_id))
            return
        except WalkthroughError as exc:
            self.post_message(msg.RunFailed(run_id, str(exc)))
            return
        self.post_message(msg.StepDone(run_id, step))

    def set_settings(self, settings: SamplerSettings) -> None:
        """New sampler knobs: shown at once, used by the passes still to run (a new seed restarts the draws)."""
        self.state.settings = settings
        self.runs.set_settings(settings)
        self.speculation_follows_the_request()

    def on_pass_progress(self, message: msg.PassProgress) -> None:
        if message.run_id == self.state.run_id and self.stepping:
            self.pass_status = pass_status(message.done, message.total, message.head_bytes)
            self._sync_bindings()

    def on_step_done(self, message: msg.StepDone) -> None:
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
        """Note how this run reached its first token (the Chat stage lists every run's: cold, warm, reused)."""
        state = self.state
        first = FirstToken(prompt[-1].end, prompt[0].reused, sum(s.seconds for s in prompt), state.runs_on_model == 0,
                           prompt[0].engine)
        state.first_tokens = (*state.first_tokens, first)
        state.runs_on_model += 1

    def on_pass_cancelled(self, message: msg.PassCancelled) -> None:
        if message.run_id == self.state.run_id:
            self._in_flight = None
            self.pass_status = ""
            self._sync_bindings()

    def on_run_failed(self, message: msg.RunFailed) -> None:
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


def head_pending(model: Any) -> int:
    """Bytes the model's output head decodes on its first use (`Model.head_pending`; 0 for llama.cpp)."""
    pending = getattr(model, "head_pending", None)
    return pending() if pending is not None else 0


def pass_status(done: int, total: int, head_bytes: int = 0) -> str:
    """The stage bar's words for a pass in flight: the layer it is at, then the output head's first use.

    Example: pass_status(18, 18, 1 << 30) -> "pass: layer 18 of 18 done, output head: first use, decoding 1.0 GiB"
    """
    if done < total:
        return f"pass: layer {done} of {total}"
    head = f", output head: first use, decoding {binary_bytes(head_bytes)}" if head_bytes else ", output head"
    return f"pass: layer {done} of {total} done{head}"


def make_app(
    model: str | None = None,
    messages: str | Path | list[dict[str, str]] | None = None,
    *,
    seed: int = 0,
    temperature: float = 0.0,
    hardware: str | None = None,
    max_tokens: int = MAX_NEW_TOKENS,
    draft: str | Path | None = None,
    template: str | Path | None = None,
    template_name: str | None = None,
    autoplay: bool = False,
    exit_at_end: bool = False,
    screenshots: str | Path | None = None,
    pace: float = AUTOPLAY_SECONDS,
    engine: str = "numpy",
    overwrite: bool = False,
    picture_format: str = "svg",
    max_memory: int | None = None,
) -> WalkthroughApp:
    """The app for a model spec (None: the bundled tiny model) and a messages file or list.

    Raises:
        WalkthroughError: the messages file is malformed, max_tokens < 1, or the screenshots cannot be
            written (see `request.autoplay.check_picture_folder`).
    """
    if max_tokens < 1:
        raise WalkthroughError(f"--max-tokens {max_tokens}: the answer needs at least 1 token")
    chat = messages if isinstance(messages, list) else load_messages(messages)
    state = RequestState(spec=model, messages=chat, seed=seed, temperature=temperature, hardware=hardware,
                         max_new_tokens=max_tokens, template_name=template_name,
                         draft=Path(draft) if draft is not None else None,
                         template_file=Path(template) if template is not None else None, engine=engine,
                         max_memory=max_memory)
    writer = Writer(run_inputs(model, draft, messages if not isinstance(messages, list) else None, template),
                    overwrite=overwrite)
    if screenshots is not None:
        suffixes = ("svg", "png") if picture_format == "png" else ("svg",)
        check_picture_folder(Path(screenshots), suffixes, writer)
    return WalkthroughApp(
        state,
        autoplay=autoplay,
        exit_at_end=exit_at_end,
        screenshots=Path(screenshots) if screenshots is not None else None,
        pace=pace,
        writer=writer,
    )
