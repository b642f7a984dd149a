"""The memory budget as one stacked bar (costs.memory_bar, render.memory_bar_view) on the Costs stage and in
`walkthrough estimate`."""

from __future__ import annotations

import pytest
from app_support import MESSAGES, SIZES, app_for, settle, stage_key, widget_text
from textual.widgets import Static

from walkthrough.costs.budget import FITS, memory_plan
from walkthrough.costs.hardware import load_profiles
from walkthrough.costs.memory_bar import cells, memory_bar
from walkthrough.inspect.card import build_card
from walkthrough.inspect.gguf import open_gguf
from walkthrough.inspect.locate import BUNDLED_MODEL
from walkthrough.render.memory_bar_view import EDGE, memory_bar_view
from walkthrough.units import fmt


def test_cells_share_the_width_in_proportion_and_show_every_part():
    assert cells([6, 3, 0.01], 10, 10) == [5, 3, 1]
    assert cells([5, 5], 10, 10) == [5, 5]
    assert cells([1, 1, 1], 3, 10) == [4, 3, 3]
    assert sum(cells([2.5, 2.5, 5], 20, 40)) == 20  # a bar half full fills half its cells
    assert cells([1, 2], 0, 10) == [0, 0] and cells([1], 1, 0) == [0]


@pytest.mark.parametrize("context", [2048, 1 << 20, 1 << 26])
def test_the_bar_is_the_plan_and_the_reserve_and_over_is_what_does_not_fit(context):
    card = build_card(open_gguf(BUNDLED_MODEL))
    for hw in load_profiles().values():
        plan = memory_plan(card, hw, context)
        bar = memory_bar(plan, hw)
        reserve = sum(p.nbytes for p in bar.parts if p.key == "reserve")  # 0: none stated (left out)
        assert bar.used - reserve == pytest.approx(plan.needed.value)
        assert bar.memory - reserve == pytest.approx(plan.usable.value, abs=1)
        assert (bar.over <= 1) == (plan.verdict == FITS), (hw.id, context)
        assert bar.free + bar.used - bar.over == pytest.approx(bar.memory)
        view = memory_bar_view(bar, 60)
        head, line, *legend = (widget for widget in view.renderables)
        assert line.cell_len == 60 and (EDGE in line.plain) == (bar.over > 0)
        assert any(f"weights {fmt(plan.weights.value, 'B')}" in item.plain for item in legend)
        assert (f"{fmt(bar.over, 'B')} over" if bar.over else f"{fmt(bar.free, 'B')} free") in head.plain


def test_estimate_prints_the_bar_under_each_profile(capsys):
    from walkthrough.cli import main

    assert main(["estimate", str(BUNDLED_MODEL), "--hardware", "rtx-4090"]) == 0
    out = capsys.readouterr().out
    card = build_card(open_gguf(BUNDLED_MODEL))
    hw = load_profiles()["rtx-4090"]
    assert f"memory {fmt(hw.memory_bytes, 'B')} (rtx-4090): " in out
    assert f"system reserve {fmt(hw.reserved_gib * (1 << 30), 'B')}" in out
    assert f"weights {fmt(sum(card.bytes_by_type.values()), 'B')}" in out


@pytest.mark.app
@pytest.mark.parametrize("size", SIZES.values(), ids=SIZES.keys())
async def test_costs_stage_shows_the_bar_and_it_follows_the_knobs(fixtures_dir, size):
    app = app_for(fixtures_dir / "reference" / "ref-qwen3-f16.gguf", MESSAGES)
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        await pilot.press(stage_key("costs"))
        await settle(pilot)
        screen, state = app.screen, app.state
        for presses in ((), ("c",) * 12 + ("u",) * 10):  # the request, then one far too large for the machine
            await pilot.press(*presses)
            await settle(pilot)
            size_now = screen.request_size()
            plan = memory_plan(state.card, state.profile, size_now.context, size_now.cache_type, size_now.users)
            bar = memory_bar(plan, state.profile)
            shown = " ".join(widget_text(screen.query_one("#costs-memory", Static), 400).split())
            assert f"memory {fmt(bar.memory, 'B')} ({state.profile.id})" in shown
            assert f"KV cache {fmt(plan.kv_cache.value, 'B')}" in shown
            assert (f"{fmt(bar.over, 'B')} over" if bar.over else f"{fmt(bar.free, 'B')} free") in shown
        assert bar.over > 0 and "do not fit" in shown


@pytest.mark.parametrize("width", [40, 60, 79, 118])
def test_no_legend_item_is_split_across_lines(width):
    """Each part's name, bytes and share stay on one line at every width (at 80 columns a wrapped legend
    parted "compute buffers 112 MB" from its "(<1%)")."""
    from rich.console import Console

    card = build_card(open_gguf(BUNDLED_MODEL))
    for profile in load_profiles().values():
        plan = memory_plan(card, profile, 4096)
        bar = memory_bar(plan, profile)
        console = Console(width=width, record=True, color_system=None)
        console.print(memory_bar_view(bar, width))
        lines = console.export_text().splitlines()
        assert all(len(line.rstrip()) <= width for line in lines)
        for part in bar.parts:
            assert any(f"{part.label} {fmt(part.nbytes, 'B')} (" in line for line in lines), (profile.id, part)
