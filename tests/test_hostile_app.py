"""Hostile runs through the app (issue 20): every stage of a poisoned file, hostile text and messages, by Pilot.

The app must not exit with an error or a traceback (Pilot re-raises an unhandled
exception when the test ends): a file the engine refuses shows the reason on the
stages that need the engine, and no stage shows a raw control or invisible character.
"""

from __future__ import annotations

import math

import pytest
from app_support import app_for, press_stage, screen_text, settle, shown_text
from gguf.constants import GGUFValueType as V
from hostile_support import (
    ARCH,
    HOSTILE_TEMPLATES,
    HOSTILE_TEXT,
    TEMPLATE_CLASSES,
    raw_controls,
    with_metadata,
    with_weight,
)

from walkthrough.request import stages

EVERY_STAGE = tuple(stages.ids())
REFUSING = ("file", "template", "prefill")  # the stages that show a refusal


async def _visit_every_stage(pilot, visit: tuple[str, ...] = EVERY_STAGE) -> list[str]:
    """Each stage's screen text as the terminal shows it (raw controls must not reach it), after a step
    where the stage steps."""
    texts = []
    for stage in visit:
        await press_stage(pilot, stage)
        await pilot.press("space")
        await settle(pilot)
        texts.append(screen_text(pilot.app))
    return texts


def _variants(tmp_path):
    return {
        "nan rope base": with_metadata(tmp_path, "nan.gguf", {f"{ARCH}.rope.freq_base": (V.FLOAT32, math.nan)}),
        "scaling factor text": with_metadata(tmp_path, "abc.gguf", {f"{ARCH}.rope.scaling.factor": (V.STRING, "0")}),
        "inf norm weight": with_weight(tmp_path, "inf.gguf", "output_norm.weight", math.inf),
        "hostile text": with_metadata(tmp_path, "text.gguf", {"general.name": (V.STRING, HOSTILE_TEXT),
                                                              "general.author": (V.STRING, HOSTILE_TEXT)}),
    }


# Every stage for two files; the stages that show the refusal (File, Chat, Prefill) for the others.
VISITS = [("nan rope base", EVERY_STAGE), ("hostile text", EVERY_STAGE), ("scaling factor text", REFUSING),
          ("inf norm weight", REFUSING)]  # hostile templates: test_a_hostile_template_in_the_file_...


@pytest.mark.parametrize(("variant", "visit"), VISITS, ids=[v for v, _ in VISITS])
async def test_stages_survive_a_hostile_file(tmp_path, variant, visit):
    path = _variants(tmp_path)[variant]
    app = app_for(path, [{"role": "user", "content": HOSTILE_TEXT}])
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        texts = await _visit_every_stage(pilot, visit)
        assert app.error is None
        for stage, text in zip(visit, texts):
            assert not raw_controls(text), (stage, raw_controls(text))
        if variant != "hostile text":
            assert "cannot run" in "".join(texts) or "stopped" in "".join(texts)


@pytest.mark.parametrize("content", [[{"type": "text", "text": "hi"}], None], ids=["parts", "null"])
async def test_unusual_message_content_on_the_chat_stage(fixtures_dir, content):
    app = app_for(fixtures_dir / "reference" / "ref-llama-f32.gguf", [{"role": "user", "content": content}])
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        texts = await _visit_every_stage(pilot)
        await press_stage(pilot, "template")
        await pilot.press("e")  # open the editor on the message, then save it unchanged
        await settle(pilot)
        await pilot.press("ctrl+s")
        await settle(pilot)
        assert app.error is None
        assert all(not raw_controls(t) for t in texts)


@pytest.mark.parametrize("name", TEMPLATE_CLASSES)
async def test_a_hostile_template_in_the_file_is_a_chat_stage_message(tmp_path, name):
    """One template of each class issue 20 found, stored in the file: the render is stopped, the Chat stage
    says why in one line, and the app stays up (the stages that need the prompt say they cannot run)."""
    path = with_metadata(tmp_path, "tpl.gguf", {"tokenizer.chat_template": (V.STRING, HOSTILE_TEMPLATES[name])})
    app = app_for(path)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        problem = app.state.unavailable.get("template", "")
        assert problem.startswith("chat template of tpl.gguf") and "\n" not in problem, problem
        await press_stage(pilot, "template", "v", "v")  # the Chat stage's Rendered view
        await settle(pilot)
        text = " ".join(shown_text(app).split())
        assert f"Cannot render: {problem[:40]}" in text
        await press_stage(pilot, "prefill")
        await settle(pilot)
        assert app.error is None
        assert not raw_controls(screen_text(app))
