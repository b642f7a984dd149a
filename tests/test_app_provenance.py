"""Where figures come from, said on screen (issue 13 items 1 and 12), by Pilot at 80x24 and 120x40.

- Measured figures name the engine that ran the passes (from the run's own Steps), modelled figures the
  machine profile they are modelled for: Summary, Costs (table, comparison, bytes counted), the Chat stage's
  first-token times.
- One unit convention per screen: decimal (GB) on Costs, binary (MiB) on the others.
- Counts agree with their noun ("1 chunk", "1 pass").
- At temperature 0 the Sampling stage says there was no draw; a what-if names the knobs the token was drawn with.
- Summary shows the knobs each token was drawn with, not the knobs now.
"""

from __future__ import annotations

import re

import pytest
from app_support import (
    SIZES,
    press_stage,
    reference_app,
    settle,
    shown_text,
    stage_key,
    widget_text,
)
from textual.widgets import Static

from walkthrough.costs.measured import comparison_title, measured_here, modelled_for
from walkthrough.request import stages
from walkthrough.words import count

PREFILL, DECODE, SAMPLING, COSTS, SUMMARY = (
    stage_key(s) for s in ("prefill", "decode", "sampling", "costs", "summary"))
BINARY = re.compile(r"\d (KiB|MiB|GiB|TiB)\b")
DECIMAL = re.compile(r"\d (kB|MB|GB|TB)\b")
PARAMS = pytest.mark.parametrize("size", SIZES.values(), ids=SIZES.keys())


def text_of(app, selector: str) -> str:
    """A Static's content laid out at its own width on this terminal (what the user sees, scrolled or not)."""
    widget = app.screen.query_one(selector, Static)
    return " ".join(widget_text(widget, widget.size.width or app.size.width).split())


async def step(pilot, n: int = 1, stage: str | None = None) -> None:
    """n passes (space), on `stage` when given."""
    if stage is not None:
        await pilot.press(stage)
    for _ in range(n):
        await pilot.press("space")
        await settle(pilot)


@PARAMS
async def test_measured_and_modelled_figures_say_whose_they_are(fixtures_dir, size):
    app = reference_app()
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        state = app.state
        await step(pilot, 3, DECODE)  # the prompt (one chunk), then two tokens
        engine = state.steps[0].engine
        assert engine == state.model.engine == "numpy"
        assert f"{modelled_for(state.profile)} (balance point" in text_of(app, "#decode-token")
        await pilot.press(SUMMARY)
        await pilot.pause()
        summary = text_of(app, "#summary-table")
        assert summary.count(measured_here(engine)) == 2  # the prefill row and the decode row
        assert modelled_for(state.profile) in summary
        await pilot.press(COSTS)
        await pilot.pause()
        costs = text_of(app, "#costs-measured")
        assert comparison_title(state.profile, state.measured()) in costs
        assert f"counted by the {engine} engine" in costs
        assert modelled_for(state.profile) in text_of(app, "#costs-table")
        assert text_of(app, "#costs-curves").count(modelled_for(state.profile)) >= 3  # first token, decode, users
        await press_stage(pilot, "template")
        await pilot.pause()
        assert f"first token ({measured_here(engine)}): #1" in text_of(app, "#reuse-line")


@PARAMS
async def test_one_unit_convention_per_screen(fixtures_dir, size):
    app = reference_app()
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        await step(pilot, 2, DECODE)
        seen = {}
        for key, selectors in ((PREFILL, ("#prefill-figures",)), (DECODE, ("#decode-token", "#decode-detail")),
                               (SUMMARY, ("#summary-table",)),
                               (COSTS, ("#costs-head", "#costs-measured", "#costs-table", "#costs-curves"))):
            # (the machine's name is its maker's text, "64 GB LPDDR5X" and all: not a figure written here)
            await pilot.press(key)
            await pilot.pause()
            seen[key] = " ".join(text_of(app, s) for s in selectors).replace(app.state.profile.name, "")
    for key in (PREFILL, DECODE, SUMMARY):
        assert BINARY.search(seen[key]) and not DECIMAL.search(seen[key]), key
    assert DECIMAL.search(seen[COSTS]) and not BINARY.search(seen[COSTS])


@PARAMS
async def test_a_single_chunk_and_a_single_pass_are_singular(fixtures_dir, size):
    app = reference_app()
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        n_prompt = len(app.state.prompt_ids)
        assert n_prompt <= app.state.chunk  # the whole prompt fits one chunk
        await pilot.press(PREFILL)
        await pilot.pause()
        assert f"{count(n_prompt, 'prompt token')} in 1 chunk of up to" in text_of(app, "#prefill-figures")
        await step(pilot, 2)  # the prompt, then one decoded token
        await pilot.press(SUMMARY)
        await pilot.pause()
        summary = text_of(app, "#summary-table")
    assert f"1 pass, {n_prompt} prompt tokens" in summary and "1 pass, 1 token," in summary
    assert not re.search(r"\b1 (chunks|passes|tokens|positions|messages)\b", summary)


@PARAMS
async def test_greedy_sampling_shows_no_draw(fixtures_dir, size):
    app = reference_app()
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        await step(pilot, 1, SAMPLING)
        drawn = app.state.steps[-1].sample
        assert drawn.settings.greedy
        greedy = text_of(app, "#sampling-table")
        assert "greedy: no draw" in greedy and "u=" not in greedy
        assert "what-if" not in greedy
        await pilot.press("T")  # temperature up: a what-if on the same logits, with a real draw
        await pilot.pause()
        what_if = text_of(app, "#sampling-table")
    assert f"draw u={drawn.u:.3f}" in what_if and "no draw" not in what_if
    assert f"the token was drawn with {drawn.settings.describe()}" in what_if


@PARAMS
async def test_summary_shows_the_knobs_each_token_was_drawn_with(fixtures_dir, size):
    app = reference_app()
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        knobs = []  # the settings after each key: tokens 1-2 (greedy), T, token 3, T
        for key in (SAMPLING, "space", "space", "T", "space", "T"):
            await pilot.press(key)
            await settle(pilot)
            knobs.append(app.state.settings)
        first, second, now = knobs[2], knobs[3], knobs[5]
        assert knobs[4] == second and len(app.state.answer_ids()) == 3
        await pilot.press(SUMMARY)
        await pilot.pause()
        summary = text_of(app, "#summary-table")
    assert first.greedy and not second.greedy and now != second
    assert f"tokens 1-2: {first.describe()}" in summary
    assert f"token 3: {second.describe()}" in summary
    assert f"knobs now (for the tokens still to draw): {now.describe()}" in summary


@PARAMS
async def test_no_stage_mixes_binary_and_decimal_units(fixtures_dir, size):

    app = reference_app()
    mixed = {}
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        await step(pilot, 3, DECODE)
        for stage in stages.STAGES:
            await pilot.press(str(stage.number))
            await settle(pilot)
            shown = shown_text(app).replace(app.state.profile.name, "")  # the maker's text, not our figures
            if BINARY.search(shown) and DECIMAL.search(shown):
                mixed[stage.id] = (BINARY.search(shown).group(), DECIMAL.search(shown).group())
    assert not mixed
