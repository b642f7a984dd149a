"""The race at the user's rates and at reading speed (costs.race_rates), and on the Costs stage at 80x24 and 120x40."""

from __future__ import annotations

import pytest
from app_support import SIZES, app_for, play_the_answer, settle, stage_key, widget_text
from textual.widgets import Input, Static

from walkthrough.costs.race import tokens_shown
from walkthrough.costs.race_rates import (
    READING_WPM,
    parse_rates,
    reading_rate,
    typed_lanes,
    words_in,
)
from walkthrough.errors import WalkthroughError

MESSAGES = [{"role": "user", "content": "What does the record say about warfarin?"}]


def test_rates_are_read_from_what_the_user_typed():
    assert parse_rates("3 12 60") == [3.0, 12.0, 60.0]
    assert parse_rates(" 3, 12.5;60/s ") == [3.0, 12.5, 60.0]
    for bad in ("", "fast", "0", "-3", "nan", "inf", "1 2 3 4 5 6 7", "1e9"):
        with pytest.raises(WalkthroughError) as caught:
            parse_rates(bad)
        assert "\n" not in str(caught.value) and "rates" in str(caught.value)


def test_reading_speed_in_tokens_per_second_follows_the_answers_words_per_token():
    assert words_in("Don't stop: the x-ray, 2 times_over!") == 7  # an underscore parts words, as a reader does
    text = "one two three four"
    assert reading_rate(text, 8) == pytest.approx(READING_WPM / 60 * 8 / 4)
    assert reading_rate("...", 3) is None and reading_rate(text, 0) is None
    lanes = typed_lanes([3.0, 60.0], text, 8)
    assert [lane.label for lane in lanes] == ["you 3/s", "you 60/s", f"reading {READING_WPM:g}wpm"]
    assert all(lane.first_token == 0 for lane in lanes)
    assert lanes[-1].tokens_per_s == pytest.approx(reading_rate(text, 8))
    assert typed_lanes([], "", 0) == []


def _race_text(screen) -> str:
    return widget_text(screen.query_one("#costs-race", Static), 400)


@pytest.mark.app
@pytest.mark.parametrize("size", SIZES.values(), ids=SIZES.keys())
async def test_race_at_typed_rates_and_reading_speed(fixtures_dir, size):
    app = app_for(fixtures_dir / "reference" / "ref-qwen3-f16.gguf", MESSAGES)
    app.state.max_new_tokens = 6
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        await play_the_answer(pilot)
        await pilot.press(stage_key("costs"))
        await pilot.pause()
        screen = app.screen
        now = [0.0]
        screen.race_clock = lambda: now[0]
        await pilot.press("w", "t")
        await pilot.pause()
        field = screen.query_one("#costs-rates", Input)
        assert field.has_focus
        await pilot.press(*"3 fast", "enter")
        await pilot.pause()
        assert screen.race_rates == [] and field.value == "3 fast"  # refused, the typed text kept
        field.value = ""
        await pilot.press(*"3 12 60", "enter")
        await pilot.pause()
        assert screen.race_rates == [3.0, 12.0, 60.0]
        state = app.state
        pieces = [state.piece(t) for t in state.answer_ids()]
        text = "".join(pieces)
        lanes = typed_lanes([3.0, 12.0, 60.0], text, len(pieces))
        for t in (0.0, 0.2, 0.4, 1e6):
            now[0] = t
            screen._draw_race()
            shown = _race_text(screen)
            for lane in lanes:
                line = next(line for line in shown.splitlines() if line.startswith(lane.label))
                n = tokens_shown(lane, t, len(pieces))
                assert n >= 1
                assert "".join(pieces[:n]).replace("\n", " ").strip()[-6:] in line
        rate = reading_rate(text, len(pieces))
        assert rate is not None, text  # this answer has words
        assert f"= {rate:.3g} tokens/s" in " ".join(_race_text(screen).split())
        assert "doi.org/10.1016/j.jml.2019.104047" in _race_text(screen)


def test_trace_says_how_long_its_answer_takes_at_each_rate(capsys):
    import json

    from walkthrough.cli import main
    from walkthrough.costs.race import Lane, finish_time
    from walkthrough.inspect.locate import BUNDLED_MODEL

    args = ["trace", str(BUNDLED_MODEL), "--prompt", "Any interaction with warfarin?", "--steps", "12"]
    assert main([*args, "--json"]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    answer = "".join(r["chosen_piece"] for r in records if r["chosen_piece"] is not None)
    n = sum(r["chosen_piece"] is not None for r in records)
    assert main([*args, "--rates", "3,12,60"]) == 0
    out = capsys.readouterr().out
    assert f"the answer ({n} tokens, {words_in(answer)} words) written at:" in out
    for rate in (3.0, 12.0, 60.0):
        assert f"  {rate:.3g} tokens/s (you {rate:g}/s): {finish_time(Lane('', 0.0, rate), n):.1f} s" in out
    reading = reading_rate(answer, n)
    assert f"= {reading:.3g} tokens/s" in out and f"{finish_time(Lane('', 0.0, reading), n):.1f} s" in out
    assert main([*args, "--rates", "3,fast"]) == 2
