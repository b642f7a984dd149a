"""Pilot tests of the Speculate stage: rounds run in a worker, the answer is Decode's, keys change k and the drafter."""

from __future__ import annotations

from app_support import app_for, screen_text, settle

from walkthrough.engine.sampler import Sampler, SamplerSettings
from walkthrough.engine.session import Session
from walkthrough.screens import stages

MESSAGES = [{"role": "user", "content": "What does the record say about warfarin?"}]
MODEL = "ref-qwen2moe-f32.gguf"
STAGE_KEY = str(stages.number("speculate"))


async def _press(pilot, key: str, n: int = 1) -> None:
    for _ in range(n):
        await pilot.press(key)
        await settle(pilot)


async def test_rounds_write_the_answer_of_plain_decoding(fixtures_dir):
    app = app_for(fixtures_dir / "reference" / MODEL, MESSAGES)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await _press(pilot, STAGE_KEY)
        screen = app.screen
        assert screen.STAGE == "speculate"
        await _press(pilot, "space", 4)  # the prompt, then three rounds
        state = app.state
        assert screen.prefill is not None and len(screen.rounds) == 3
        answer = [screen.prefill.chosen] + [t for r in screen.rounds for t in r.generated]
        session, sampler = Session(state.model), Sampler(SamplerSettings(temperature=0.0))
        first = list(session.prefill(state.prompt_ids, sampler=sampler))[-1].chosen
        plain = [first] + [s.chosen for s in session.decode(sampler, len(answer) - 1)]
        assert answer == plain
        text = screen_text(app)
        assert "drafter lookup" in text and "k 3" in text and "alpha" in text
        assert "tokens per round" in text
        screen.query_one("#speculate-main").scroll_end(animate=False)  # at 80x24 the answer sits below the fold
        await settle(pilot)
        assert "the answer so far" in screen_text(app)


async def test_keys_change_k_and_the_drafter_and_restart_the_stage_run(fixtures_dir):
    app = app_for(fixtures_dir / "reference" / MODEL, MESSAGES)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await _press(pilot, STAGE_KEY)
        screen = app.screen
        await _press(pilot, "space", 2)
        await _press(pilot, "plus", 2)
        assert screen.k == 5 and screen.rounds == [] and screen.prefill is None
        await _press(pilot, "space", 2)
        assert len(screen.rounds[0].draft.tokens) <= 5 and screen.rounds[0].draft.k == 5
        await _press(pilot, "d")  # MTP: this file has no MTP block, which the stage says in one line
        await _press(pilot, "space")
        assert screen.drafter == "mtp" and "no multi-token-prediction block" in screen_text(app)
        await _press(pilot, "d")
        assert screen.drafter == "lookup" and screen.error is None


async def test_a_draft_model_given_to_the_app_is_a_third_drafter(fixtures_dir):
    path = fixtures_dir / "reference" / MODEL
    app = app_for(path, MESSAGES, draft=path)  # the model drafting for itself: every draft accepted, greedy
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await _press(pilot, STAGE_KEY)
        screen = app.screen
        await _press(pilot, "d", 2)
        assert screen.drafter == "draft"
        await _press(pilot, "space", 3)
        assert screen.rounds and all(r.draft.accepted == len(r.draft.tokens) for r in screen.rounds)
        assert "drafter draft" in screen_text(app) and "alpha = " in screen_text(app)
