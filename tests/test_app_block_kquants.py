"""Pilot test of the block view's k-quant rows on a 32-value block: 256 real values of the tensor, said which."""

from __future__ import annotations

import pytest
from app_support import SIZES, app_for, open_tensor_table, shown_text

from walkthrough.inspect.block import read_block
from walkthrough.inspect.gguf import open_gguf
from walkthrough.inspect.locate import BUNDLED_MODEL
from walkthrough.inspect.requant import round_stored_block
from walkthrough.screens.block import BlockScreen


@pytest.mark.app
@pytest.mark.parametrize("size", SIZES.values(), ids=SIZES.keys())
async def test_k_quant_rows_show_on_a_32_value_block(size):
    app = app_for(BUNDLED_MODEL)
    async with app.run_test(size=size) as pilot:
        table = await open_tensor_table(pilot)
        name = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, BlockScreen)
        with open_gguf(BUNDLED_MODEL) as f:
            block = read_block(f, name, 0)
            rounds = {r.qtype.name: r for r in round_stored_block(f, block)}
        assert block.block_size < 256
        text = shown_text(app)
        for qtype in ("Q6_K", "Q5_K", "Q4_K", "Q3_K", "Q2_K"):
            line = next(row for row in text.splitlines() if row.strip().startswith(qtype + " "))
            assert f"{rounds[qtype].rms:.2e}" in line, line
        flat = " ".join(text.split())  # the table's caption wraps at the table's width
        assert "their blocks hold 256 values" in flat and rounds["Q6_K"].window.describe() in flat
