"""The Costs stage's hosts view (x): the request over several hosts, beside one box and every machine's count.

Pilot at 80x24 and 120x40 reads the widget's content; the figures it must show come from
`costs.several_hosts` (the model under the screen), computed here for the same request.
"""

from __future__ import annotations

import pytest
from app_support import SIZES, app_for, press_stage, settle, widget_text
from textual.widgets import Static

from walkthrough.costs.several_hosts import links, several
from walkthrough.screens.cost_views import rate_text
from walkthrough.units import binary_bytes, fmt

MESSAGES = [{"role": "user", "content": "What does the record say about warfarin?"}]


def _shown(screen) -> str:
    return widget_text(screen.query_one("#costs-hosts", Static), screen.size.width)


def _expected(app, hosts: int, link_index: int):
    state = app.state
    screen = app.screen
    known = links()
    return several(state.card, state.profile, state.profiles(), known[link_index % len(known)], hosts,
                   screen.request_size())


@pytest.mark.app
@pytest.mark.parametrize("size", SIZES.values(), ids=SIZES.keys())
async def test_x_shows_each_host_and_hop_and_the_keys_change_hosts_and_link(fixtures_dir, size):
    app = app_for(fixtures_dir / "reference" / "ref-qwen3-f16.gguf", MESSAGES)
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        await press_stage(pilot, "costs")
        assert not app.screen.query_one("#costs-hosts-box").display
        await pilot.press("x")
        await pilot.pause()
        screen = app.screen
        assert screen.view == "hosts" and screen.query_one("#costs-hosts-box").display
        assert not screen.query_one("#costs-box").display
        h = _expected(app, 2, 1)
        text = _shown(screen)
        assert f"2 hosts of {app.state.profile.id} over {h.split.link.name}" in " ".join(text.split())
        for label, seconds, _ in h.split.segments():  # host 1, hop 1-2, graph to host 2, host 2, logits home
            assert any(label in line and fmt(seconds, "s") in line for line in text.splitlines()), label
        for s in h.split.shares:
            assert s.describe() in text and binary_bytes(s.kept_bytes) in text
        assert f"{rate_text(1 / h.split.token_seconds)} tokens/s" in " ".join(text.split())
        flat = " ".join(text.split())
        assert f"{fmt(h.split.prefill_sequential, 's')} one split at a time" in flat
        assert f"one box of {app.state.profile.id}: fits" in flat
        for u in h.units:  # the chips view: every machine's count
            assert u.id in text
        await pilot.press("plus", "i")
        await pilot.pause()
        h3 = _expected(app, 3, 2)
        text = _shown(screen)
        assert f"3 hosts of {app.state.profile.id} over {h3.split.link.name}" in " ".join(text.split())
        assert "hop 2-3" in text and h3.split.link.name != h.split.link.name
        await pilot.press("minus", "minus", "minus")
        await pilot.pause()
        assert screen.hosts == 1 and "hop 1-2" not in _shown(screen) and "logits home" not in _shown(screen)
        await pilot.press("h")  # another machine: the view follows it
        await pilot.pause()
        assert f"1 host of {app.state.profile.id}" in _shown(screen)
        await pilot.press("x")
        await pilot.pause()
        assert screen.view == "table" and screen.query_one("#costs-box").display
        assert screen.check_action("host_count", (1,)) is None  # dimmed outside the view
