"""Loading the request: the workers that open the file and build each part, and the handlers that
store them.

The load worker opens the file, posts it (the File stage paints), then builds
the tokenizer, the rendered prompt and its tokens, and the engine, posting each
part as it is built or why it could not be (`request.events`: `PartReady`,
`PartFailed`). An edit of the messages rebuilds the prompt in its own worker
(`rebuild_prompt`); an unload prepares the engine again (`_reload_engine`).
Workers only post (`post_record`); the handlers here (`apply_*`), on the UI
thread, write the request state.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from textual import work
from textual.app import App
from textual.worker import get_current_worker

from walkthrough.errors import WalkthroughError
from walkthrough.request import events, parts
from walkthrough.request.parts import Part

if TYPE_CHECKING:
    from walkthrough.inspect.card import ModelCard
    from walkthrough.inspect.gguf import GGUFFile
    from walkthrough.inspect.tokenizer import GGUFTokenizer

# seconds the loader waits for the File stage to be drawn before building the rest
FIRST_PAINT_WAIT = 2.0


class LoadsTheRequest(App):
    """Mixin of the app: the load, prompt and engine workers and the handlers of what they post."""

    def __init__(self) -> None:
        super().__init__()
        self._file_shown = threading.Event()
        # set when a newer rebuild replaces the one in flight
        self._prompt_cancel = threading.Event()
        # the messages changed while the load built the first prompt
        self._rebuild_after_load = False

    @work(thread=True, exclusive=True, group="load", name="load request")
    def load_request(self, spec: str | None, messages: list[dict[str, str]],
                     template_name: str | None, template_file: Path | None, engine: str,
                     max_memory: int | None = None, exact_products: bool = False) -> None:
        """Open the file, then build what the later stages need; each part is posted when built."""
        worker = get_current_worker()
        self.post_record(events.Progress("opening the file"))
        try:
            opened = parts.open_file(spec)
        except WalkthroughError as exc:
            self.post_record(events.LoadFailed(str(exc)))
            return
        except OSError as exc:
            self.post_record(events.LoadFailed(f"{exc.filename or spec}: {exc.strerror or exc}"))
            return
        self.post_record(events.PartReady(Part.FILE, opened))
        # Let the File stage paint before the heavier parts (tokenizer import and build) take the
        # CPU.
        self._file_shown.wait(timeout=FIRST_PAINT_WAIT)
        if worker.is_cancelled:
            return
        failed: dict[str, str] = {}
        tokenizer = self._build(Part.TOKENIZER, lambda: parts.build_tokenizer(opened.file), failed)
        self._build_prompt(opened, tokenizer, messages, template_name, template_file, failed)
        if worker.is_cancelled:
            return
        self._build(Part.ENGINE, lambda: parts.prepare_engine(engine, opened.file, opened.card,
                                                               max_memory, exact_products), failed)
        self.post_record(events.PartReady(Part.RUN, None))
        self.post_record(events.Progress(""))

    def _build_prompt(self, opened: parts.OpenedFile, tokenizer: GGUFTokenizer | None,
                      messages: list[dict[str, str]],
                      template_name: str | None, template_file: Path | None, failed: dict[str, str],
                      cancel: threading.Event | None = None) -> None:
        """(Worker) render the template and tokenize it, posting each part; setting `cancel` stops a
        render."""
        rendered = self._build(Part.TEMPLATE, lambda: parts.render_template(
            opened.file, tokenizer, messages, template_name=template_name,
            template_file=template_file, cancel=cancel), failed)

        def tokens():
            if tokenizer is None:
                raise parts.missing(Part.TOKENIZER, failed, "the file has no usable tokenizer")
            if rendered is None:
                raise parts.missing(Part.TEMPLATE, failed, "the file has no chat template")
            return parts.build_tokens(tokenizer, rendered.source, messages,
                                      parts.template_origin(opened.file, template_file), cancel)

        self._build(Part.TOKENS, tokens, failed)

    def _build(self, part: Part, build: Callable[[], Any], failed: dict[str, str]) -> Any:
        """(Worker) build one part and post it, or post why it cannot be built; returns the value or
        None."""
        self.post_record(events.Progress(f"preparing {part}"))
        try:
            value = build()
        except WalkthroughError as exc:
            failed[part] = str(exc)
        except Exception as exc:  # noqa: BLE001 - a bug in one part must not take the stage down
            failed[part] = f"internal error (a bug): {type(exc).__name__}: {exc}"
        else:
            self.post_record(events.PartReady(part, value))
            return value
        self.post_record(events.PartFailed(part, failed[part]))
        return None

    def apply_progress(self, message: events.Progress) -> None:
        self.status = f"{message.what}…" if message.what else ""

    def apply_part_ready(self, message: events.PartReady) -> None:
        if message.part is Part.RUN:
            self.start_run()
            return
        self.state.store(message.part, message.value)
        if message.part is Part.FILE:
            self.call_after_refresh(self._file_drawn)
        self._prompt_settled(message.part)

    def _file_drawn(self) -> None:
        """The first screen shows the file's numbers: note when (for the startup benchmark); --exit
        stops here."""
        self.first_screen_at = time.time()
        self._file_shown.set()
        if self.exit_at_end and not self.autoplay:
            self.exit(0)

    def apply_part_failed(self, message: events.PartFailed) -> None:
        self.state.mark_unavailable(message.part, message.reason)
        self._prompt_settled(message.part)

    def _prompt_settled(self, part: Part) -> None:
        """A prompt's tokens arrived (or could not be built): an edit made while the load built the
        first prompt, from the messages as they were, is rebuilt now (`rebuild_prompt`)."""
        if part is Part.TOKENS and self._rebuild_after_load:
            self._rebuild_after_load = False
            self.rebuild_prompt()

    def apply_load_failed(self, message: events.LoadFailed) -> None:
        self.error = message.error
        self.exit(return_code=2)

    @work(thread=True, exclusive=True, group="engine", name="prepare the engine again")
    def _reload_engine(self, engine: str, file: GGUFFile, card: ModelCard,
                       max_memory: int | None = None, exact_products: bool = False) -> None:
        """(Worker) the model again; a newer unload cancels it, and then what it posts is dropped.
        Its own group: an unload while the request loads must not cancel the loading of the other
        parts."""
        self._build(Part.ENGINE, lambda: parts.prepare_engine(engine, file, card, max_memory, exact_products), {})
        self.post_record(events.PartReady(Part.RUN, None))
        self.post_record(events.Progress(""))

    def rebuild_prompt(self) -> None:
        """After an edit of the messages or a new template: re-render, re-tokenize and restart, in a
        worker."""
        state = self.state
        self.playing = False
        self.runs.stop()
        state.run_id += 1
        state.steps = ()
        state.finished = False
        if state.file is None:
            return
        if Part.TOKENS not in state.loaded and Part.TOKENS not in state.unavailable:
            # The load is still building the first prompt from the messages as they were (and the
            # tokenizer it needs): rebuild once its tokens arrive, or they would land after this
            # edit's and win.
            self._rebuild_after_load = True
            return
        opened = parts.OpenedFile(state.path, state.file, state.card)
        self._prompt_cancel.set()  # the rebuild this one replaces stops its render now
        self._prompt_cancel = threading.Event()
        self._rebuild_prompt(opened, state.tokenizer, list(state.messages), state.template_name,
                             state.template_file, dict(state.unavailable), self._prompt_cancel)

    @work(thread=True, exclusive=True, group="prompt", name="rebuild the prompt")
    def _rebuild_prompt(self, opened: parts.OpenedFile, tokenizer: GGUFTokenizer | None,
                        messages: list[dict[str, str]], template_name: str | None,
                        template_file: Path | None, failed: dict[str, str],
                        cancel: threading.Event) -> None:
        """(Worker) a newer edit cancels it and sets `cancel` (its render is killed); then what it
        posts is dropped (its prompt is an old one)."""
        self.post_record(events.Progress("rendering and tokenizing"))
        self._build_prompt(opened, tokenizer, messages, template_name, template_file, failed,
                           cancel)
        self.post_record(events.PartReady(Part.RUN, None))
        self.post_record(events.Progress(""))

