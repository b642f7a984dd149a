"""Autoplay walks every stage and exits; --screenshots saves one SVG per stage; snapshots at 80x24 and 120x40."""

from __future__ import annotations

import pytest
from app_support import SIZES, app_for, settle, svg_text

from walkthrough.request import stages

MESSAGES = [{"role": "user", "content": "Is there an interaction?"}]


async def _run_until_exit(app, size, limit: float = 60.0) -> None:
    async with app.run_test(size=size) as pilot:
        waited = 0.0
        while app.return_code is None and waited < limit:
            await pilot.pause(0.1)
            waited += 0.1


async def test_screenshots_save_every_stage_by_label_and_exit_without_being_told(fixtures_dir, tmp_path):
    app = app_for(fixtures_dir / "reference" / "ref-qwen2moe-f32.gguf", MESSAGES,
                  screenshots=tmp_path, pace=0.4, max_tokens=3)  # no exit_at_end: the finished walk ends the app
    await _run_until_exit(app, SIZES["small"])
    assert app.return_code == 0
    saved = sorted(p.name for p in tmp_path.glob("*.svg"))
    assert saved == sorted(f"{s.number}-{s.label}.svg" for s in stages.STAGES)
    for stage in stages.STAGES:
        text = svg_text((tmp_path / f"{stage.number}-{stage.label}.svg").read_text())
        assert "Quit" in text and f"{stage.number} {stage.label}" in text
    decode = stages.get("decode")
    decode_text = svg_text((tmp_path / f"{decode.number}-{decode.label}.svg").read_text())
    assert "token cap" in decode_text  # autoplay decoded to the end (the 3-token cap) before moving on
    assert app.state.finished and app.state.capped


@pytest.mark.parametrize("size", ["small", "large"])
async def test_snapshot_of_each_stage_keeps_the_essentials(fixtures_dir, size):
    """Each stage at 80x24 and 120x40: the stage bar, its main figure and the footer's keys are on screen."""
    app = app_for(fixtures_dir / "reference" / "ref-qwen3moe-q8_0.gguf", MESSAGES)
    essentials = {
        "file": "bits per weight",
        "template": "1. user: Is there an interaction?",
        "tokens": "whole prompt",
        "prefill": "chunk 1 of 1",
        "decode": "token 1 at position",
        "speculate": "drafter lookup",
        "sampling": "temperature 0",
        "costs": "memory needed",
        "summary": f"{stages.label('decode')}",
    }
    async with app.run_test(size=SIZES[size]) as pilot:
        await settle(pilot)
        for i, stage in enumerate(stages.ids(), start=1):
            await pilot.press(str(i))
            if stage in ("prefill", "decode"):
                await pilot.press("space")
            await settle(pilot)
            text = svg_text(app.export_screenshot())
            assert stages.label(stage) in text, stage
            assert essentials[stage] in text, stage
            assert "Quit" in text and "Stage" in text, stage
