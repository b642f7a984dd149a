"""The Costs stage's knobs, curves and all-machines view, driven with Pilot at 80x24 and 120x40 (widget content read)."""

from __future__ import annotations

from contextlib import asynccontextmanager

import pytest
from app_support import SIZES, app_for, play_the_answer, settle, stage_key, widget_text
from textual.widgets import Static
from textual_plotext import PlotextPlot

from walkthrough.costs.hardware import load_profiles
from walkthrough.costs.machines import machine_rows, sort_rows
from walkthrough.costs.request_size import RequestSize, estimate_for
from walkthrough.units import fmt

COSTS = stage_key("costs")
MESSAGES = [{"role": "user", "content": "What does the record say about warfarin?"}]


@asynccontextmanager
async def costs_stage(fixtures_dir, model: str, size: tuple[int, int]):
    """(app, pilot) with the reference `model` open on the Costs stage at `size`."""
    app = app_for(fixtures_dir / "reference" / model, MESSAGES)
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        await pilot.press(COSTS)
        await pilot.pause()
        yield app, pilot


def text_of(screen, selector: str) -> str:
    """A Static's content as plain text, laid out at the screen's width."""
    return widget_text(screen.query_one(selector, Static), screen.size.width)


@pytest.mark.parametrize("size", SIZES.values(), ids=SIZES.keys())
async def test_knobs_move_every_figure_and_reset(fixtures_dir, size):
    async with costs_stage(fixtures_dir, "ref-qwen3-f16.gguf", size) as (app, pilot):
        screen = app.screen
        state = app.state
        base = RequestSize(None, len(state.prompt_ids), state.max_new_tokens)
        assert screen.request_size() == base
        await pilot.press("l", "l", "o", "c", "k", "u")
        await pilot.pause()
        want = base.scaled("prompt_tokens", 4).scaled("output_tokens", 2).scaled("context", 2)
        want = want.next_cache_type().scaled("users", 2)
        assert screen.size_knobs == want
        assert want.describe() in " ".join(text_of(screen, "#costs-head").split())
        e = estimate_for(state.card, state.profile, want)
        table = text_of(screen, "#costs-table")
        assert fmt(e.memory.needed.value, "B") in table
        assert fmt(e.prefill.seconds.value, "s") in table
        await pilot.press("L")
        await pilot.pause()
        assert screen.size_knobs.prompt_tokens == want.prompt_tokens // 2
        await pilot.press("r")
        await pilot.pause()
        assert screen.request_size() == base and "request:" in text_of(screen, "#costs-head")


@pytest.mark.parametrize("size", SIZES.values(), ids=SIZES.keys())
async def test_v_cycles_table_and_three_plots_with_the_numbers_as_text(fixtures_dir, size):
    async with costs_stage(fixtures_dir, "ref-qwen35moe-f32.gguf", size) as (app, pilot):
        screen = app.screen
        card = app.state.card
        curves = text_of(screen, "#costs-curves")
        for label in ("KV f16", "KV q4_0", "every layer K+V f16", "ceiling"):
            assert label in curves
        assert fmt(card.kv_bytes(256, "q8_0"), "B") in curves
        plot = screen.query_one("#costs-plot", PlotextPlot)
        assert not plot.display
        for title in ("KV cache vs context", "time to first token vs prompt", "decode vs context", "users at"):
            await pilot.press("v")
            await pilot.pause()
            await pilot.pause()
            assert plot.size.width >= 70 and plot.size.height >= 10  # the plot has the body's room
            assert plot.display and not screen.query_one("#costs-box").display
            drawn = plot.render().plain
            assert title in drawn and ("256" in drawn or title == "users at")
            assert title == "KV cache vs context" or "±" in drawn or "no band" in drawn  # modelled: its band
            assert plot.render().plain == drawn  # drawn again the same (plotext keeps state between builds)
        await pilot.press("v")
        await pilot.pause()
        assert screen.view == "table" and screen.query_one("#costs-box").display


@pytest.mark.parametrize("size", SIZES.values(), ids=SIZES.keys())
async def test_every_machine_side_by_side_sorted_by_s(fixtures_dir, size):
    app = app_for(fixtures_dir / "reference" / "ref-qwen3-f16.gguf", MESSAGES)
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        await pilot.press(COSTS, "s")  # s sorts only the machines view: greyed in the table
        await pilot.pause()
        screen = app.screen
        assert screen.sort_key == "decode"
        await pilot.press("m")
        await pilot.pause()
        rows = machine_rows(app.state.card, list(load_profiles().values()), screen.request_size())
        for key in ("decode", "first token", "bandwidth"):
            assert screen.sort_key == key
            listed = text_of(screen, "#costs-machines")
            assert f"by {key}" in listed
            positions = [listed.index(f" {r.id}") for r in sort_rows(rows, key)]
            assert positions == sorted(positions)
            await pilot.press("s")
            await pilot.pause()
        await pilot.press("m")
        await pilot.pause()
        assert screen.view == "table"


@pytest.mark.parametrize("size", SIZES.values(), ids=SIZES.keys())
async def test_race_replays_the_answer_at_each_machines_speed(fixtures_dir, size):
    from walkthrough.costs.race import lanes, tokens_shown

    app = app_for(fixtures_dir / "reference" / "ref-qwen3-f16.gguf", MESSAGES)
    app.state.max_new_tokens = 3
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        await play_the_answer(pilot)
        await pilot.press(COSTS)
        await pilot.pause()
        screen = app.screen
        now = [0.0]
        screen.race_clock = lambda: now[0]
        await pilot.press("w")
        await pilot.pause()
        state = app.state
        pieces = [state.piece(t) for t in state.answer_ids()]
        assert pieces
        rows = sort_rows(machine_rows(state.card, list(load_profiles().values()), screen.request_size()), "decode")
        want = lanes(rows, state.measured())
        assert want[-1].label.startswith("here (")  # this machine's measured rate runs too
        for t in (0.0, min(lane.first_token for lane in want), 1e6):
            now[0] = t
            screen._draw_race()
            shown = text_of(screen, "#costs-race")
            assert f"{t:.1f} s" in shown
            for lane in want:
                line = next(line for line in shown.splitlines() if line.startswith(lane.label[:14]))
                n = tokens_shown(lane, t, len(pieces))
                written = "".join(pieces[:n]).replace("\n", " ").strip()
                assert written[-8:] in line
        await pilot.press("w")
        await pilot.pause()
        assert screen.view == "table" and screen._race_timer is None


async def test_race_heading_fits_80_columns_and_rates_have_no_exponent(fixtures_dir):
    # The heading ran past 80 columns ('... (w again: leave); ±?:…') and fast lanes read '2.26e+04/s'
    from walkthrough.costs.race import lanes
    from walkthrough.screens.cost_views import rate_text

    app = app_for(fixtures_dir / "reference" / "ref-qwen3-f16.gguf", MESSAGES)
    app.state.max_new_tokens = 3
    async with app.run_test(size=SIZES["small"]) as pilot:
        await settle(pilot)
        await play_the_answer(pilot)
        await pilot.press(COSTS)
        await pilot.pause()
        screen = app.screen
        screen.race_clock = lambda: 0.0
        await pilot.press("w")
        await pilot.pause()
        box = screen.query_one("#costs-race", Static)
        shown = widget_text(box, box.size.width)
        assert "…" not in "\n".join(shown.splitlines()[:2]) and "says why" in shown, shown
        state = app.state
        rows = sort_rows(machine_rows(state.card, list(load_profiles().values()), screen.request_size()), "decode")
        want = lanes(rows, state.measured())
        assert any(lane.tokens_per_s >= 1e4 for lane in want)
        assert "e+" not in shown
        for lane in want:  # each name whole ("here (numpy, measured)" was cut to "here (numpy, m")
            line = next(line for line in shown.splitlines() if line.startswith(lane.label + " "))
            assert f"{rate_text(lane.tokens_per_s)}/s" in line


@pytest.mark.parametrize("size", [*SIZES.values(), (100, 30)], ids=[*SIZES.keys(), "100x30"])
async def test_a_curve_above_zero_keeps_its_axis_labels_apart(fixtures_dir, size):
    """Issue 28, item 11: on Gemma 3 270M (32K context, decode from 509 down to about 100 tokens/s) the 0 tick
    fell below the canvas, onto the x axis ('0 tokens/s└┬──' at 80x24, '0 tokens/s256   512' at 100x30).
    The same shape here: eight contexts, two series well above 0."""
    import re

    from walkthrough.costs.curves import Curve, Series

    xs = tuple(256 << i for i in range(8))
    curve = Curve("decode vs context", "context (tokens)", "tokens/s", xs,
                  (Series("ceiling", "tokens/s", tuple(509.0 - 40 * i for i in range(8))),
                   Series("realistic", "tokens/s", tuple(380.0 - 35 * i for i in range(8)))))
    app = app_for(fixtures_dir / "reference" / "ref-qwen35moe-f32.gguf", MESSAGES)
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        await pilot.press(COSTS, "v", "v", "v")  # the decode plot
        await pilot.pause()
        plot = app.screen.query_one("#costs-plot", PlotextPlot)
        plot.show(curve)
        await pilot.pause()
        lines = plot.render().plain.splitlines()
    labelled = [line for line in lines if "tokens/s" in line and "vs context" not in line]
    assert len(labelled) == 5  # the five y ticks, 0 among them
    for line in labelled:
        assert re.match(r"^\s*[\d,]+ tokens/s[┤│]", line), line  # each on the canvas, beside the axis
    ticks = next(line for line in lines if "256" in line and "512" in line)
    assert "tokens/s" not in ticks and "32K" in ticks


@pytest.mark.parametrize("size", SIZES.values(), ids=SIZES.keys())
async def test_a_key_of_another_view_says_which_view_is_its(fixtures_dir, size):
    # t, b, + / -, i, [ / ] and s greyed in the footer outside their views and did nothing when pressed
    async with costs_stage(fixtures_dir, "ref-qwen3-f16.gguf", size) as (app, pilot):
        screen = app.screen
        assert screen.view == "table"
        for key, opens in (("b", "e"), ("t", "w"), ("plus", "x"), ("right_square_bracket", "d"), ("s", "m")):
            app.clear_notifications()
            await pilot.press(key)
            await pilot.pause()
            said = [n.message for n in app._notifications]
            assert len(said) == 1 and f"press {opens} first" in said[0], (key, said)
            assert screen.view == "table"
        await pilot.press("e")
        await pilot.pause()
        app.clear_notifications()
        await pilot.press("b")  # in its view: it works, and says nothing
        await pilot.pause()
        assert not list(app._notifications) and screen.quant_index == 1
