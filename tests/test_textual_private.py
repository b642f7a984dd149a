"""The private Textual parts the app reads exist on the Textual installed, and nothing breaks
without them.

An upgrade that removed or renamed one fails here (then walkthrough/textual_private.py needs a
look); on another major version the helpers fall back to plain Textual (checked by pretending to be
one).
"""

from __future__ import annotations

import re
from pathlib import Path

import textual
from textual import events
from textual.app import App

from walkthrough import textual_private

ROOT = Path(__file__).resolve().parents[1]


def test_the_installed_textual_is_the_major_version_pinned_and_read():
    assert textual_private.major(textual.__version__) == textual_private.KNOWN_MAJOR
    assert textual_private.KNOWN
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    [pin] = re.findall(r'"(textual\s*[<>=][^"]*)"', pyproject)  # the dependency, not textual-serve
    assert f"<{textual_private.KNOWN_MAJOR + 1}" in pin.replace(" ", "")


def test_version_numbers_are_read_by_their_major():
    assert textual_private.major("8.2.8") == 8
    assert textual_private.major("10.0") == 10
    assert textual_private.major("dev") is None


async def test_each_private_part_is_there_on_a_running_app():
    app = App()
    async with app.run_test(size=(40, 10)) as pilot:
        await pilot.pause()
        assert textual_private.driver(app) is not None
        assert not textual_private.pending(app.screen)
        app.screen.post_message(events.Key("x", "x"))  # not handled until the loop runs
        assert textual_private.pending(app.screen)
        other = App().get_default_screen()
        other._css_update_count = -1
        textual_private.mark_styled(other, app)
        assert other._css_update_count == app._css_update_count


async def test_on_another_major_version_the_helpers_fall_back_to_plain_textual(monkeypatch):
    monkeypatch.setattr(textual_private, "KNOWN", False)
    app = App()
    async with app.run_test(size=(40, 10)) as pilot:
        await pilot.pause()
        # so a quit closes the app in order (app_quit.py)
        assert textual_private.driver(app) is None
        app.screen.post_message(events.Key("x", "x"))
        assert not textual_private.pending(app.screen)  # so q waits its turn like any key
        other = App().get_default_screen()
        other._css_update_count = -1
        textual_private.mark_styled(other, app)
        assert other._css_update_count == -1
