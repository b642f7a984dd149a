"""Helpers for the app's Pilot tests: build the app on a file, wait for its workers, read the screen as text."""

from __future__ import annotations

import io
import re
import sys
import threading
from collections import Counter
from collections.abc import Callable
from html import unescape
from pathlib import Path
from typing import Any

from conftest import FIXTURES_DIR
from rich.cells import cell_len
from rich.console import Console
from rich.text import Text

from walkthrough import textual_private
from walkthrough.app import WalkthroughApp, make_app
from walkthrough.request import stages
from walkthrough.screens.messages import Posted

SIZES = {"small": (80, 24), "large": (120, 40)}
# The request most app tests walk: one question about the record, on a small reference model from
# ../shared/fixtures/reference (qwen2moe: routed and shared experts, quick on the numpy engine).
MODEL = "ref-qwen2moe-f32.gguf"
MESSAGES = [{"role": "user", "content": "What does the record say about warfarin?"}]


def app_for(path, messages=None, **options) -> WalkthroughApp:
    """The app on a model file, with a message list (default: one user message)."""
    chat = messages if messages is not None else [{"role": "user", "content": "hello"}]
    return make_app(str(path), chat, **options)


def reference_app(messages: list[dict[str, Any]] | None = None, **options) -> WalkthroughApp:
    """The app on MODEL with MESSAGES, or other messages (options as `make_app` takes them)."""
    return app_for(FIXTURES_DIR / "reference" / MODEL, messages or MESSAGES, **options)


def posted(seen: list, kind: type) -> list:
    """The records of `kind` (`walkthrough.request.events`) among the messages a `message_hook`
    saw."""
    return [m.record for m in seen if isinstance(m, Posted) and isinstance(m.record, kind)]


def spy_posts(app: WalkthroughApp, *kinds: type) -> list[tuple[Any, bool]]:
    """(worker, cancelled when it posted) for every record of `kinds` the app's jobs post from now
    on."""
    seen: list[tuple[Any, bool]] = []
    real = app.post_message

    def spy(message) -> bool:
        if isinstance(message, Posted) and isinstance(message.record, kinds):
            seen.append((message.worker, message.worker.is_cancelled))
        return real(message)

    app.post_message = spy
    return seen


async def settle(pilot) -> None:
    """Wait until every worker is done and the screen has caught up."""
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()
    for _ in range(300):  # results are posted before their worker ends: wait until they are handled
        if not getattr(pilot.app, "stepping", False) and not textual_private.pending(pilot.app):
            break
        await pilot.pause(0.01)
    await pilot.pause()


async def open_tensor_table(pilot):
    """Settle, switch the File stage to its tensors view (v) and return the tensor table."""
    from textual.widgets import DataTable

    await settle(pilot)
    await pilot.press("v")
    await pilot.pause()
    return pilot.app.screen.query_one("#tensor-table", DataTable)


def stage_key(stage_id: str) -> str:
    """The key that opens a stage, from the stage list (its number there): tests name the stage."""
    number = stages.number(stage_id)
    if number > stages.MAX_STAGES:
        raise ValueError(f"stage {stage_id!r} is number {number}: no digit key reaches it")
    return str(number)


async def press_stage(pilot, stage_id: str, *then: str) -> None:
    """Open a stage by its id ("decode", "speculate"...) with its key, then press `then`."""
    await pilot.press(stage_key(stage_id), *then)


async def play_the_answer(pilot, polls: int = 200) -> None:
    """The Decode stage, enter (play), then wait until the run has finished (`polls` x 0.05 s)."""
    await press_stage(pilot, "decode", "enter")
    for _ in range(polls):
        await pilot.pause(0.05)
        if pilot.app.state.finished:
            break


async def play_to_the_end(app: WalkthroughApp, size: tuple[int, int], timeout: float = 60.0) -> None:
    """Run an app made with autoplay and exit_at_end until it exits (or `timeout` seconds pass)."""
    async with app.run_test(size=size) as pilot:
        waited = 0.0
        while app.return_code is None and waited < timeout:
            await pilot.pause(0.1)
            waited += 0.1


def hold_passes(app: WalkthroughApp) -> tuple[threading.Event, threading.Event]:
    """Make each pass wait, once started, until `release` is set (at most 10 s): returns (release, started)."""
    release, started = threading.Event(), threading.Event()
    real_pass = app.runs.next_pass

    def held_pass(*args, **kwargs):
        started.set()
        release.wait(10)
        return real_pass(*args, **kwargs)

    app.runs.next_pass = held_pass
    return release, started


class LayerGate:
    """The engine's layer function (`model.block`) wrapped: counts the layers each worker finished, and holds
    the first worker that `hold` picks at the end of its layer `at` until `release` is set (at most 10 s).

    `holding` is set once that worker waits; `held` is it. Layers run outside a worker count under None.
    """

    def __init__(self, monkeypatch, hold: Callable[[Any], bool] = lambda worker: True, at: int = 1) -> None:
        from textual.worker import NoActiveWorker, get_current_worker

        from walkthrough.engine.glassbox import model

        real = model.block
        self.ran: Counter = Counter()
        self.held = None
        self.thread: int | None = None  # the held worker's thread
        self.holding, self.release = threading.Event(), threading.Event()
        lock = threading.Lock()

        def gated(*args, **kwargs):
            out = real(*args, **kwargs)
            try:
                worker = get_current_worker()
            except NoActiveWorker:
                worker = None
            with lock:
                self.ran[worker] += 1
                now = self.held is None and worker is not None and hold(worker) and self.ran[worker] >= at
                if now:
                    self.held, self.thread = worker, threading.get_ident()
            if now:
                self.holding.set()
                self.release.wait(10)
            return out

        monkeypatch.setattr(model, "block", gated)

    async def wait_held(self, pilot, polls: int = 1000) -> None:
        """Let the app run until a worker is held (or `polls` x 0.01 s passed)."""
        for _ in range(polls):
            if self.holding.is_set():
                return
            await pilot.pause(0.01)
        raise AssertionError("no worker reached the layer it is held at")

    async def wait_returned(self, pilot) -> None:
        """Release the held worker and let the app run until its work returned (`work_returned`)."""
        self.release.set()
        await work_returned(pilot, self.thread)


async def work_returned(pilot, thread: int | None, polls: int = 1000) -> None:
    """Let the app run until the thread worker running on `thread` returned from its work (the thread left
    the call Textual runs a thread worker's work in, `run_callable`), or `polls` x 0.01 s passed.

    A cancelled worker's task ends at once, while its thread goes on: this waits for the thread."""
    for _ in range(polls):
        frame = sys._current_frames().get(thread)
        while frame is not None and frame.f_code.co_name != "run_callable":
            frame = frame.f_back
        if frame is None:
            return
        await pilot.pause(0.01)
    raise AssertionError("the worker's work did not return")


def screen_text(app: WalkthroughApp) -> str:
    """What the terminal shows now, as plain text (one line per row), read from the app's SVG screenshot.

    For tests about the picture itself (what reaches the terminal, where a line wraps, what is
    below the fold); what a stage says is better read from its widgets (`shown_text`)."""
    return svg_text(app.export_screenshot())


def shown_text(app: WalkthroughApp) -> str:
    """What the screens on view say, read from their widgets' content, a widget a line.

    The screens on view are the top one and, under a modal one (a dialog, the glossary), those
    below it down to the first full screen. A widget counts when it and its ancestors are displayed
    and visible; a widget scrolled out of its container's view still counts (this reads content,
    not a picture). Text is each widget's content laid out wide enough that nothing wraps
    (`widget_text`), a table's column labels and every row of its cells, an option list's options,
    an input's value, a text area's text.
    """
    from textual.screen import ModalScreen
    from textual.widgets import DataTable, Input, OptionList, Static, TextArea

    stack = list(app.screen_stack)
    base = max((i for i, screen in enumerate(stack) if not isinstance(screen, ModalScreen)),
               default=0)
    parts: list[str] = []
    for screen in stack[base:]:
        for widget in screen.walk_children(with_self=False):
            if not all(node.display and node.visible for node in (widget, *widget.ancestors)
                       if node is not screen and node is not app):
                continue
            if isinstance(widget, DataTable):
                parts.append(" | ".join(str(column.label) for column in widget.columns.values()))
                parts += [" | ".join(_plain(cell) for cell in widget.get_row_at(row))
                          for row in range(widget.row_count)]
            elif isinstance(widget, OptionList):
                parts += [_plain(widget.get_option_at_index(i).prompt)
                          for i in range(widget.option_count)]
            elif isinstance(widget, Input):
                parts.append(widget.value)
            elif isinstance(widget, TextArea):
                parts.append(widget.text)
            elif isinstance(widget, Static):
                parts.append(widget_text(widget))
            elif not widget.children:
                parts.append(_plain(widget.render()))
    return "\n".join(part.rstrip("\n") for part in parts) + "\n"


def _plain(renderable: Any) -> str:
    """Any Rich renderable or Textual content as plain text, laid out 400 cells wide."""
    console = Console(width=400, file=io.StringIO(), record=True, color_system=None,
                      force_terminal=False)
    console.print(renderable)
    return console.export_text(styles=False).rstrip("\n")


def copy_gguf(source: Path, target: Path, extra: dict[str, str]) -> Path:
    """Write a copy of a GGUF file (every key and tensor, re-assembled by `gguf_builder`) with extra string keys."""
    from gguf.constants import GGUFValueType as V
    from gguf_builder import rewrite_gguf

    return rewrite_gguf(source, target, {key: (V.STRING, text) for key, text in extra.items()})


_SVG_RUN = re.compile(r'<text[^>]*? x="([\d.]+)" y="[\d.]+" textLength="([\d.]+)"[^>]*?-line-(\d+)\)"[^>]*>([^<]*)</text>')


def svg_text(svg: str) -> str:
    """The characters of an SVG screenshot as plain text, one line per terminal row.

    Rich writes one <text> per run of same-styled cells (blank runs are left out), with its row in the
    clip path's name, its x position, and its width in `textLength`; the cell width is textLength over
    the run's cell count, so each run is put back at its column.
    """
    runs = [(int(row), float(x), float(length), unescape(text).replace("\xa0", " ").rstrip("\n"))
            for x, length, row, text in _SVG_RUN.findall(svg)]
    runs = [run for run in runs if run[3]]
    if not runs:
        return ""
    cell = next(length / cell_len(text) for _, _, length, text in runs if cell_len(text))
    lines: dict[int, Text] = {}
    for row, x, _, text in runs:
        line = lines.setdefault(row, Text())
        column = round(x / cell)
        if line.cell_len < column:
            line.append(" " * (column - line.cell_len))
        line.append(text)
    return "\n".join(lines[row].plain if row in lines else "" for row in range(max(lines) + 1)) + "\n"


def widget_text(widget, width: int = 400) -> str:
    """A Static's content as plain text, laid out wide enough that nothing wraps."""
    console = Console(width=width, file=io.StringIO(), record=True, color_system=None, force_terminal=False)
    console.print(widget.content)
    return console.export_text(styles=False)
