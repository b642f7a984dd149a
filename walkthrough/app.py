"""The Textual app: registers one mode per stage, owns the request state and the workers that fill it.

`make_app(...)` builds it for the CLI (`walkthrough [MODEL]`) and for tests alike.
Workers run in threads and only post messages (`walkthrough.screens.messages`);
the handlers here update `self.state` and bump `revision`, which every stage
screen watches.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import ClassVar

from textual import work
from textual.app import App, SystemCommand
from textual.message import Message
from textual.reactive import reactive
from textual.screen import Screen
from textual.worker import get_current_worker

from walkthrough.errors import WalkthroughError
from walkthrough.inspect.render_process import stop_all as stop_renders
from walkthrough.screens import messages as msg
from walkthrough.screens.autoplay import AUTOPLAY_SECONDS, Autoplay
from walkthrough.screens.base import STAGE_IDS, STAGES
from walkthrough.screens.registry import stage_screens
from walkthrough.screens.state import RequestState, load_messages
from walkthrough.screens.typeahead import Typeahead

FIRST_PAINT_WAIT = 2.0  # seconds the loader waits for the File stage to be drawn before building the rest
PLAY_SECONDS = 0.1  # pause between passes while playing


class WalkthroughApp(App):
    """One request, stage by stage."""

    TITLE = "walkthrough"
    CSS_PATH = "screens/app.tcss"
    MODES = stage_screens()
    HORIZONTAL_BREAKPOINTS: ClassVar[list[tuple[int, str]]] = [(0, "-narrow"), (110, "-wide")]

    revision: reactive[int] = reactive(0)  # bumped whenever `state` changes
    status: reactive[str] = reactive("")  # what is loading, shown in the stage bar
    playing: reactive[bool] = reactive(False)  # run passes one after another

    def __init__(
        self,
        state: RequestState,
        *,
        autoplay: bool = False,
        exit_at_end: bool = False,
        screenshots: Path | None = None,
        pace: float = AUTOPLAY_SECONDS,
    ) -> None:
        super().__init__()
        self.state = state
        self.autoplay = autoplay or screenshots is not None
        self.exit_at_end = exit_at_end
        self.walk = Autoplay(self, pace, screenshots, exit_at_end) if self.autoplay else None
        self.error: str | None = None
        self.loaded: set[str] = set()
        self.stepping = False  # a pass is running in a worker
        self.first_screen_at: float | None = None  # wall-clock time the File stage first showed the file
        self._file_shown = threading.Event()
        self.typeahead = Typeahead()

    def post_message(self, message: Message) -> bool:
        if self.typeahead.drop(message):  # typed far ahead of a busy app (screens/typeahead.py)
            return False
        return super().post_message(message)

    # ---- lifecycle ----------------------------------------------------------
    def on_mount(self) -> None:
        self.switch_mode(STAGE_IDS[0])
        self.load_request()
        self.set_interval(PLAY_SECONDS, self._play_tick, name="play")
        if self.walk is not None:
            self.set_interval(self.walk.interval, self.walk.tick, name="autoplay")

    def on_unmount(self) -> None:
        self._file_shown.set()
        self.workers.cancel_all()
        stop_renders()  # a template render in a worker ends now, not at its time limit
        self.state.close()

    @work(thread=True, exclusive=True, group="load", name="load request")
    def load_request(self) -> None:
        """Open the file, then build what the later stages need; each part reports when ready."""
        worker = get_current_worker()
        self.post_message(msg.Progress("opening the file"))
        try:
            self.state.open_file()
        except WalkthroughError as exc:
            self.post_message(msg.LoadFailed(str(exc)))
            return
        except OSError as exc:
            self.post_message(msg.LoadFailed(f"{exc.filename or self.state.spec}: {exc.strerror or exc}"))
            return
        self.post_message(msg.StageLoaded("file"))
        # Let the File stage paint before the heavier parts (tokenizer import and build) take the CPU.
        self._file_shown.wait(timeout=FIRST_PAINT_WAIT)
        for part, build in self.state.builders():
            if worker.is_cancelled:
                return
            self.post_message(msg.Progress(f"preparing {part}"))
            try:
                build()
            except WalkthroughError as exc:
                self._part_failed(part, str(exc))
                continue
            except Exception as exc:  # noqa: BLE001 - a bug in one part must not take the File stage down
                self._part_failed(part, f"internal error (a bug): {type(exc).__name__}: {exc}")
                continue
            self.post_message(msg.StageLoaded(part))
        if worker.is_cancelled:
            return
        self.state.start_run()
        self.post_message(msg.StageLoaded("run"))
        self.post_message(msg.Progress(""))

    def _part_failed(self, part: str, reason: str) -> None:
        """From the loader thread: record the reason at once (later parts read it), then tell the UI."""
        self.state.unavailable[part] = reason
        self.post_message(msg.StageUnavailable(part, reason))

    # ---- worker reports -----------------------------------------------------
    def on_progress(self, message: msg.Progress) -> None:
        self.status = f"{message.what}…" if message.what else ""

    def on_stage_loaded(self, message: msg.StageLoaded) -> None:
        self.loaded.add(message.part)
        if message.part == "run":
            self.stepping = False
        self.revision += 1
        if message.part == "file":
            self.call_after_refresh(self._file_drawn)

    def _file_drawn(self) -> None:
        """The first screen shows the file's numbers: note when (for the startup benchmark); --exit stops here."""
        self.first_screen_at = time.time()
        self._file_shown.set()
        if self.exit_at_end and not self.autoplay:
            self.exit(0)

    def on_stage_unavailable(self, message: msg.StageUnavailable) -> None:
        self.state.unavailable[message.part] = message.reason
        self.revision += 1

    def on_load_failed(self, message: msg.LoadFailed) -> None:
        self.error = message.error
        self.exit(return_code=2)

    # ---- running the request ----------------------------------------------------
    def action_step(self) -> None:
        """Run one pass (a prefill chunk or one decoded token)."""
        blocker = self.state.run_blocker()
        if blocker:
            self.notify(blocker, title="Cannot run", severity="warning", markup=False)
            return
        if self.stepping or self.state.finished:
            return
        self.stepping = True
        self.run_pass()

    def action_play(self) -> None:
        self.playing = not self.playing and not self.state.finished

    def action_restart(self) -> None:
        self.playing = False
        self.restart_run()

    @work(thread=True, group="step", name="run one pass")
    def run_pass(self) -> None:
        try:
            run_id, step = self.state.run_pass()
        except WalkthroughError as exc:
            self.post_message(msg.RunFailed(str(exc)))
            return
        self.post_message(msg.StepDone(run_id, step))

    @work(thread=True, group="step", name="restart the request")
    def restart_run(self) -> None:
        self.state.start_run()
        self.post_message(msg.StageLoaded("run"))

    def rebuild_prompt(self) -> None:
        """After an edit of the messages: re-render, re-tokenize and restart, in a worker."""
        self.playing = False
        self._rebuild_prompt()

    @work(thread=True, group="step", name="rebuild the prompt")
    def _rebuild_prompt(self) -> None:
        self.post_message(msg.Progress("rendering and tokenizing"))
        self.state.rebuild_prompt()
        self.post_message(msg.StageLoaded("run"))
        self.post_message(msg.Progress(""))

    def on_step_done(self, message: msg.StepDone) -> None:
        self.stepping = False
        if message.run_id != self.state.run_id:
            return  # a pass of a run that was restarted meanwhile
        if message.step is None:
            self.state.finished = True
            self.playing = False
        else:
            self.state.steps.append(message.step)
        self.revision += 1

    def on_run_failed(self, message: msg.RunFailed) -> None:
        self.stepping = self.playing = False
        self.notify(message.error, title="The pass failed", severity="error", markup=False)

    def _play_tick(self) -> None:
        if self.playing and not self.stepping:
            self.action_step()

    # ---- moving between stages ----------------------------------------------
    def _stage_index(self) -> int:
        return STAGE_IDS.index(self.current_mode) if self.current_mode in STAGE_IDS else 0

    def action_next_stage(self) -> None:
        self.switch_mode(STAGE_IDS[min(self._stage_index() + 1, len(STAGE_IDS) - 1)])

    def action_previous_stage(self) -> None:
        self.switch_mode(STAGE_IDS[max(self._stage_index() - 1, 0)])

    def action_goto_stage(self, stage: str) -> None:
        if stage in STAGE_IDS:
            self.switch_mode(stage)

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        for number, (stage, label) in enumerate(STAGES, start=1):
            yield SystemCommand(f"Stage {number}: {label}", f"Go to the {label} stage",
                                lambda stage=stage: self.action_goto_stage(stage))
        if hasattr(screen, "action_glossary"):
            yield SystemCommand("Glossary", "The terms the stages use", screen.action_glossary)
            yield SystemCommand("Help", "What this stage shows and its keys", screen.action_stage_help)
        # The stage's own keys (step, play, knobs, views...), each under its description.
        seen = {"Glossary", "Help", "Terms", "Quit", "Next stage", "Previous stage"}
        for key, active in screen.active_bindings.items():
            binding = active.binding
            if active.node is not screen or not binding.description or binding.description in seen:
                continue  # only the stage's own keys, each once
            if binding.action.startswith("app.goto"):
                continue
            seen.add(binding.description)

            async def run(action: str = binding.action, node=active.node) -> None:
                await self.run_action(action, node)

            yield SystemCommand(binding.description, f"key {key}", run)

    @property
    def stage_number(self) -> int:
        """1-based number of the current stage."""
        return self._stage_index() + 1

    @property
    def is_last_stage(self) -> bool:
        return self._stage_index() == len(STAGE_IDS) - 1

def make_app(
    model: str | None = None,
    messages: str | Path | list[dict[str, str]] | None = None,
    *,
    seed: int = 0,
    temperature: float = 0.0,
    hardware: str | None = None,
    autoplay: bool = False,
    exit_at_end: bool = False,
    screenshots: str | Path | None = None,
    pace: float = AUTOPLAY_SECONDS,
    engine: str = "numpy",
) -> WalkthroughApp:
    """The app for a model spec (None: the bundled tiny model) and a messages file or list.

    Raises:
        WalkthroughError: the messages file is malformed.
    """
    chat = messages if isinstance(messages, list) else load_messages(messages)
    state = RequestState(spec=model, messages=chat, seed=seed, temperature=temperature, hardware=hardware,
                         engine=engine)
    return WalkthroughApp(
        state,
        autoplay=autoplay,
        exit_at_end=exit_at_end,
        screenshots=Path(screenshots) if screenshots is not None else None,
        pace=pace,
    )
