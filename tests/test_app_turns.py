"""Pilot tests of the second turn in the app: a follow-up and an edit reuse the cache, r and u start afresh."""

from __future__ import annotations

from app_support import press_stage, reference_app, settle, shown_text

from walkthrough.screens.editor import MessageEditor

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What about warfarin?"}]


def _app(fixtures_dir):
    # One token per answer: it is chosen, never fed, so the cache holds the prompt exactly.
    return reference_app(MESSAGES, max_tokens=1)


async def _answered(pilot):
    """Wait for the app, go to the Chat stage, run the request to its end; the request state."""
    await settle(pilot)
    await press_stage(pilot, "template")
    await _run_to_the_end(pilot)
    return pilot.app.state


async def _run_to_the_end(pilot) -> None:
    app = pilot.app
    while not app.state.finished:
        app.action_step()
        await settle(pilot)


async def test_a_follow_up_reuses_the_first_request(fixtures_dir):
    app = _app(fixtures_dir)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        state = app.state
        first = list(state.prompt_ids)
        await press_stage(pilot, "template")
        await _run_to_the_end(pilot)
        assert state.first_tokens[-1].cold and state.first_tokens[-1].reused == 0
        await pilot.press("f")
        await pilot.pause()
        assert isinstance(app.screen, MessageEditor)
        await pilot.press(*"and aspirin?", "ctrl+s")
        await settle(pilot)
        assert [m["role"] for m in state.messages] == ["system", "user", "assistant", "user"]
        app.action_step()
        await settle(pilot)
        reuse = state.steps[0].reuse
        assert (reuse.stop, reuse.reused, reuse.computed) == ("held", len(first), len(state.prompt_ids) - len(first))
        assert state.steps[0].start == len(first)
        assert f"reused {len(first)} of {len(state.prompt_ids)} prompt tokens" in shown_text(app)


async def test_an_edit_reuses_up_to_the_changed_token_and_says_why(fixtures_dir):
    app = _app(fixtures_dir)
    async with app.run_test(size=(80, 24)) as pilot:
        state = await _answered(pilot)
        before = list(state.prompt_ids)
        await pilot.press("down", "e", "end", *" Now.", "ctrl+s", "y")  # y: the answer is replaced
        await settle(pilot)
        app.action_step()
        await settle(pilot)
        changed = next(i for i, (a, b) in enumerate(zip(before, state.prompt_ids)) if a != b)
        first = state.steps[0]
        assert (first.reuse.stop, first.reuse.reused, first.reuse.differs_at) == ("differs", changed, changed)
        assert first.cause.cause == "edited" and first.cause.words == "message 2 (user) was changed"
        assert "message 2 (user) was changed" in shown_text(app)


async def test_restart_and_unload_start_from_an_empty_cache(fixtures_dir):
    app = _app(fixtures_dir)
    async with app.run_test(size=(80, 24)) as pilot:
        state = await _answered(pilot)
        await press_stage(pilot, "prefill", "r", "y")  # r: the stepping stages' restart; y: discard the answer
        await settle(pilot)
        await _run_to_the_end(pilot)
        assert len(state.first_tokens) == 2 and state.steps[0].reuse.reused == 0
        assert not state.first_tokens[-1].cold  # weights kept, KV cache not
        model = state.model
        await press_stage(pilot, "template", "u", "y")  # y: discard the answer (u asks first)
        await settle(pilot)
        assert state.model is not None and state.model is not model and state.unloads == 1
        await _run_to_the_end(pilot)
        assert state.steps[0].reuse.reused == 0 and state.first_tokens[-1].cold
        assert [run.cold for run in state.first_tokens] == [True, False, True]
        assert "cold model" in shown_text(app)


def test_first_token_times_name_the_engine_once_or_per_run_when_they_differ():
    from walkthrough.costs.measured import measured_here
    from walkthrough.render.reuse_text import first_token_lines
    from walkthrough.request.state import FirstToken

    numpy_runs = [FirstToken(10, 0, 0.5, True, "numpy"), FirstToken(12, 10, 0.1, False, "numpy")]
    (line,) = first_token_lines(numpy_runs)
    assert line.startswith(f"first token ({measured_here('numpy')}): #1 ") and "numpy" not in line.split(":", 1)[1]
    (mixed,) = first_token_lines([*numpy_runs, FirstToken(12, 0, 0.2, True, "llama.cpp")])
    assert mixed.startswith("first token: #1 ") and "reused, numpy)" in mixed and "cold model, llama.cpp)" in mixed
