"""`r` and `c` ask before they throw a run away, and only then; the question never holds keys or `q` back."""

from __future__ import annotations

import pytest
from app_support import SIZES, hold_passes, reference_app, settle, stage_key, widget_text

from walkthrough.screens.confirm import ConfirmDiscard, discard_question
from walkthrough.screens.prefill import CHUNK_SIZES

PREFILL, DECODE = (stage_key(stage) for stage in ("prefill", "decode"))
SIZE_PARAMS = pytest.mark.parametrize("size", SIZES.values(), ids=SIZES.keys())


async def _run_passes(pilot, n: int) -> None:
    for _ in range(n):
        await pilot.press("space")
        await settle(pilot)


def _next(chunk: int) -> int:
    """The chunk size after `chunk` in the Prefill stage's cycle."""
    return CHUNK_SIZES[(CHUNK_SIZES.index(chunk) + 1) % len(CHUNK_SIZES)]


def _question(app) -> str:
    assert isinstance(app.screen, ConfirmDiscard)
    return widget_text(app.screen.query_one("#confirm-question")).strip()


@SIZE_PARAMS
async def test_r_asks_before_discarding_and_n_keeps_the_run(fixtures_dir, size):
    app = reference_app()
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        state = app.state
        n_prompt = -(-len(state.prompt_ids) // state.chunk)  # prefill passes, then two decode passes
        await pilot.press(DECODE)
        await _run_passes(pilot, n_prompt + 2)
        kept, run_id = state.steps, state.run_id
        generated = len(state.answer_ids())
        assert generated == 3  # the last prefill pass and each decode pass pick a token
        await pilot.press("r")
        await pilot.pause()
        question = _question(app)
        assert question == f"Discard this run: {generated} tokens generated?  y / n"
        region = app.screen.query_one("#confirm-question").region
        assert region.height > 0 and region.bottom <= size[1] and region.right <= size[0]  # on screen
        await pilot.press("n")
        await settle(pilot)
        assert not isinstance(app.screen, ConfirmDiscard)
        assert state.steps == kept and state.run_id == run_id
        await pilot.press("r", "y")
        await settle(pilot)
        assert not isinstance(app.screen, ConfirmDiscard)
        assert state.steps == () and state.run_id == run_id + 1


@SIZE_PARAMS
async def test_c_asks_before_a_new_chunk_size_discards_the_run(fixtures_dir, size):
    app = reference_app()
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        state = app.state
        await pilot.press(PREFILL)
        while state.chunk != CHUNK_SIZES[0]:  # nothing run yet: c acts at once, no question
            await pilot.press("c")
            await settle(pilot)
            assert not isinstance(app.screen, ConfirmDiscard)
        first = state.chunk
        assert len(state.prompt_ids) > first  # so the first pass picks no token
        await _run_passes(pilot, 1)
        await pilot.press("c")
        await pilot.pause()
        assert _question(app) == "Discard this run: 1 prefill pass run?  y / n"
        await pilot.press("escape")
        await settle(pilot)
        assert state.chunk == first and len(state.steps) == 1
        await pilot.press("c", "y")
        await settle(pilot)
        assert state.chunk == _next(first) and state.steps == ()


async def test_nothing_to_lose_means_no_question(fixtures_dir):
    app = reference_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        run_id = app.state.run_id
        assert discard_question(app.state, app.stepping) is None
        await pilot.press(DECODE, "r")
        await settle(pilot)
        assert not isinstance(app.screen, ConfirmDiscard) and app.state.run_id == run_id + 1


async def test_any_other_key_keeps_the_run_and_q_quits_from_the_question(fixtures_dir):
    app = reference_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        state = app.state
        await pilot.press(DECODE)
        await _run_passes(pilot, 1)
        kept = state.steps
        await pilot.press("r", "space", "space")  # the first space answers (keep), the second runs a pass
        await settle(pilot)
        assert app.current_mode == "decode" and state.steps[: len(kept)] == kept and len(state.steps) == len(kept) + 1
        await pilot.press("r")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmDiscard)
        await pilot.press("q")
        await pilot.pause()
        assert app.return_code == 0


async def test_a_pass_in_flight_is_worth_asking_about(fixtures_dir):
    app = reference_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        state = app.state
        release, started = hold_passes(app)
        await pilot.press(DECODE, "space")
        assert started.wait(5)
        run_id = state.run_id
        await pilot.press("r")
        await pilot.pause()
        assert _question(app) == "Discard this run: the pass now running?  y / n"
        await pilot.press("y")
        await pilot.pause()
        assert state.run_id == run_id + 1 and not app.stepping
        release.set()
        await settle(pilot)
        assert state.steps == ()  # the held pass belonged to the discarded run

