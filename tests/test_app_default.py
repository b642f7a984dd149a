"""`walkthrough` with no argument: the bundled tiny model and the default request; quitting leaves no work behind."""

from __future__ import annotations

import asyncio
import json

from app_support import app_for, press_stage, settle, shown_text

from walkthrough import cli
from walkthrough.app import make_app
from walkthrough.inspect import locate
from walkthrough.inspect.locate import BUNDLED_MODEL, DEFAULT_REQUEST


def test_default_messages_are_the_bundled_request(fixtures_dir):
    app = make_app(str(fixtures_dir / "reference" / "ref-qwen2-f32.gguf"))
    expected = json.loads(DEFAULT_REQUEST.read_text(encoding="utf-8"))
    assert [(m["role"], m["content"]) for m in app.state.messages] == [(m["role"], m["content"]) for m in expected]


async def test_no_argument_opens_the_tiny_model_with_the_default_request():
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        assert app.state.path == BUNDLED_MODEL
        assert BUNDLED_MODEL.name in shown_text(app)
        await press_stage(pilot, "template")
        await pilot.pause()
        first_user = next(m for m in app.state.messages if m["role"] == "user")
        assert first_user["content"].splitlines()[0] in shown_text(app)


def test_no_argument_without_the_tiny_model_is_one_line(capsys, monkeypatch, tmp_path):
    missing = tmp_path / BUNDLED_MODEL.name  # a checkout where the model is not built
    monkeypatch.setattr(locate, "BUNDLED_MODEL", missing)
    assert cli.main([]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(missing) in err


async def test_quitting_while_playing_leaves_no_worker_running(fixtures_dir):
    app = app_for(fixtures_dir / "reference" / "ref-qwen2moe-f32.gguf")
    started: list[int] = []
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        real_pass = app.runs.next_pass

        def counted(*args, **kwargs):
            started.append(1)
            return real_pass(*args, **kwargs)

        app.runs.next_pass = counted
        await press_stage(pilot, "decode", "enter")
        await pilot.pause(0.3)
        assert app.playing
        await pilot.press("q")
    assert not [w for w in app.workers if w.is_running]
    for _ in range(100):  # no pass is still running in a thread (it stops within a layer)
        if app.runs.idle():
            break
        await asyncio.sleep(0.05)
    assert app.runs.idle() and app.runs.current_job is None
    passes = len(started)
    await asyncio.sleep(0.3)
    assert len(started) == passes  # and none starts after the app is gone


async def test_message_text_is_shown_literally(fixtures_dir):
    hostile = "[bold red]not markup[/] \x1b[2J and \x07"
    app = app_for(fixtures_dir / "reference" / "ref-qwen2moe-f32.gguf", [{"role": "user", "content": hostile}])
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await press_stage(pilot, "template")
        await pilot.pause()
        text = shown_text(app)
        assert "[bold red]not markup[/] \\x1b[2J and \\x07" in text
        assert "\x1b[2J" not in text


# The bundled tiny model's answer to the default request, greedy (the app's default: temperature 0, seed 0),
# as llama.cpp gives it: `python assets/check_llama_cpp.py --records 0` (llama-cpp-python 0.3.36 on
# assets/tiny-clinical-moe.gguf, greedy, printed "answer (80 tokens, ended with <|im_end|>: True)").
DEFAULT_ANSWER = (
    "Checked lines 10-15: 10 ramipril no, 11 pregabalin no, 12 folic acid no, 13 simvastatin yes, "
    "14 spironolactone no, 15 mesalazine no. Yes, clarithromycin interacts with simvastatin (line 13): "
    "clarithromycin blocks statin breakdown and raises the risk of muscle damage. Advice: pause the statin "
    "during the course.<|im_end|>"
)


async def test_default_answer_is_llama_cpps():
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        assert app.state.settings.temperature == 0 and app.state.seed == 0
        await press_stage(pilot, "decode", "enter")
        for _ in range(1200):  # 80 passes of the tiny model: a few seconds, more on a loaded machine
            await pilot.pause(0.05)
            if app.state.finished:
                break
        state = app.state
        assert state.finished and not state.capped
        assert state.tokenizer.decode(state.answer_ids()) == DEFAULT_ANSWER
        assert len(state.answer_ids()) == 80
