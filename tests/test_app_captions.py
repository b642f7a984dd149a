"""Autoplay captions: every stage says what is happening in a line a viewer can read; none outside autoplay."""

from __future__ import annotations

from app_support import SIZES, app_for, settle, widget_text
from textual.css.query import NoMatches

from walkthrough.request import stages

MESSAGES = [{"role": "user", "content": "Is there an interaction?"}]


def caption_on(app) -> tuple[str, str] | None:
    screen = app.screen
    stage = getattr(screen, "stage", None)
    if stage is None:
        return None
    try:
        return stage.id, widget_text(screen.query_one("#caption"))
    except NoMatches:
        return stage.id, ""


async def test_the_walk_captions_every_stage(fixtures_dir):
    app = app_for(fixtures_dir / "reference" / "ref-qwen2moe-f32.gguf", MESSAGES, autoplay=True,
                  exit_at_end=True, pace=0.3, max_tokens=3)
    seen: dict[str, str] = {}
    async with app.run_test(size=SIZES["small"]) as pilot:
        for _ in range(1200):
            shown = caption_on(app)
            if shown is not None and shown[1]:  # (an empty one: the stage is still being composed)
                seen.setdefault(*shown)
            if app.return_code is not None:
                break
            await pilot.pause(0.05)
    assert app.return_code == 0
    for stage in stages.STAGES:
        caption = stage.screen().CAPTION
        assert caption, f"stage {stage.id} has no caption"
        assert " ".join(seen.get(stage.id, "").split()) == caption, stage.id


async def test_no_caption_outside_autoplay(fixtures_dir):
    app = app_for(fixtures_dir / "reference" / "ref-qwen2moe-f32.gguf", MESSAGES)
    async with app.run_test(size=SIZES["small"]) as pilot:
        await settle(pilot)
        assert not app.screen.query("#caption")
