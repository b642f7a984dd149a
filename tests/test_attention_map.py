"""The full causal attention matrix: masked upper triangle, rows that sum to one, rows stable across passes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from walkthrough.engine.attention_map import AttentionMap
from walkthrough.engine.glassbox.model import Model
from walkthrough.engine.glassbox.session import Session
from walkthrough.engine.sampler import Sampler

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "walkthrough" / "assets" / "tiny-clinical-moe.gguf"
HYBRID = ROOT.parent / "shared" / "fixtures" / "reference" / "ref-qwen35moe-f32.gguf"
PROMPT = [5, 17, 200, 33, 41, 102, 7, 9, 30, 12, 88]  # ids every test vocabulary has


def _run(path, chunk, decode, **model_options):
    model = Model.open(path, **model_options)
    session, sampler = Session(model, record_attention=True, attention_rows=True), Sampler.greedy()
    steps = list(session.prefill(PROMPT, chunk=chunk, sampler=sampler))
    before = AttentionMap.from_steps(steps, model.config)
    steps += list(session.decode(sampler, decode))
    return model, steps, before, AttentionMap.from_steps(steps, model.config)


def test_causal_mask_rows_and_decode_rows_stay():
    model, steps, before, after = _run(TINY, 4, 3)
    n = len(PROMPT)
    assert before.length == n and after.length == n + 3
    for layer in range(model.config.n_layers):
        for head in range(model.config.n_head):
            m = after.matrix(layer, head)  # [T, T]
            upper = np.triu(np.ones_like(m, bool), 1)
            assert np.isnan(m[upper]).all() and np.isfinite(m[~upper]).all()  # the mask, and nothing else hidden
            np.testing.assert_allclose(np.nansum(m, axis=1), 1.0, atol=1e-5)
            # Decoding added rows; the prompt's rows are exactly what prefill recorded.
            np.testing.assert_array_equal(m[:n, :n], before.matrix(layer, head))
            # The newest row is the last-token row every pass already records.
            np.testing.assert_array_equal(m[-1, :], steps[-1].layers[layer].attention[head])


def test_rows_do_not_depend_on_the_chunk_size():
    # Plain float products: llama.cpp's activation rounding can tip a value over a rounding step between
    # chunkings (engine/glassbox/session.py), which moves a weight by ~1e-3.
    _, _, one, _ = _run(TINY, None, 0, match_llama_cpp=False)
    _, _, chunked, _ = _run(TINY, 3, 0, match_llama_cpp=False)
    for layer, m in one.layers.items():
        np.testing.assert_allclose(np.nan_to_num(chunked.layers[layer]), np.nan_to_num(m), atol=1e-4)  # F16 keys: summation order


def test_row_zero_attends_only_to_itself_and_the_top_list():
    model, _steps, _, amap = _run(TINY, None, 0)
    m = amap.matrix(0, 0)
    assert m[0, 0] == 1.0  # the first token sees only itself
    assert (m[3, :4] > 0).all()  # a softmax: every visible key gets some weight
    assert amap.kv_head(0, model.config.n_head - 1) == model.config.n_head_kv[0] - 1
    top = amap.top(0, 0, 5, 3)
    assert len(top) == 3 and top[0][1] >= top[1][1] >= top[2][1]


def test_hybrid_layers_without_a_matrix_say_why():
    model, _, _, amap = _run(HYBRID, None, 1)
    linear = [i for i, kind in enumerate(model.config.mixers) if kind == "linear"]
    assert linear and all("linear attention" in amap.missing(i) for i in linear)
    full = [i for i in range(model.config.n_layers) if i not in linear]
    assert full and all(amap.missing(i) is None for i in full)


def test_rows_bytes_bounds_what_a_run_records_and_is_near_it():
    # rows_bytes counted a full T x T square per head (twice what a causal run keeps), so with the queries and
    # keys beside the rows SmolLM2's default request (453 positions) passed the budget and lost its matrix
    from walkthrough.engine.attention_map import rows_bytes

    for chunk in (1, 4, 11):
        model, steps, _, after = _run(TINY, chunk, 5)
        kept = sum(t.attention_rows.nbytes + t.queries.nbytes + t.keys.nbytes
                   for step in steps for t in step.layers if t.attention_rows is not None)
        bound = rows_bytes(model.config, after.length, chunk)
        assert kept <= bound < 1.6 * kept, (chunk, kept, bound)


@pytest.mark.app
async def test_smollm2_default_request_keeps_its_attention_matrix():
    from app_support import press_stage, settle, shown_text
    from real_weights_support import find_smollm2

    from walkthrough.app import make_app

    path = find_smollm2()
    if path is None:
        pytest.skip("SmolLM2 not found (SMOLLM2_GGUF)")
    app = make_app(str(path))  # the default request
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        assert len(app.state.prompt_ids) + app.state.max_new_tokens > 400  # the default request, long
        await press_stage(pilot, "prefill", "a")
        await settle(pilot)
        text = shown_text(app)
        assert "shorten the request" not in text and "no pass has run yet" in text, text
