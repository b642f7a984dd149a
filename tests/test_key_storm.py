"""A seeded key storm with resizes, delivered the way the terminal driver delivers keys, then q ends the app.

Keys and resizes reach the app through `asyncio.run_coroutine_threadsafe(app._post_message(...))`
from another thread, as Textual's driver does, without waiting for the app to
follow (Pilot's `press` waits after every key, which no storm does). Then escape
and q: the app must have ended, its shutdown done, within `QUIT_SECONDS` of the
q (the check issue 20 asks for, with a fixed seed; many seeds in a real
terminal are tests/bench/key_storm.py's job). No key is dropped on the way:
`vv` on the Chat stage moves two views.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time

import pytest
from app_support import SIZES as PILOT_SIZES
from app_support import press_stage, settle
from textual import events
from textual.geometry import Size

from walkthrough.app import make_app
from walkthrough.screens.typeahead import Typeahead, split_chord

SEED = 20
N_KEYS = 1000
RESIZE_EVERY = 25
QUIT_SECONDS = 2.0  # issue 20: q ends the app within 2 s of a 1,000-key storm
# The README's key table: stage keys, passes, restart, chunk, sampling knobs, Decode view keys.
KEYS = [("space", " "), ("enter", "\r"), ("r", "r"), ("c", "c"), ("n", "n"), ("p", "p"),
        *((d, d) for d in "12345678"), *((k, k) for k in "tTkKoOmMsvih"),
        ("left_square_bracket", "["), ("right_square_bracket", "]"), ("comma", ","), ("full_stop", "."),
        ("left", None), ("right", None)]
SIZES = [(80, 24), (120, 40), (60, 20), (100, 30), (200, 50), (81, 25)]
HANG_GUARD_SECONDS = 120


def _storm(app, loop, rng: random.Random) -> None:
    def deliver(message) -> None:
        asyncio.run_coroutine_threadsafe(app._post_message(message), loop)

    for i in range(N_KEYS):
        deliver(events.Key(*rng.choice(KEYS)))
        if i % RESIZE_EVERY == RESIZE_EVERY - 1:
            size = Size(*rng.choice(SIZES))
            deliver(events.Resize(size, size))
        time.sleep(rng.uniform(0, 0.004))


async def test_q_ends_the_app_within_2_s_after_a_key_storm():
    app = make_app(None, None)
    loop = asyncio.get_running_loop()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        storm = threading.Thread(target=_storm, args=(app, loop, random.Random(SEED)))
        storm.start()
        while storm.is_alive():
            await asyncio.sleep(0.05)
        await app._post_message(events.Key("escape", "\x1b"))
        await asyncio.sleep(0.3)
        quit_at = time.monotonic()
        await app._post_message(events.Key("q", "q"))
        waited = 0.0
        while app.return_code is None and waited < HANG_GUARD_SECONDS:
            await asyncio.sleep(0.05)
            waited += 0.05
    ended = time.monotonic() - quit_at
    print(f"q -> app ended in {ended:.2f} s (keys still waiting skipped: {app.typeahead.quitting})")
    assert app.return_code == 0, "q did not end the app after the storm"
    assert ended < QUIT_SECONDS, f"q ended the app {ended:.2f} s after it was typed"


def test_only_a_quit_key_goes_ahead_of_waiting_keys():
    typeahead = Typeahead()
    key = events.Key("space", " ")
    quit_key = events.Key("q", "q")
    assert not typeahead.posted(quit_key, lambda: False, lambda: False)  # nothing waits: q is the stage's key
    assert typeahead.handled(quit_key)
    assert not typeahead.posted(key, lambda: False, lambda: False)
    assert not typeahead.posted(quit_key, lambda: True, lambda: False)  # a letter in a text field
    assert typeahead.handled(key) and typeahead.handled(quit_key)  # both handled, in order
    assert not typeahead.posted(key, lambda: False, lambda: False)
    assert typeahead.posted(quit_key, lambda: False, lambda: False)  # a key waits, q quits: it goes first
    assert not typeahead.handled(key)  # the key that waited is not handled: the app is ending
    assert not typeahead.handled(events.Resize(Size(80, 24), Size(80, 24)))
    calm = Typeahead()
    assert calm.posted(quit_key, lambda: False, lambda: True)  # keys passed on to the screen still wait there


def test_escape_and_a_letter_read_as_one_chord_are_two_keys():
    chord = events.Key("alt+q", "q")  # what Textual's XTermParser makes of "\x1bq" read at once
    assert [(key.key, key.character) for key in split_chord(chord)] == [("escape", "\x1b"), ("q", "q")]
    assert split_chord(events.Key("q", "q")) is None
    assert split_chord(events.Key("alt+left", None)) is None


@pytest.mark.parametrize("size", PILOT_SIZES.values())
async def test_vv_typed_at_once_on_the_chat_stage_moves_two_views(size):
    app = make_app(None, None)
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        await press_stage(pilot, "template")
        await settle(pilot)
        tabs = app.screen.query_one("TabbedContent")
        assert tabs.active == "messages"
        app.post_message(events.Key("v", "v"))  # both queued before either is handled, as a fast typist's are
        app.post_message(events.Key("v", "v"))
        await settle(pilot)
        assert tabs.active == "rendered"
        assert app.focused in tabs.active_pane.query("*")  # up/down scroll the view shown


def test_q_after_an_escape_still_waiting_quits_from_a_text_field():
    typeahead = Typeahead()
    typing = lambda: True  # focus is in the message editor
    assert not typeahead.posted(events.Key("x", "x"), typing, lambda: False)
    assert not typeahead.posted(events.Key("q", "q"), typing, lambda: False)  # a letter: no escape waits
    assert not typeahead.posted(events.Key("escape", "\x1b"), typing, lambda: False)
    assert typeahead.posted(events.Key("q", "q"), typing, lambda: False)  # the escape leaves the field: quit
    handled = Typeahead()
    handled.posted(events.Key("escape", "\x1b"), typing, lambda: False)
    handled.handled(events.Key("escape", "\x1b"))
    handled.posted(events.Key("x", "x"), typing, lambda: False)
    assert not handled.posted(events.Key("q", "q"), typing, lambda: False)  # that escape was handled already


async def _chat_stage(pilot) -> None:
    await settle(pilot)
    await press_stage(pilot, "template")
    await settle(pilot)


@pytest.mark.parametrize("size", PILOT_SIZES.values())
async def test_enter_then_a_dialog_key_typed_at_once_never_stacks_the_editor_over_the_dialog(size):
    """Enter on a message posts its selection after the key; `c` typed behind it opens the four calls first.
    The selection then reaches a stage that is covered: it must not open the editor over the four calls
    (tests/bench/key_storm.py seed 108 did, and the storm's closing escape and q went into its text)."""
    app = make_app(None, None)
    async with app.run_test(size=size) as pilot:
        await _chat_stage(pilot)
        for key, char in (("enter", "\r"), ("s", "s"), ("c", "c")):  # queued before any is handled
            app.post_message(events.Key(key, char))
        await settle(pilot)
        stack = [type(s).__name__ for s in app.screen_stack]
        # in order (the editor took s and c as text) or the selection dropped; never both dialogs
        assert stack in (["TemplateScreen", "MessageEditor"], ["TemplateScreen", "FourCallsScreen"]), stack


@pytest.mark.parametrize("size", PILOT_SIZES.values())
async def test_enter_then_a_stage_key_typed_at_once_opens_no_editor_over_the_next_stage(size):
    app = make_app(None, None)
    async with app.run_test(size=size) as pilot:
        await _chat_stage(pilot)
        app.post_message(events.Key("enter", "\r"))
        app.post_message(events.Key("n", "n"))
        await settle(pilot)
        stack = [type(s).__name__ for s in app.screen_stack]
        assert stack in (["TemplateScreen", "MessageEditor"], ["TokensScreen"]), stack


@pytest.mark.parametrize("size", PILOT_SIZES.values())
async def test_escape_then_q_typed_at_once_in_the_editor_closes_it_and_quits(size):
    """The storm's last keys: escape (the editor's cancel) and q. The editor's text field takes q as a
    letter if the escape's binding has not run yet; it must run first, in order."""
    app = make_app(None, None)
    async with app.run_test(size=size) as pilot:
        await _chat_stage(pilot)
        await pilot.press("enter")
        await settle(pilot)
        assert type(app.screen).__name__ == "MessageEditor"
        before = app.screen.query_one("#editor-content").text
        app.post_message(events.Key("escape", "\x1b"))
        app.post_message(events.Key("q", "q"))
        for _ in range(100):
            if app.return_code is not None:
                break
            await pilot.pause(0.02)
        assert app.return_code == 0, "escape then q left the app running"
        assert app.state.messages[0]["content"] == before  # the cancelled edit changed nothing
