"""Workers replaced by newer ones post nothing the app keeps: the prompt rebuilt after an edit, the engine prepared
again after u. The first worker is held until the second has finished, then lets go; the state must hold the second's
results (each value checked against one built here). An unload while the request loads does not cancel the loading
of its other parts (the reload has a worker group of its own). A newer edit stops the older rebuild's template
render at once (a render that would run to its time limit ends "cancelled"). An edit made while the load builds the
first prompt is rebuilt once the load's tokens arrive."""

from __future__ import annotations

import threading

from app_support import press_stage, reference_app, settle, work_returned

from walkthrough.errors import WalkthroughError
from walkthrough.request import parts
from walkthrough.request.parts import Part


def _hold_first_call(monkeypatch, name: str) -> tuple[threading.Event, list[int], list]:
    """Make the first call of `parts.<name>` wait until `release` is set (at most 10 s), after computing its
    value; returns (release, the threads of the calls, the values returned, in call order)."""
    release, threads, values = threading.Event(), [], []
    real = getattr(parts, name)

    def held(*args, **kwargs):
        threads.append(threading.get_ident())
        first = len(threads) == 1
        value = real(*args, **kwargs)
        values.append(value)
        if first:
            release.wait(10)
        return value

    monkeypatch.setattr(parts, name, held)
    return release, threads, values


async def _until(pilot, done, polls: int = 1000) -> None:
    """Let the app run until `done()` (or `polls` x 0.01 s passed)."""
    for _ in range(polls):
        if done():
            return
        await pilot.pause(0.01)
    raise AssertionError("waited in vain")


async def test_an_edit_replacing_a_rebuild_keeps_the_newer_prompt(fixtures_dir, monkeypatch):
    app = reference_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        state = app.state
        older = [{"role": "user", "content": "What does the record say about aspirin?"}]
        newer = [{"role": "user", "content": "Any interaction with simvastatin?"}]
        origin = parts.template_origin(state.file, state.template_file)
        want = list(parts.build_tokens(state.tokenizer, state.template_source, newer, origin).ids)
        release, threads, _ = _hold_first_call(monkeypatch, "build_tokens")
        state.messages = older
        app.rebuild_prompt()
        await _until(pilot, lambda: threads)
        state.messages = newer
        app.rebuild_prompt()
        await _until(pilot, lambda: list(state.prompt_ids) == want)  # the newer edit's prompt
        release.set()
        await work_returned(pilot, threads[0])
        await settle(pilot)
        assert list(state.prompt_ids) == want and state.messages == newer
        assert app.runs.plan is not None and list(app.runs.plan.prompt_ids) == want


async def test_a_second_unload_keeps_the_model_prepared_last(fixtures_dir, monkeypatch):
    app = reference_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        release, threads, models = _hold_first_call(monkeypatch, "prepare_engine")
        await press_stage(pilot, "template", "u")
        await _until(pilot, lambda: models)
        await pilot.press("u")
        await _until(pilot, lambda: len(models) == 2 and Part.RUN in app.state.loaded)
        release.set()
        await work_returned(pilot, threads[0])
        await settle(pilot)
        assert len(models) == 2 and models[0] is not models[1]
        assert app.state.model is models[1] and app.state.unloads == 2


async def test_an_unload_while_the_request_loads_leaves_every_part_loaded(fixtures_dir, monkeypatch):
    release, threads, _ = _hold_first_call(monkeypatch, "build_tokenizer")
    app = reference_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await _until(pilot, lambda: threads)  # the file is shown, its tokenizer being built
        await press_stage(pilot, "template", "u")
        await _until(pilot, lambda: app.state.unloads == 1)
        release.set()
        await settle(pilot)
        assert set(Part) <= app.state.loaded and app.state.model is not None and app.state.chat is not None


SLOW = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}x"  # past the time limit


async def test_an_edit_replacing_a_rebuild_stops_its_render(fixtures_dir, monkeypatch, tmp_path):
    slow = tmp_path / "slow.jinja"
    slow.write_text(SLOW, encoding="utf-8")
    started: list[int] = []  # the renders begun, numbered in order
    ended: list[tuple[int, str]] = []  # (render number, how it ended)
    real = parts.render_template

    def spy(*args, **kwargs):
        number = len(started)
        started.append(number)
        try:
            return real(*args, **kwargs)
        except WalkthroughError as exc:
            ended.append((number, str(exc)))
            raise

    app = reference_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        monkeypatch.setattr(parts, "render_template", spy)
        app.state.template_file = slow
        app.rebuild_prompt()
        await _until(pilot, lambda: started)
        app.rebuild_prompt()
        await _until(pilot, lambda: len(ended) == 2)
        await settle(pilot)
        first, second = (why for _, why in sorted(ended))
        assert "rendering was cancelled" in first  # stopped by the newer edit, not at its time limit
        assert "ran longer than" in second and app.state.unavailable[Part.TEMPLATE] == second


async def test_an_edit_while_the_request_loads_keeps_the_edited_prompt(fixtures_dir, monkeypatch):
    """The load builds the first prompt from the messages as they were; an edit made meanwhile is rebuilt once
    the load's tokens arrive, so they cannot land after the edit's and win."""
    release, threads, _ = _hold_first_call(monkeypatch, "build_tokens")
    app = reference_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await _until(pilot, lambda: threads)  # the load tokenizes the first prompt: held
        state = app.state
        edited = [{"role": "user", "content": "Any interaction with simvastatin?"}]
        state.messages = edited
        app.rebuild_prompt()
        await pilot.pause(0.1)
        release.set()
        await work_returned(pilot, threads[0])
        await settle(pilot)
        origin = parts.template_origin(state.file, state.template_file)
        want = list(parts.build_tokens(state.tokenizer, state.template_source, edited, origin).ids)
        assert list(state.prompt_ids) == want and state.messages == edited
        assert app.runs.plan is not None and list(app.runs.plan.prompt_ids) == want
