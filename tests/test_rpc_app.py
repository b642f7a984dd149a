"""The app on llama.cpp over two RPC workers: a request runs split, its passes carry the split, and the live
panel's KV table names the host of each group of layers."""

from __future__ import annotations

import pytest
from app_support import app_for, play_the_answer, settle, widget_text
from rpc_support import REPO, needs_rpc, workers

from walkthrough.engine.engines import use_workers

TINY = REPO / "walkthrough" / "assets" / "tiny-clinical-moe.gguf"


@needs_rpc
@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
async def test_the_app_runs_a_request_split_over_two_workers(size):
    from walkthrough.screens.live import LivePanel

    with workers(2) as started:
        names = [str(e) for e, _ in started]
        use_workers([e for e, _ in started], [0, 2, 2])
        try:
            app = app_for(TINY, [{"role": "user", "content": "Any interactions?"}], engine="llama.cpp")
            app.state.max_new_tokens = 3
            async with app.run_test(size=size) as pilot:
                await settle(pilot)
                await play_the_answer(pilot)
                await settle(pilot)
                step = app.state.last_step
                assert step.split is not None and [h["host"] for h in step.split["placement"]][1:] == names
                text = widget_text(app.screen.query_one(LivePanel), width=size[0])
                assert all(name[:10] in text for name in names), text
                assert f"L2-3+out {names[1]}" in text and "input this host" in text
                if size[1] >= 40:  # room for the KV cache by layer: a row per host
                    assert all(f"{name}  0-1" in text or f"{name}  2-3" in text for name in names), text
        finally:
            use_workers(None, None)
