"""A seeded key storm with resizes, delivered the way the terminal driver delivers keys, then q ends the app.

Keys and resizes reach the app through `asyncio.run_coroutine_threadsafe(app._post_message(...))`
from another thread, as Textual's driver does, without waiting for the app to
follow (Pilot's `press` waits after every key, which no storm does). The test
asserts that `q` ends the app (a hang guard, not a speed target: the timing is
tests/bench/key_storm.py's job, in a real terminal, with many seeds).
"""

from __future__ import annotations

import asyncio
import random
import threading
import time

import pytest
from app_support import SIZES as PILOT_SIZES
from app_support import settle
from textual import events
from textual.geometry import Size

from walkthrough.app import make_app
from walkthrough.screens import stages
from walkthrough.screens.typeahead import KEEP_STALE, STALE_SECONDS, Typeahead

SEED = 20
N_KEYS = 500
RESIZE_EVERY = 25
# The README's key table: stage keys, passes, restart, chunk, sampling knobs, Decode view keys.
KEYS = [("space", " "), ("enter", "\r"), ("r", "r"), ("c", "c"), ("n", "n"), ("p", "p"),
        *((d, d) for d in "12345678"), *((k, k) for k in "tTkKoOmMs"),
        ("left_square_bracket", "["), ("right_square_bracket", "]"), ("comma", ","), ("full_stop", ".")]
SIZES = [(80, 24), (120, 40), (60, 20), (100, 30)]
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


async def test_q_ends_the_app_after_a_key_storm():
    app = make_app(None, None)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        loop = asyncio.get_running_loop()
        storm = threading.Thread(target=_storm, args=(app, loop, random.Random(SEED)))
        storm.start()
        while storm.is_alive():
            await asyncio.sleep(0.05)
        asyncio.run_coroutine_threadsafe(app._post_message(events.Key("escape", "\x1b")), loop)
        asyncio.run_coroutine_threadsafe(app._post_message(events.Key("q", "q")), loop)
        waited = 0.0
        while app.return_code is None and waited < HANG_GUARD_SECONDS:
            await asyncio.sleep(0.1)
            waited += 0.1
        assert app.return_code == 0, "q did not end the app after the storm"


def test_only_a_long_run_of_stale_keys_is_dropped():
    def key(name: str, age: float) -> events.Key:
        event = events.Key(name, name)
        event.time -= age
        return event

    typeahead = Typeahead()
    stale = [typeahead.drop(key("space", STALE_SECONDS)) for _ in range(KEEP_STALE + 3)]
    assert stale == [False] * KEEP_STALE + [True] * 3
    assert not typeahead.drop(key("q", 10 * STALE_SECONDS))  # a quit key is never dropped
    assert not typeahead.drop(key("space", 0.0))  # a fresh key is handled and ends the run
    assert not typeahead.drop(key("space", STALE_SECONDS))
    assert not typeahead.drop(events.Resize(Size(80, 24), Size(80, 24)))


@pytest.mark.parametrize("size", PILOT_SIZES.values())
async def test_vv_typed_at_once_on_the_chat_stage_moves_two_views(size):
    app = make_app(None, None)
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        await pilot.press(str(stages.number("template")))
        await settle(pilot)
        tabs = app.screen.query_one("TabbedContent")
        assert tabs.active == "messages"
        app.post_message(events.Key("v", "v"))  # both queued before either is handled, as a fast typist's are
        app.post_message(events.Key("v", "v"))
        await settle(pilot)
        assert tabs.active == "rendered"
        assert app.focused in tabs.active_pane.query("*")  # up/down scroll the view shown
