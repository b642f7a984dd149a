"""Whitespace-only tokens in the app: shown as the CLI shows them (␣ ↵ →), never as blank cells.

The bundled tiny model's default answer has a lone space token early on ("lines", " ", "10"). These
Pilot tests step to it and read the Decode line, the live panel's candidates, the Sampling table, the
Decode attention table and the attention view: every token there is `textsafe.token_text` of its
piece (the one path the CLI's `tokenize` and `trace` use too), and hostile text stays escaped.
"""

from __future__ import annotations

import pytest
from app_support import SIZES, settle, stage_key, widget_text

from walkthrough.app import make_app
from walkthrough.textsafe import token_label, token_text, visible

DECODE, SAMPLING = (stage_key(stage) for stage in ("decode", "sampling"))
MAX_PASSES = 40  # passes tried before giving up on a whitespace token (prefill chunks and decode)


def test_token_text_signs_whitespace_and_keeps_escapes():
    assert token_text(" ") == "\u2423" and token_text("\n") == "\u21b5" and token_text("\t") == "\u2192"
    assert token_text(" with") == "\u2423with"
    hostile = "\x1b]0;pwned\x07 \n"
    shown = token_text(hostile)
    assert shown == visible("\x1b]0;pwned\x07") + "\u2423\u21b5"  # signs first, then every control escaped
    assert shown.isprintable()
    assert token_text("\u202e" + "x" * 20, limit=5) == "\\u202exxx\u2026"  # cut before escaping, never mid-escape
    assert token_label("[bold] ").plain == "[bold]\u2423"  # no markup read


async def _step_to_whitespace(pilot) -> int:
    """Space until a decode pass chooses a whitespace-only token; its id."""
    app = pilot.app
    for _ in range(MAX_PASSES):
        await pilot.press("space")
        await settle(pilot)
        step = app.state.last_step
        if step.phase == "decode" and step.chosen is not None and app.state.piece(step.chosen).isspace():
            return step.chosen
    raise AssertionError(f"no whitespace-only token chosen in {MAX_PASSES} passes")


def _marked_row(text: str) -> str:
    return next(line for line in text.splitlines() if "\u25b6" in line)


@pytest.mark.parametrize("size", SIZES.values(), ids=SIZES.keys())
async def test_whitespace_tokens_are_signed_on_every_stage(size):
    app = make_app()
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        await pilot.press(DECODE)
        await settle(pilot)
        token = await _step_to_whitespace(pilot)
        sign = token_text(app.state.piece(token))
        assert sign and not sign.isspace()
        line = widget_text(app.screen.query_one("#decode-token"))
        assert f"-> chose {sign}" in line
        assert sign in _marked_row(widget_text(app.screen.query_one("#live")))

        await pilot.press(SAMPLING)
        await settle(pilot)
        table = widget_text(app.screen.query_one("#sampling-table"))
        assert _marked_row(table).split()[1] == sign
        assert f"takes the most likely token: {sign}" in table  # the default run is greedy

        await pilot.press(DECODE)
        await pilot.press("space")  # the whitespace token goes in
        await settle(pilot)
        assert f"fed {sign} -> chose" in widget_text(app.screen.query_one("#decode-token"))
        step = app.state.last_step
        layer = next(t for t in step.layers if t.attention is not None)  # the view opens on its first layer, head 1
        tokens = app.state.session_tokens(layer.attention.shape[1])
        detail = widget_text(app.screen.query_one("#decode-attention")).splitlines()
        title = next(i for i, text in enumerate(detail) if text.startswith("attention layer"))
        for row, (pos, _) in zip(detail[title + 2:], layer.most_attended(0, 8)):
            cells = row.split()
            assert cells[0] == str(pos) and cells[1] == token_text(app.state.piece(tokens[pos]))

        await pilot.press("a")
        await settle(pilot)
        view = widget_text(app.screen.query_one("#attention-view"))
        assert f"token {step.start} {sign} attends most to:" in view
