"""Pilot tests of the Speculate stage: rounds run in a worker, the answer is Decode's, keys change k and the drafter.

The stage's run lives in the request state (`state.speculation`), read here through `_run(screen)`.
"""

from __future__ import annotations

from app_support import (
    MESSAGES,
    MODEL,
    app_for,
    press_stage,
    reference_app,
    settle,
    shown_text,
    spy_posts,
    stage_key,
)

from walkthrough.engine.glassbox.session import Session
from walkthrough.engine.sampler import Sampler, SamplerSettings
from walkthrough.request.events import RoundDone

STAGE_KEY = stage_key("speculate")


async def _press(pilot, key: str, n: int = 1) -> None:
    for _ in range(n):
        await pilot.press(key)
        await settle(pilot)


async def test_rounds_write_the_answer_of_plain_decoding(fixtures_dir):
    app = reference_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await _press(pilot, STAGE_KEY)
        screen = app.screen
        assert screen.STAGE == "speculate"
        await _press(pilot, "space", 4)  # the prompt, then three rounds
        state = app.state
        assert _run(screen).prefill is not None and len(_run(screen).rounds) == 3
        answer = [_run(screen).prefill.chosen] + [t for r in _run(screen).rounds for t in r.generated]
        session, sampler = Session(state.model), Sampler(SamplerSettings(temperature=0.0))
        first = list(session.prefill(state.prompt_ids, sampler=sampler))[-1].chosen
        plain = [first] + [s.chosen for s in session.decode(sampler, len(answer) - 1)]
        assert answer == plain
        text = shown_text(app)
        assert "drafter lookup" in text and "k 3" in text and "alpha" in text
        assert "tokens per round" in text
        screen.query_one("#speculate-main").scroll_end(animate=False)  # at 80x24 the answer sits below the fold
        await settle(pilot)
        assert "the answer so far" in shown_text(app)


async def test_keys_change_k_and_the_drafter_and_restart_the_stage_run(fixtures_dir):
    app = reference_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await _press(pilot, STAGE_KEY)
        screen = app.screen
        await _press(pilot, "space", 2)
        await _press(pilot, "plus")
        await _press(pilot, "y")  # discard the rounds run so far (tests/test_app_lose_work.py)
        await _press(pilot, "plus")  # nothing run since: at once
        assert _run(screen).k == 5 and _run(screen).rounds == () and _run(screen).prefill is None
        await _press(pilot, "space", 2)
        assert len(_run(screen).rounds[0].draft.tokens) <= 5 and _run(screen).rounds[0].draft.k == 5
        rounds = _run(screen).rounds
        await _press(pilot, "d")  # no MTP block and no --draft: lookup is the only drafter, nothing is lost
        assert _run(screen).drafter == "lookup" and _run(screen).rounds == rounds and _run(screen).error is None


async def test_a_draft_model_given_to_the_app_is_the_next_drafter(fixtures_dir):
    path = fixtures_dir / "reference" / MODEL
    app = app_for(path, MESSAGES, draft=path)  # the model drafting for itself: every draft accepted, greedy
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await _press(pilot, STAGE_KEY)
        screen = app.screen
        await _press(pilot, "d")  # lookup -> draft (no MTP block in this file)
        assert _run(screen).drafter == "draft"
        await _press(pilot, "space", 3)
        assert _run(screen).rounds and all(r.draft.accepted == len(r.draft.tokens) for r in _run(screen).rounds)
        assert "drafter draft" in shown_text(app) and "alpha = " in shown_text(app)


def _reference(state, k: int, rounds: int) -> list:
    """The first token and `rounds` rounds (drafts, tokens written) of an uncancelled run, straight through the
    engine with the stage's plan (prompt lookup)."""
    from itertools import islice

    from walkthrough.engine.serving import speculative

    drafter = speculative.make_drafter("lookup", state.model)
    session, sampler = Session(state.model), Sampler(state.settings)
    first = list(speculative.prefill(session, drafter, state.prompt_ids, chunk=state.chunk, sampler=sampler))[-1]
    steps = speculative.speculate(session, sampler, drafter, state.max_new_tokens - 1, k=k)
    return [first.chosen] + [(r.draft.tokens, r.generated) for r in islice(steps, rounds)]


def _run(screen):
    """The stage's run, as the app keeps it."""
    return screen.app.state.speculation


def _shown(screen) -> list:
    return [_run(screen).prefill.chosen] + [(r.draft.tokens, r.generated) for r in _run(screen).rounds]


def _spy_rounds(app) -> list[tuple[object, bool]]:
    """(worker, cancelled when it posted) for every RoundDone posted from now on."""
    return spy_posts(app, RoundDone)


def _gated_app(fixtures_dir, monkeypatch, at: int):
    """The app, and a gate that holds the first round worker once `armed[0]` is set, at its layer `at`."""
    from app_support import LayerGate

    armed = [False]
    gate = LayerGate(monkeypatch, hold=lambda worker: armed[0] and worker.name == "speculative round", at=at)
    return reference_app(), gate, armed


async def _held_round(pilot, gate, armed: list[bool]):
    """On the stage: the prompt and one round, then a second round held at a layer; returns the screen, the
    held worker, its layers so far and the spied posts."""
    await settle(pilot)
    await _press(pilot, STAGE_KEY)
    screen = pilot.app.screen
    posted = _spy_rounds(pilot.app)
    await _press(pilot, "space", 2)
    armed[0] = True
    await pilot.press("space")
    await gate.wait_held(pilot)
    return screen, gate.held, gate.ran[gate.held], posted


async def test_leaving_the_stage_stops_the_round_within_a_layer_and_the_run_goes_on(fixtures_dir, monkeypatch):
    app, gate, armed = _gated_app(fixtures_dir, monkeypatch, at=1)
    async with app.run_test(size=(80, 24)) as pilot:
        screen, held, layers, posted = await _held_round(pilot, gate, armed)
        await press_stage(pilot, "file")
        await pilot.pause()
        assert held.is_cancelled and not _run(screen).busy
        await gate.wait_returned(pilot)
        assert gate.ran[held] == layers  # no layer began after the cancel
        await settle(pilot)
        assert len(_run(screen).rounds) == 1
        await _press(pilot, STAGE_KEY)
        await _press(pilot, "space", 2)  # the run built again (its prompt and round 1 computed, not shown twice)
        assert not any(cancelled for _, cancelled in posted)
        assert _shown(screen) == _reference(app.state, _run(screen).k, 3)


async def test_a_restart_stops_the_round_within_a_layer_and_runs_as_if_uncancelled(fixtures_dir, monkeypatch):
    app, gate, armed = _gated_app(fixtures_dir, monkeypatch, at=2)
    async with app.run_test(size=(80, 24)) as pilot:
        screen, held, layers, posted = await _held_round(pilot, gate, armed)
        await pilot.press("r", "y")  # y: discard the rounds (tests/test_app_lose_work.py)
        assert held.is_cancelled and _run(screen).rounds == () and _run(screen).prefill is None
        await gate.wait_returned(pilot)
        assert gate.ran[held] == layers
        await _press(pilot, "space", 3)
        assert not any(cancelled for _, cancelled in posted)
        assert _shown(screen) == _reference(app.state, _run(screen).k, 2)


async def test_an_overlay_on_the_stage_lets_the_round_finish(fixtures_dir, monkeypatch):
    app, gate, armed = _gated_app(fixtures_dir, monkeypatch, at=1)
    async with app.run_test(size=(80, 24)) as pilot:
        screen, held, _, posted = await _held_round(pilot, gate, armed)
        await pilot.press("question_mark")  # help, over the stage: still on it
        await pilot.pause()
        assert app.screen is not screen and not held.is_cancelled
        await pilot.press("escape")
        await gate.wait_returned(pilot)
        await settle(pilot)
        assert len(_run(screen).rounds) == 2 and not _run(screen).busy and len(posted) == 3
        assert _shown(screen) == _reference(app.state, _run(screen).k, 2)


async def test_the_prompt_s_prefill_says_its_progress(monkeypatch):
    # The first round prefills the whole prompt: the stage said "Press space" and the stage bar
    # nothing until it was done (tens of seconds on SmolLM2's default request)
    import re

    from app_support import LayerGate

    import walkthrough.request.run
    from walkthrough.screens.base import StageBar

    monkeypatch.setattr(walkthrough.request.run, "PROGRESS_AFTER", 0.0)  # report every layer
    monkeypatch.setattr(walkthrough.request.run, "PROGRESS_EVERY", 0.0)
    gate = LayerGate(monkeypatch, hold=lambda worker: worker.name == "speculative round", at=2)
    app = reference_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await _press(pilot, STAGE_KEY)
        await pilot.press("space")
        await gate.wait_held(pilot)
        await pilot.pause(0.2)
        total = app.state.model.config.n_layers
        bar = str(app.screen.query_one(StageBar).content)
        assert re.search(rf"round pass: layer \d of {total}", bar), bar
        text = shown_text(app)
        assert f"Prefilling the prompt ({len(app.state.prompt_ids)} tokens)" in text
        assert "Press space" not in text
        await gate.wait_returned(pilot)
        for _ in range(500):
            if not app.state.speculation.busy:
                break
            await pilot.pause(0.02)
        assert app.state.speculation.prefill is not None
        assert "round pass" not in str(app.screen.query_one(StageBar).content)
        assert "Prefilling" not in shown_text(app)
