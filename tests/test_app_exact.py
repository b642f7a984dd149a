"""`walkthrough --exact-products`: the app's numpy engine multiplies as ggml's CPU kernels do.

The app's passes give the logits of a `Model(exact_products=True)` session bit for bit (which
`test_arch_exact.py` holds to llama.cpp's), not the default products', and the File stage says so.
"""

from __future__ import annotations

import numpy as np
from app_support import MESSAGES, app_for, press_stage, settle, shown_text

from walkthrough.engine.glassbox.model import Model
from walkthrough.engine.glassbox.session import Session
from walkthrough.engine.sampler import Sampler, SamplerSettings
from walkthrough.inspect.gguf import open_gguf

QUANTIZED = "ref-llama-q4_0.gguf"  # Q4_0 weights: default and exact products part in the last bits


def _logits(model: Model, prompt: list[int], answer: list[int]) -> list[np.ndarray]:
    """The last-position logits of one prefill of `prompt`, then of a decode pass per answer token but the last."""
    session = Session(model)  # the app's cache type (F16, llama.cpp's default)
    greedy = Sampler(SamplerSettings(temperature=0.0))
    rows = [list(session.prefill(prompt, sampler=greedy))[-1].logits]
    for token in answer[:-1]:
        rows.append(session.feed([token], phase="decode").logits)
    return rows


async def test_the_apps_passes_are_the_exact_products(fixtures_dir):
    path = fixtures_dir / "reference" / QUANTIZED
    app = app_for(path, MESSAGES, exact_products=True)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        state = app.state
        assert "The numpy engine, with exact products, can run this file" in shown_text(app)
        assert state.model.exact_products
        await press_stage(pilot, "decode")
        for _ in range(1 + 3):  # the whole prompt (one chunk), then up to three tokens (this answer ends at 2)
            await pilot.press("space")
            await app.workers.wait_for_complete()
            await settle(pilot)
        shown = [step.logits for step in state.steps]
        prompt, answer = list(state.prompt_ids), state.answer_ids()
    f = open_gguf(path)
    exact = _logits(Model(f, exact_products=True), prompt, answer)
    default = _logits(Model(f), prompt, answer)
    assert len(shown) == len(exact) >= 2  # a prefill and a decode pass at least
    assert all(np.array_equal(a, b) for a, b in zip(shown, exact))
    assert not all(np.array_equal(a, b) for a, b in zip(shown, default))  # the switch is what made them so
