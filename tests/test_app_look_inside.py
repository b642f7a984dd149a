"""Pilot tests of the two looks inside the run: a stored block from File -> Tensors, and the attention matrix."""

from __future__ import annotations

import numpy as np
import pytest
from app_support import (
    SIZES,
    app_for,
    open_tensor_table,
    press_stage,
    settle,
    shown_text,
    widget_text,
)
from textual.widgets import Static

from walkthrough.inspect.block import read_block
from walkthrough.inspect.gguf import open_gguf
from walkthrough.inspect.locate import BUNDLED_MODEL
from walkthrough.screens.attention import AttentionScreen
from walkthrough.screens.block import BlockScreen


@pytest.mark.parametrize("size", SIZES.values(), ids=SIZES.keys())
async def test_block_view_from_the_tensor_table(size):
    app = app_for(BUNDLED_MODEL)
    async with app.run_test(size=size) as pilot:
        table = await open_tensor_table(pilot)
        name = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, BlockScreen)
        with open_gguf(BUNDLED_MODEL) as f:
            first, second = read_block(f, name, 0), read_block(f, name, 1)
        text = shown_text(app)
        assert f"Block 0 of {name}" in text and first.bits.explain()[:30] in text
        view = app.screen.query_one("#block-view", Static)
        as_laid_out = widget_text(view, width=view.content_region.width)  # the width the box gives it
        assert "whole file" in as_laid_out and "…" not in as_laid_out  # no table cut at 80 columns
        await pilot.press("right")
        await pilot.pause()
        assert f"Block 1 of {name}" in shown_text(app) and second.index == 1
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, BlockScreen)


@pytest.mark.parametrize("size", SIZES.values(), ids=SIZES.keys())
async def test_attention_matrix_after_prefill_and_a_decode_pass(size, fixtures_dir):
    path = fixtures_dir / "reference" / "ref-qwen2moe-f32.gguf"
    app = app_for(path)
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        await press_stage(pilot, "prefill", "space")
        await settle(pilot)
        prefill = app.state.attention_map()
        n = prefill.length
        assert n == len(app.state.prompt_ids)
        await press_stage(pilot, "decode", "space")
        await settle(pilot)
        await pilot.press("a")
        await pilot.pause()
        assert isinstance(app.screen, AttentionScreen)
        amap = app.state.attention_map()
        assert amap.length == n + 1
        np.testing.assert_array_equal(amap.layers[0][:, :n, :n], prefill.layers[0])  # earlier rows unchanged
        text = shown_text(app)
        assert "layer 0" in text and f"{n + 1} positions" in text and "attends most to" in text
        top_pos, _ = amap.top(0, 0, n, 1)[0]
        assert f"{top_pos:>4}" in text.split("attends most to")[1]
        await pilot.press("right_square_bracket", "full_stop", "up")
        await pilot.pause()
        screen = app.screen
        assert (screen.at_layer, screen.at_head, screen.cursor) == (1, 1, n - 1)
        assert "head 1" in shown_text(app)
