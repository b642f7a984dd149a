"""A pass's progress covers all of its work: after the last layer the stage bar says the output head is next
(and, on its first use, how much it decodes), and the words "layer N of M" are never cut, at any width.
"""

from __future__ import annotations

import io

import pytest
from app_support import app_for, posted, press_stage, settle
from conftest import FIXTURES_DIR
from rich.console import Console

from walkthrough.app_run import pass_status
from walkthrough.engine.glassbox.model import Model
from walkthrough.engine.glassbox.session import Session
from walkthrough.engine.sampler import Sampler, SamplerSettings
from walkthrough.inspect.gguf import open_gguf
from walkthrough.request import events
from walkthrough.screens.base import StageBar

LLAMA_Q4 = FIXTURES_DIR / "reference" / "ref-llama-q4_0.gguf"
WIDTHS = [(80, 24), (100, 30), (120, 40), (200, 50)]


def shown(bar: StageBar) -> str:
    """The bar as the terminal shows it: its line laid out at the bar's own width (cut with … there)."""
    console = Console(width=bar.size.width, file=io.StringIO(), record=True, color_system=None)
    console.print(bar.content)
    return console.export_text(styles=False).splitlines()[0]


def test_the_status_names_the_layer_then_the_head():
    assert pass_status(3, 30) == "pass: layer 3 of 30"
    assert pass_status(30, 30) == "pass: layer 30 of 30 done, output head"
    assert pass_status(18, 18, 3 << 29) == "pass: layer 18 of 18 done, output head: first use, decoding 1.5 GiB"


def test_the_head_is_pending_until_held():
    model = Model(open_gguf(LLAMA_Q4), max_cache_bytes=1 << 30)
    before = model.head_pending()
    assert before > 0
    list(Session(model).generate([3, 4, 5], Sampler(SamplerSettings()), 1))
    assert model.head_pending() == 0
    small = Model(open_gguf(LLAMA_Q4), max_cache_bytes=before)  # the head over a quarter: by blocks, every pass
    list(Session(small).generate([3, 4, 5], Sampler(SamplerSettings()), 1))
    assert small.head_pending() == before


@pytest.mark.parametrize("size", WIDTHS, ids=lambda s: f"{s[0]}x{s[1]}")
async def test_layer_n_of_m_is_never_cut(size):
    app = app_for(LLAMA_Q4)
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        for stage in ("4", "5", "1"):
            await pilot.press(stage)
            await pilot.pause()
            app.status = "preparing the engine"
            app.pass_status = pass_status(18, 18, 1 << 30)
            await pilot.pause()
            line = shown(app.screen.query_one(StageBar))
            assert "pass: layer 18 of 18" in line, line
            assert f" {stage} " in line  # the current stage is still there
        app.pass_status = app.status = ""
        await pilot.pause()
        if size[0] >= 120:  # idle, wide: every label again
            assert "Summary" in shown(app.screen.query_one(StageBar))


async def test_the_first_pass_says_its_head_s_first_use_however_short():
    seen: list = []
    app = app_for(LLAMA_Q4)
    async with app.run_test(size=(80, 24), message_hook=seen.append) as pilot:
        await settle(pilot)
        await press_stage(pilot, "prefill", "space")
        await settle(pilot)
        first = posted(seen, events.PassProgress)
        assert first and first[-1].done == first[-1].total and first[-1].head_bytes > 0
        seen.clear()
        await pilot.press("space")
        await settle(pilot)
        assert not [m for m in posted(seen, events.PassProgress) if m.head_bytes]  # held now
