"""A model's lifecycle (engine.serving.lifecycle): the schedule's rules, the measured starts split, the four calls'
overlay (k) at 80x24 and 120x40, and `trace --four-calls --measure`."""

from __future__ import annotations

import json

import pytest
from app_support import SIZES, posted, settle, widget_text
from test_app_four_calls import _app, _calls
from textual.widgets import Static

from walkthrough.engine.serving.coldstart import StartTimes
from walkthrough.engine.serving.lifecycle import GAPS, KEEP_ALIVE, KEEP_ALIVES, StartCost, lifecycle
from walkthrough.inspect.gguf import open_gguf
from walkthrough.inspect.locate import BUNDLED_MODEL
from walkthrough.render.lifecycle_view import clock, lifecycle_lines, timeline_bar
from walkthrough.request import events
from walkthrough.screens.four_calls import FourCallsScreen

COLD = StartTimes(1.5, imports=0.4, open=0.1, passes=0.5)
WARM, KEPT = StartTimes(0.2, passes=0.2), StartTimes(0.05, passes=0.05)


def test_a_cold_start_splits_into_load_first_use_and_the_prompt():
    c = StartCost.measured(COLD, WARM, KEPT)
    assert c.load == COLD.first_token - COLD.passes and c.prompt == WARM.first_token and c.kept == KEPT.first_token
    assert c.first_use == pytest.approx(COLD.passes - WARM.first_token)
    assert c.cold == pytest.approx(COLD.first_token)
    slow_warm = StartCost.measured(COLD, StartTimes(0.9, passes=0.9), KEPT)
    assert slow_warm.first_use == 0.0  # a warm start slower than the cold passes: no first use to show


def test_questions_within_keep_alive_find_the_model_loaded():
    c = StartCost.measured(COLD, WARM, KEPT)
    life = lifecycle(c, (180.0, 600.0), KEEP_ALIVE, held_bytes=10)
    q1, q2, q3 = life.questions
    assert (q1.at, q2.at, q3.at) == (0.0, 180.0, 780.0)
    assert not q1.loaded and q1.first_token == c.cold and q1.unloaded_at is None
    assert q2.loaded and q2.first_token == c.prompt and q2.idle == pytest.approx(180.0 - q1.done)
    assert not q3.loaded and q3.unloaded_at == pytest.approx(q2.done + KEEP_ALIVE) and q3.first_token == c.cold
    assert life.unloaded_at == pytest.approx(q3.done + KEEP_ALIVE)
    assert life.waiting == pytest.approx(2 * c.cold + c.prompt)
    always = lifecycle(c, (180.0, 600.0), 1800.0)
    assert [q.loaded for q in always.questions] == [False, True, True]
    never = lifecycle(c, (180.0, 600.0), 0.0)
    assert [q.loaded for q in never.questions] == [False, False, False]
    assert KEEP_ALIVES[0] == KEEP_ALIVE == 300.0 and GAPS == (180.0, 600.0)


def test_the_lines_say_each_state_and_the_timeline():
    c = StartCost.measured(COLD, WARM, KEPT)
    life = lifecycle(c, held_bytes=2_000_000)
    lines = lifecycle_lines(life, 2_100_000, 40)
    text = "\n".join(lines)
    assert "github.com/ollama/ollama/blob/main/docs/faq.md" in text
    for state in ("1 pull", "2 load", "3 first use", "4 serve", "5 idle", "6 unload"):
        assert state in text
    assert f"{clock(life.questions[2].unloaded_at):>7} unloaded (keep-alive expired)" in text
    bar = timeline_bar(life, 40)
    assert len(bar) == 40 and bar.count("▲") == 3 and "·" in bar and bar in text
    assert clock(185.2) == "3:05" and clock(3725) == "1:02:05"


@pytest.mark.app  # slow: a fresh process for the cold start
def test_trace_prints_the_lifecycle_of_its_measured_starts(capsys):
    from walkthrough.cli import main

    args = ["trace", str(BUNDLED_MODEL), "--four-calls", "--measure", "--steps", "2", "--prompt", "Any interaction?"]
    assert main([*args, "--json"]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    start = next(r["start"] for r in records if "start" in r)
    life = next(r["lifecycle"] for r in records if "lifecycle" in r)
    cold, warm = start["cold"], start["warm"]
    assert life["load_s"] == pytest.approx(cold["first_token"] - cold["passes"], abs=1e-3)
    assert life["prompt_s"] == pytest.approx(warm["first_token"], abs=1e-3)
    assert life["keep_alive_s"] == KEEP_ALIVE
    assert [q["loaded"] for q in life["questions"]] == [False, True, False]
    with open_gguf(BUNDLED_MODEL) as f:
        assert life["held_bytes"] == f.data_bytes


@pytest.mark.app
@pytest.mark.parametrize("size", SIZES.values(), ids=SIZES.keys())
async def test_the_four_calls_show_the_lifecycle_of_the_measured_starts(size):
    seen: list = []
    app = _app()
    async with app.run_test(size=size, message_hook=seen.append) as pilot:
        await settle(pilot)
        calls = _calls()
        screen = FourCallsScreen(calls)
        await app.push_screen(screen)
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert screen.check_action("keep_alive", ()) is None  # nothing measured yet
        await pilot.press("c")
        await app.workers.wait_for_complete()
        await settle(pilot)
        cold, warm, kept = posted(seen, events.StartsMeasured)[0].starts
        for keep in KEEP_ALIVES:
            life = lifecycle(StartCost.measured(cold, warm, kept), keep_alive=keep, held_bytes=calls.file.data_bytes)
            shown = screen.shown
            assert f"load: {life.cost.load:.2f} s" in shown and f"first use: {life.cost.first_use:.2f} s" in shown
            for q in life.questions:
                assert f"{clock(q.at):>7} question {q.number}: " + ("loaded" if q.loaded else "not loaded") in shown
                assert f"first token in {q.first_token:.2f} s" in shown
            assert f"{clock(life.unloaded_at):>7} unloaded; the questions waited {life.waiting:.2f} s" in shown
            box = screen.query_one("#calls-text", Static)  # the bar and its key, each on one line (the key wrapped)
            laid = [line.strip() for line in widget_text(box, box.content_region.width).splitlines()]
            assert "▲ a question, ━ loaded, · unloaded" in laid
            assert any(line.count("▲") == 3 and set(line) <= set("▲━·") for line in laid), [l for l in laid if "▲" in l]
            await pilot.press("k")
            await pilot.pause()
