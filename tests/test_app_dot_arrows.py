"""Pilot tests of the attention view's two arrows (v): the cursor's query and a key, with the run's score."""

from __future__ import annotations

import re

import pytest
from app_support import SIZES, app_for, press_stage, settle, shown_text

from walkthrough.inspect.locate import BUNDLED_MODEL
from walkthrough.screens.attention import AttentionScreen


@pytest.mark.app
@pytest.mark.parametrize("size", SIZES.values(), ids=SIZES.keys())
async def test_arrows_show_the_runs_score_for_the_cursor_and_the_key_it_weighted_most(size):
    app = app_for(BUNDLED_MODEL)
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        await press_stage(pilot, "prefill", "space")
        await settle(pilot)
        await pilot.press("a", "v")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, AttentionScreen) and screen.vectors
        amap, qk = app.state.attention_map(), app.state.query_keys()
        row = screen.cursor
        layer, head = screen.at_layer, screen.at_head
        for rank in range(2):  # the key weighted most, then (right) the next
            key, weight = amap.top(layer, head, row, rank + 1)[rank]
            pair = qk.pair(layer, head, row, key)
            text = shown_text(app)
            assert f"key {key} " in text and f"weighted #{rank + 1}" in text
            assert "principal directions" in text and "approximation" in text
            shown = float(re.search(r"= (-?[\d.e+-]+) \(the run's", text).group(1))
            assert shown == pytest.approx(pair.score, rel=1e-3)
            assert f"weight {weight:.1%}" in text
            assert f"{pair.projected_score:.4g}" in text.split("projected")[1]
            assert "q" in text and "k" in text and "u1" in text and "u2" in text
            await pilot.press("right")
            await pilot.pause()
        await pilot.press("v")
        await pilot.pause()
        assert "attends most to" in shown_text(app)
