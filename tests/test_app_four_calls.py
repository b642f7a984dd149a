"""The four calls: the app's workers post each call and the measured starts into `state.calls`; the screen shows them."""

from __future__ import annotations

import pytest
from app_support import posted, press_stage, settle, spy_posts, widget_text
from llama_support import needs_llama

from walkthrough.app import make_app
from walkthrough.engine.sampler import SamplerSettings
from walkthrough.inspect.gguf import open_gguf
from walkthrough.inspect.locate import BUNDLED_MODEL, DEFAULT_REQUEST
from walkthrough.inspect.template import load_messages, select_template
from walkthrough.inspect.tokenizer import GGUFTokenizer
from walkthrough.request import events
from walkthrough.request.calls import CallsInput
from walkthrough.screens.four_calls import FourCallsScreen


def _calls() -> CallsInput:
    """The default request's system prompt and a short record (a short prompt keeps the test quick)."""
    f = open_gguf(BUNDLED_MODEL)
    system = load_messages(DEFAULT_REQUEST)[0]
    user = {"role": "user", "content": "Record:\n1. Medication: simvastatin 20 mg at night\n\nQuestion: We plan to add "
                                       "clarithromycin 250 mg twice daily. Any interaction with the current medications?"}
    return CallsInput(BUNDLED_MODEL, f, GGUFTokenizer.from_gguf(f), select_template(f), [system, user],
                      SamplerSettings(), chunk=512, max_tokens=3)


async def test_the_four_calls_play_and_are_measured():
    seen: list = []
    app = _app()
    async with app.run_test(size=(80, 24), message_hook=seen.append) as pilot:
        await settle(pilot)
        screen = FourCallsScreen(_calls())
        await app.push_screen(screen)
        await app.workers.wait_for_complete()
        await pilot.pause()
        played = [m.turn for m in posted(seen, events.CallPlayed)]
        assert [t.label for t in played] == ["request", "follow-up", "edit", "new chat"]
        assert played[1].reuse.reused == len(played[0].chat.ids) + len(played[0].answer) - 1
        assert played[2].cause is not None and played[2].cause.cause == "edited"
        finished = posted(seen, events.CallsFinished)
        assert len(finished) == 1 and finished[0].summary.turns == 4
        for turn in played:
            assert f"{turn.label}: {turn.reuse.reused} of {turn.reuse.prompt} prompt tokens reused" in screen.shown
        await pilot.press("c")
        await app.workers.wait_for_complete()
        await pilot.pause()
        started = posted(seen, events.StartsMeasured)
        cold, warm, kept = started[0].starts
        assert cold.first_token > cold.passes > 0 and warm.first_token > 0 and kept.first_token > 0
        assert "cold, a fresh process" in screen.shown and "keep-alive" in screen.shown


async def test_the_calls_run_on_the_request_s_own_model(monkeypatch):
    """One numpy model of the file in memory: the calls play on the one the stage's run uses."""
    from walkthrough.engine.glassbox.model import Model

    built: list[Model] = []
    real = Model.__init__

    def counted(self, *args, **kwargs):
        built.append(self)
        real(self, *args, **kwargs)

    monkeypatch.setattr(Model, "__init__", counted)
    app = _app()
    async with app.run_test(size=(80, 24)) as pilot:
        await _played(pilot)
        assert app.state.calls.summary is not None and app.state.calls.summary.turns == 4
        assert len(built) == 1  # the request's model; before, the calls built a second one
        assert app.state.calls.model is app.state.model is built[0]


def _reference(calls: CallsInput) -> list[tuple[str, int, list[int]]]:
    """The four calls played straight through the engine, uncancelled: (label, tokens reused, answer)."""
    from walkthrough.engine.glassbox.model import Model
    from walkthrough.engine.glassbox.session import Session
    from walkthrough.engine.serving.turns import Conversation, FourCalls

    talk = Conversation(Session(Model(calls.file)), calls.tokenizer, calls.template, settings=calls.settings,
                        max_tokens=calls.max_tokens, chunk=calls.chunk)
    for label, messages in FourCalls.for_request(calls.messages).requests(talk, calls.messages):
        for _ in talk.ask(messages, label):
            pass
    return [(t.label, t.reuse.reused, t.answer) for t in talk.turns]


def _app():
    """The app on the bundled model (the calls run as jobs of its run service, into its state)."""
    return make_app(None, None)


def _spy_posts(app) -> list[tuple[object, bool]]:
    """(worker, cancelled when it posted) for every record the four calls' workers post from now on."""
    return spy_posts(app, events.CallPassed, events.CallPlayed, events.CallsFinished, events.StartsMeasured,
                     events.CallsFailed)


async def _played(pilot) -> tuple[FourCallsScreen, list[tuple[object, bool]]]:
    """The screen pushed and its four calls played; then what its workers post is spied on."""
    await settle(pilot)
    screen = FourCallsScreen(_calls())
    await pilot.app.push_screen(screen)
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()
    return screen, _spy_posts(pilot.app)


async def test_a_replay_stops_the_play_within_a_layer_and_plays_as_if_uncancelled(monkeypatch):
    from app_support import LayerGate

    calls = _calls()
    gate = LayerGate(monkeypatch, hold=lambda worker: worker.name == "play the four calls", at=2)
    app = _app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        screen = FourCallsScreen(calls)
        posted = _spy_posts(app)
        await app.push_screen(screen)
        await gate.wait_held(pilot)  # the first call's first pass, at its second layer
        first, layers = gate.held, gate.ran[gate.held]
        await pilot.press("r")
        assert first.is_cancelled
        await gate.wait_returned(pilot)
        assert gate.ran[first] == layers  # no layer began after the cancel
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert posted and not any(cancelled for _, cancelled in posted)  # nothing posted once cancelled
        assert all(worker is not first for worker, _ in posted[-5:])  # the play after r posted the calls
        assert [(t.label, t.reuse.reused, t.answer) for t in app.state.calls.turns] == _reference(calls)
        assert app.state.calls.summary is not None and app.state.calls.summary.turns == 4


async def test_closing_the_screen_stops_the_warm_start_within_a_layer(monkeypatch):
    from app_support import LayerGate

    gate = LayerGate(monkeypatch, hold=lambda worker: worker.name == "measure cold and warm starts", at=1)
    app = _app()
    async with app.run_test(size=(80, 24)) as pilot:
        screen, posted = await _played(pilot)
        await pilot.press("c")  # the cold start's process, then the warm start here: held at its first layer
        await gate.wait_held(pilot, polls=6000)
        measuring, layers = gate.held, gate.ran[gate.held]
        await pilot.press("escape")
        await pilot.pause()
        assert measuring.is_cancelled and app.screen is not screen
        await gate.wait_returned(pilot)
        assert gate.ran[measuring] == layers
        assert posted == []  # neither the starts nor a failure


async def test_a_replay_kills_the_cold_start_and_posts_nothing_from_it(monkeypatch):
    """The fresh process is held until killed (a real one on the tiny model may finish before the
    replay's keys arrive), so the replay always meets it running."""
    import subprocess
    import sys

    from walkthrough.engine.serving import coldstart

    children: list[subprocess.Popen] = []
    real_popen = subprocess.Popen

    def held_child(argv, **kwargs):
        assert list(argv[1:3]) == ["-m", coldstart.__name__]
        child = real_popen([sys.executable, "-c", "import time; time.sleep(60)"], **kwargs)
        children.append(child)
        return child

    app = _app()
    async with app.run_test(size=(80, 24)) as pilot:
        _, posted = await _played(pilot)
        monkeypatch.setattr(coldstart.subprocess, "Popen", held_child)
        await pilot.press("c")
        measuring = next(w for w in app.workers if w.name == "measure cold and warm starts")
        await pilot.press("r")  # while the fresh process runs
        await pilot.pause()
        assert not measuring.is_finished and len(children) == 1
        assert widget_text(app.screen.query_one("#confirm-question")).strip() == \
            "Discard these four calls: 4 calls played?  y / n"
        await pilot.press("y")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert measuring.is_cancelled
        assert children[0].returncode is not None and children[0].returncode < 0  # killed, not finished
        assert not any(worker is measuring for worker, _ in posted)
        calls = app.state.calls
        assert calls.starts is None and calls.summary is not None and not calls.status.startswith("stopped")


async def test_c_during_the_play_waits_for_the_four_calls_and_does_not_cancel_them(monkeypatch):
    from app_support import LayerGate

    shown: list[FourCallsScreen] = []
    gate = LayerGate(monkeypatch, at=1,  # held at the first layer after the first call was shown
                     hold=lambda worker: worker.name == "play the four calls" and bool(shown and shown[0].played.turns))
    app = _app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        shown.append(FourCallsScreen(_calls()))
        screen = shown[0]
        await app.push_screen(screen)
        await gate.wait_held(pilot)
        playing = gate.held
        assert app.state.calls.turns and app.state.calls.summary is None
        assert screen.check_action("starts", ()) is None  # greyed in the footer while the calls play
        await pilot.press("c")
        assert not playing.is_cancelled
        assert not any(worker.name == "measure cold and warm starts" for worker in app.workers)
        gate.release.set()
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert app.state.calls.summary is not None and app.state.calls.summary.turns == 4
        assert screen.check_action("starts", ()) is True


@pytest.mark.parametrize("engine", ["numpy", pytest.param("llama.cpp", marks=needs_llama)])
async def test_the_calls_and_their_cold_start_hold_the_memory_budget(engine):
    """--max-memory bounds every numpy model the calls use: the request's own (numpy engine), the one they
    build beside llama.cpp (they built it with the 4 GiB default), and the fresh process of the cold start
    (it held up to that default too). A quarter of the tiny model's dequantized weights, so the bound bites."""
    from walkthrough.costs.memory import dequantized_bytes

    budget = dequantized_bytes(open_gguf(BUNDLED_MODEL)) // 4
    seen: list = []
    app = make_app(None, _calls().messages, engine=engine, max_memory=budget, max_tokens=3)
    async with app.run_test(size=(80, 24), message_hook=seen.append) as pilot:
        await settle(pilot)
        state = app.state
        await press_stage(pilot, "template", "c")  # the Chat stage's four calls, from the app's own request
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert isinstance(app.screen, FourCallsScreen)
        model = state.calls.model
        assert state.calls.summary is not None and state.calls.summary.turns == 4
        assert model.engine == "numpy" and (model is state.model) == (engine == "numpy")
        assert model.weights.max_cache_bytes == budget and 0 < model.weights.cached_bytes <= budget
        await pilot.press("c")
        await app.workers.wait_for_complete()
        await pilot.pause()
        cold = posted(seen, events.StartsMeasured)[0].starts[0]
        assert cold.budget == budget and 0 < cold.held <= budget
