"""The app's contracts: workers post results in messages, only the UI thread writes the state, stages are declared
once (a ninth stage is one class and one line), and keys that do nothing now say so."""

from __future__ import annotations

import threading

import pytest
from app_support import posted, press_stage, reference_app, settle, widget_text
from textual.widgets import Static

from walkthrough.app import WrongThread
from walkthrough.engine.steps import Step
from walkthrough.inspect.card import ModelCard
from walkthrough.inspect.chat import ChatTokens
from walkthrough.request import events, stages
from walkthrough.request.parts import OpenedFile, Part, Rendered
from walkthrough.screens.base import StageScreen


async def test_workers_post_every_part_and_pass_as_a_message_with_its_value(fixtures_dir, monkeypatch):
    import walkthrough.request.run

    monkeypatch.setattr(walkthrough.request.run, "PROGRESS_AFTER", 0.0)  # report every layer, even of a short pass
    monkeypatch.setattr(walkthrough.request.run, "PROGRESS_EVERY", 0.0)
    seen: list = []
    app = reference_app()
    async with app.run_test(size=(80, 24), message_hook=seen.append) as pilot:
        await settle(pilot)
        ready = posted(seen, events.PartReady)
        assert [m.part for m in ready] == [Part.FILE, Part.TOKENIZER, Part.TEMPLATE, Part.TOKENS, Part.ENGINE,
                                           Part.RUN]
        values = {m.part: m.value for m in ready}
        assert isinstance(values[Part.FILE], OpenedFile) and isinstance(values[Part.FILE].card, ModelCard)
        assert isinstance(values[Part.TEMPLATE], Rendered) and isinstance(values[Part.TOKENS], ChatTokens)
        assert app.state.chat is values[Part.TOKENS] and app.state.model is values[Part.ENGINE]  # stored as posted
        await press_stage(pilot, "prefill", "space")
        await settle(pilot)
        (done,) = posted(seen, events.StepDone)
        assert isinstance(done.step, Step) and app.state.steps == (done.step,)
        layers = app.state.model.config.n_layers
        progress = [(m.done, m.total) for m in posted(seen, events.PassProgress)]
        assert progress and {total for _, total in progress} == {layers}  # bursts may be merged, never invented
        assert all(0 <= done <= layers for done, _ in progress)


async def test_only_the_ui_thread_writes_the_state(fixtures_dir):
    app = reference_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        errors: list[BaseException] = []

        def write_from_a_worker() -> None:
            try:
                app.state.chunk = 3
            except WrongThread as exc:
                errors.append(exc)

        thread = threading.Thread(target=write_from_a_worker)
        thread.start()
        thread.join()
        assert len(errors) == 1 and "chunk" in str(errors[0])
        assert app.state.chunk != 3  # refused before anything changed
        app.state.chunk = 16  # the UI thread may
        await pilot.pause()
        assert "chunk" in app.state_changed


async def test_an_assignment_redraws_without_any_bump(fixtures_dir):
    app = reference_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await press_stage(pilot, "costs")
        await pilot.pause()
        before = widget_text(app.screen.query_one("#costs-head", Static))
        app.state.profile_index += 1  # a plain assignment: no revision, no refresh call
        await pilot.pause()
        after = widget_text(app.screen.query_one("#costs-head", Static))
        assert before != after and app.state.profile.name in after


class DraftScreen(StageScreen):
    """A throwaway stage, inserted after Prefill by one line in the stage list."""

    HEADING = "a draft"
    HELP = "A stage that exists only in this test."

    def compose_body(self):
        yield Static("draft stage body", id="draft-body")


@pytest.fixture
def nine_stages(monkeypatch):
    listed = [stage for stage in stages.STAGES if stage.id != "speculate"]  # eight stages, to add a ninth
    at = [stage.id for stage in listed].index("prefill") + 1
    listed.insert(at, stages.Stage("draft", "Draft", f"{__name__}:DraftScreen"))  # the one line
    monkeypatch.setattr(stages, "STAGES", listed)
    return at + 1  # the new stage's number


async def test_a_ninth_stage_is_one_class_and_one_line(fixtures_dir, nine_stages):
    number = nine_stages
    app = reference_app(max_tokens=2)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press(str(number))
        await pilot.pause()
        assert app.current_mode == "draft" and app.screen.TITLE == f"Stage {number}: a draft"
        bar = widget_text(app.screen.query_one("#stage-bar", Static))
        assert f"{number} Draft" in bar and f"{number + 1} Decode" in bar and "9 Summary" in bar
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert f"Stage {number}: Draft" in titles and "Stage 9: Summary" in titles
        await press_stage(pilot, "costs")
        await pilot.pause()
        assert app.current_mode == "costs" and stages.number("costs") == 8
        assert f"(stage {number + 1})" in widget_text(app.screen.query_one("#costs-measured", Static))  # Decode's
        await pilot.press(str(number + 1), "enter")  # decode: play to the cap
        for _ in range(200):
            await pilot.pause(0.05)
            if app.state.finished:
                break
        await press_stage(pilot, "summary")
        await settle(pilot)
        table = widget_text(app.screen.query_one("#summary-table", Static))
        assert f"{number + 1} Decode" in table and f"{number + 2} Sampling" in table and "9 Summary" not in table
        assert f"{number - 1} Prefill" in table


async def test_keys_that_do_nothing_now_show_disabled_and_say_what_to_do(fixtures_dir):
    app = reference_app(max_tokens=1)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await press_stage(pilot, "prefill")
        await pilot.pause()
        assert app.screen.active_bindings["space"].enabled
        await pilot.press("space")  # the whole prompt picks the one token the cap allows
        await settle(pilot)
        assert app.state.finished
        assert not app.screen.active_bindings["space"].enabled  # greyed in the footer
        await pilot.press("space")
        await pilot.pause()
        notes = [n.message for n in app._notifications]
        assert any("press r to run again" in note for note in notes)
        await pilot.press("r", "y")  # y: discard the answer (r asks first, tests/test_app_confirm.py)
        await settle(pilot)
        assert app.screen.active_bindings["space"].enabled and app.state.steps == ()
