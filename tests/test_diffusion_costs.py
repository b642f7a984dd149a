"""A diffusion LM's cost beside autoregression's (issue 31 item 12): the counts from the card, and the Costs
stage's diffusion view (d) at 80x24 and 120x40."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from app_support import SIZES, app_for, settle, stage_key, widget_text
from textual.widgets import Static

from walkthrough.costs.budget import MICRO_BATCH
from walkthrough.costs.diffusion import compare
from walkthrough.costs.estimate import attention_flops
from walkthrough.costs.hardware import load_profiles
from walkthrough.inspect.card import build_card
from walkthrough.inspect.gguf import open_gguf
from walkthrough.inspect.locate import BUNDLED_MODEL
from walkthrough.units import fmt

SMOLLM2 = os.environ.get("SMOLLM2_GGUF")
FILES = [BUNDLED_MODEL] + ([Path(SMOLLM2)] if SMOLLM2 else [])


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_counts_follow_the_card(path):
    card = build_card(open_gguf(path))
    hw = load_profiles()["desktop-ddr5"]
    prompt, answer = 300, 200
    c = compare(card, hw, prompt, answer, 50)
    ar, dl = c.autoregressive, c.diffusion
    canvas = prompt + answer
    assert (c.canvas, c.steps, dl.passes, dl.positions) == (canvas, 50, 50, 50 * canvas)
    assert dl.tokens_per_pass == 4
    # Every step: 2 FLOPs per active parameter per canvas position, every position attending to all.
    assert dl.flops == pytest.approx(50 * (2 * card.n_params_active * canvas + canvas * attention_flops(card, canvas)))
    # Autoregression: the prompt once (in micro-batches), then one pass per further answer token.
    assert ar.passes == -(-prompt // MICRO_BATCH) + answer - 1 and ar.positions == prompt + answer - 1
    causal = 2 * card.n_params_active * (prompt + answer - 1) + attention_flops(card, prompt + answer - 1,
                                                                                 window_sum=True)
    assert ar.flops == pytest.approx(causal, rel=1e-9)
    # The roofline: no way is faster than its bytes at full bandwidth or its FLOPs at full compute.
    for way in (ar, dl):
        assert way.seconds >= max(way.bytes_read / hw.bandwidth, way.flops / hw.compute) * (1 - 1e-9)
    assert dl.seconds > ar.seconds
    assert c.logits_bytes == card.vocab_size * canvas * 4
    # Halving the steps halves diffusion's work and leaves autoregression's alone.
    half = compare(card, hw, prompt, answer, 25)
    assert half.diffusion.flops == pytest.approx(dl.flops / 2) and half.autoregressive == ar
    assert compare(card, hw, prompt, answer, 10_000).steps == answer  # at least one token per step
    with pytest.raises(ValueError):
        compare(card, hw, 0, answer, 10)


@pytest.mark.app
@pytest.mark.parametrize("size", SIZES.values(), ids=SIZES.keys())
async def test_costs_diffusion_view(size):
    app = app_for(BUNDLED_MODEL)
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        await pilot.press(stage_key("costs"), "d")
        await pilot.pause()
        screen, state = app.screen, app.state
        size_now = screen.request_size()
        text = " ".join(widget_text(screen.query_one("#costs-diffusion", Static), screen.size.width).split())
        c = compare(state.card, state.profile, size_now.prompt_tokens, size_now.output_tokens,
                    size_now.output_tokens)
        assert f"diffusion, {c.steps:,} steps" in text and f"{c.canvas:,} positions" in text
        assert fmt(c.diffusion.flops, "FLOP") in text and fmt(c.autoregressive.flops, "FLOP") in text
        assert "This file is autoregressive (qwen2moe)" in text or f"({state.card.architecture})" in text
        await pilot.press("left_square_bracket")
        await pilot.pause()
        half = compare(state.card, state.profile, size_now.prompt_tokens, size_now.output_tokens,
                       max(1, round(c.steps / 2)))
        text = " ".join(widget_text(screen.query_one("#costs-diffusion", Static), screen.size.width).split())
        assert f"diffusion, {half.steps:,} steps" in text and fmt(half.diffusion.flops, "FLOP") in text
        await pilot.press("d")
        await pilot.pause()
        assert screen.view == "table"


def test_estimate_cli_sets_diffusion_beside(capsys):
    import json

    from walkthrough.cli import main

    args = ["estimate", str(BUNDLED_MODEL), "--hardware", "rtx-4090", "--prompt-tokens", "700", "--output-tokens",
            "300", "--diffusion-steps", "30"]
    assert main([*args, "--json"]) == 0
    record = json.loads(capsys.readouterr().out)[0]["diffusion"]
    c = compare(build_card(open_gguf(BUNDLED_MODEL)), load_profiles()["rtx-4090"], 700, 300, 30)
    assert record["diffusion"] == pytest.approx(vars(c.diffusion)) and record["steps"] == 30
    assert record["autoregressive"] == pytest.approx(vars(c.autoregressive))
    assert main(args) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "diffusion, 30 steps" in out and fmt(c.diffusion.flops, "FLOP") in out
    assert main([*args[:-1], "0"]) == 2
    assert "--diffusion-steps 0: must be at least 1" in capsys.readouterr().err
