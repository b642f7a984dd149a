"""The Textual app: registers one mode per stage, owns the request state and the workers that fill
it.

`make_app(...)` builds it for the CLI (`walkthrough [MODEL]`) and for tests alike.

The contract: workers (loading the parts, running a pass) compute a value and
post it as a plain record (`walkthrough.request.events`) through `post_record`,
which wraps it in a Textual message (`screens.messages.Posted`); only the
handlers here and in the mixins (`apply_*`), on the UI thread, write
`self.state`. Every write is seen by
`_state_written`, which refuses writes from another thread and redraws the
screens once per batch (the `state_changed` reactive carries the names of the
fields that changed). Every pass on the model (the stage's run, Speculate's
rounds, the four calls, the warm starts) is a job of `self.runs`, the run
service, which holds the model's one lock.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from textual.binding import Binding, BindingType
from textual.reactive import reactive, var
from textual.worker import NoActiveWorker, get_current_worker

from walkthrough.app_calls import PlaysTheCalls
from walkthrough.app_keys import TypeaheadKeys
from walkthrough.app_load import LoadsTheRequest
from walkthrough.app_quit import EndsAtOnce
from walkthrough.app_run import PLAY_SECONDS, RunsTheStage
from walkthrough.app_speculate import SpeculatesRounds
from walkthrough.app_stages import StageModes
from walkthrough.errors import WalkthroughError
from walkthrough.request import stages
from walkthrough.request.autoplay import AUTOPLAY_SECONDS, Autoplay, check_picture_folder
from walkthrough.request.events import Event
from walkthrough.request.run import RunService
from walkthrough.request.state import MAX_NEW_TOKENS, RequestState, load_messages
from walkthrough.safewrite import Writer, run_inputs
from walkthrough.screens.messages import Posted
from walkthrough.screens.registry import stage_screens
from walkthrough.screens.stepping import SteppingScreen

if TYPE_CHECKING:
    from walkthrough.inspect.projector import Media


class WrongThread(RuntimeError):
    """The request state was written from a worker thread (only the UI thread writes it)."""


class WalkthroughApp(TypeaheadKeys, EndsAtOnce, LoadsTheRequest, RunsTheStage, SpeculatesRounds,
                     PlaysTheCalls, StageModes):
    """One request, stage by stage."""

    TITLE = "walkthrough"
    # Every stylesheet at start, the global one first: a screen's own sheet loaded on its first
    # visit would reparse all CSS and restyle every screen already made (then again on each return
    # to them), about 0.3 s a stage.
    CSS_PATH: ClassVar[list[str | Path]] = ["screens/app.tcss", *sorted(
        f"screens/{sheet.name}" for sheet in (Path(__file__).parent / "screens").glob("*.tcss")
        if sheet.name != "app.tcss")]
    HORIZONTAL_BREAKPOINTS: ClassVar[list[tuple[int, str]]] = [(0, "-narrow"), (110, "-wide")]
    # Reached only when the stage's own key for the action is disabled (check_action): say what to
    # do instead.
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("space", "explain('step')", show=False),
        Binding("enter", "explain('play')", show=False),
    ]

    # fields written in the last batch
    state_changed: var[frozenset[str]] = var(frozenset(), always_update=True)
    status: reactive[str] = reactive("")  # what is loading, shown in the stage bar
    # the pass in flight ("layer 3 of 30"), shown in the stage bar
    pass_status: reactive[str] = reactive("")
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
        # every pass on the model, one job at a time; what a job computes comes back as a record
        self.runs = RunService(self.post_record)
        self.autoplay = autoplay or screenshots is not None
        self.exit_at_end = exit_at_end
        self.walk = (Autoplay(self, pace, screenshots, exit_at_end, writer) if self.autoplay
                     else None)
        self.error: str | None = None
        # wall-clock time the File stage first showed the file
        self.first_screen_at: float | None = None
        self._ui_thread: int | None = None
        self._dirty: set[str] = set()
        # what the footer last showed of the run keys
        self._keys_shown: tuple[bool | None, ...] = ()

    # ---- the state's one writer ---------------------------------------------------
    def post_record(self, record: Event) -> None:
        """(Any thread) hand a job's record to the UI thread, with the worker posting it (if any)."""
        try:
            worker = get_current_worker()
        except NoActiveWorker:
            worker = None
        self.post_message(Posted(record, worker))

    def on_posted(self, message: Posted) -> None:
        """Apply a job's record (`apply_<its name>`), unless its worker was cancelled since."""
        if not message.stale:
            getattr(self, message.record.handler())(message.record)

    def _state_written(self, name: str) -> None:
        if threading.get_ident() != self._ui_thread:
            raise WrongThread(f"RequestState.{name} written from a worker thread; post a message "
                              "instead")
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
        """Let the footer grey or restore the run keys when their state changed (a footer rebuild is
        not free)."""
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
        self.load_request(s.spec, list(s.messages), s.template_name, s.template_file, s.engine,
                          s.max_memory, s.exact_products)
        self.set_interval(PLAY_SECONDS, self._play_tick, name="play")
        if self.walk is not None:
            self.set_interval(self.walk.interval, self.walk.tick, name="autoplay")

    def quits_cleanly(self) -> bool:
        """A quit on a terminal may end the process at once: no error to print, no autoplay files to
        finish."""
        return self.error is None and self.walk is None

    def release_processes(self) -> None:
        # a load waiting for the first paint goes on, and sees it was cancelled
        self._file_shown.set()
        super().release_processes()

    def on_unmount(self) -> None:
        self.release_processes()
        file = self.state.file
        self.runs.close(file.close if file is not None else lambda: None)

    # ---- keys ----------------------------------------------------------------------
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Keys that do nothing now show disabled in the footer (None); stage digits beyond the list
        are hidden."""
        # a pass in flight greys the key only once it shows its progress (a long pass)
        if action == "step":
            blocked = self.step_blocked(counting_the_pass=bool(self.pass_status))
            return None if blocked else True
        if action == "play":
            idle = (self.state.run_blocker() or self.state.finished) and not self.playing
            return None if idle else True
        if action == "goto_number":
            return bool(parameters) and int(parameters[0]) <= len(stages.STAGES)
        if action == "explain":
            # the stages whose space / enter run the request
            return isinstance(self.screen, SteppingScreen)
        return True


def _one_image() -> Media:
    """The media a --mmproj run starts with: one image of the default size."""
    from walkthrough.inspect.projector import parse_media

    return parse_media("1")


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
    beside: str | None = None,
    mmproj: str | Path | None = None,
    media: Media | None = None,
    exact_products: bool = False,
) -> WalkthroughApp:
    """The app for a model spec (None: the bundled tiny model) and a messages file or list.

    Raises:
        WalkthroughError: the messages file is malformed, max_tokens < 1, or the screenshots cannot
        be
            written (see `request.autoplay.check_picture_folder`).
    """
    if max_tokens < 1:
        raise WalkthroughError(f"--max-tokens {max_tokens}: the answer needs at least 1 token")
    chat = messages if isinstance(messages, list) else load_messages(messages)
    state = RequestState(spec=model, messages=chat, seed=seed, temperature=temperature,
                         hardware=hardware, max_new_tokens=max_tokens, template_name=template_name,
                         draft=Path(draft) if draft is not None else None,
                         template_file=Path(template) if template is not None else None,
                         engine=engine, max_memory=max_memory, exact_products=exact_products, beside=beside,
                         mmproj=Path(mmproj) if mmproj is not None else None,
                         media=media if media is not None or mmproj is None else _one_image())
    messages_file = messages if not isinstance(messages, list) else None
    writer = Writer(run_inputs(model, draft, messages_file, template, mmproj), overwrite=overwrite)
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
