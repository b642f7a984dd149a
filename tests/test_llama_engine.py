"""The llama.cpp engine against the reference fixtures and the numpy engine, and on an architecture only it runs.

The fixtures' logits were computed by llama.cpp (llama-cpp-python 0.3.36, F32 KV
cache, no flash attention) on another machine: the llama.cpp engine follows them
within the fixtures' per-type tolerances (llama.cpp's numbers differ across CPU
instruction sets), and reproduces llama.cpp run here on the same tokens to 1e-4;
both engines fed the same tokens must choose the same experts at every layer and
position, and their logits agree within the fixtures' tolerances (those of
test_engine_reference). KV bytes are checked against the model card's count,
which is derived from the metadata, not from llama.cpp.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from bench.make_arch_references import reference
from conftest import FIXTURES_DIR
from llama_support import OLMOE, needs_llama, write_olmoe
from test_engine_reference import _cases, _tolerance, assert_follows_reference

from walkthrough.cli import main
from walkthrough.engine.glassbox.config import UnsupportedArchitecture
from walkthrough.engine.glassbox.model import Model
from walkthrough.engine.glassbox.session import Session
from walkthrough.engine.sampler import Sampler, SamplerSettings
from walkthrough.inspect.card import build_card
from walkthrough.inspect.gguf import open_gguf

pytestmark = needs_llama

LLAMA_SELF_TOLERANCE = 1e-4  # same program, same inputs: only thread scheduling may reorder float sums


def _llama(path: Path, **kwargs):
    from walkthrough.engine.llama.model import LlamaModel
    from walkthrough.engine.llama.session import LlamaSession

    return LlamaSession(LlamaModel.open(path), **kwargs)


def _run(session, ref) -> tuple[np.ndarray, list]:
    """Every position's logits for prompt + greedy ids, and the steps (prefill in one pass, all rows)."""
    steps = list(session.prefill(ref["prompt_ids"], all_logits=True))
    logits = [np.concatenate([s.all_logits for s in steps])]
    for token in ref["greedy_ids"]:
        steps.append(session.feed([token], phase="decode"))
        logits.append(steps[-1].logits[None, :])
    return np.concatenate(logits), steps


@pytest.mark.parametrize("path", _cases(), ids=lambda p: p.stem)
def test_llama_engine_follows_the_reference_logits(path: Path):
    """The fixtures were written by llama.cpp on another machine, and llama.cpp is deterministic on one
    machine, not across CPU instruction sets (its kernels and sum orders differ by ISA: on an AVX-512
    FP16/BF16/VNNI Xeon ref-gemma3-f32 lands 5.8e-4 away, ref-qwen3-f16 9.7e-4, ref-mistral3-q8_0
    0.038). So the engine is held to them at the fixtures' per-type tolerances, as the numpy engine
    is; the next test holds it to llama.cpp on this machine at the tight tolerance."""
    ref = json.loads(path.with_suffix(".logits.json").read_text())
    with open_gguf(path) as f:
        tol, exact = _tolerance(build_card(f).bytes_by_type)
    ours, steps = _run(_llama(path, kv_type="f32", record_attention=True), ref)  # no flash attention
    assert_follows_reference(ours, ref, tol, exact)
    n_prompt = len(ref["prompt_ids"])
    assert [s.kv_len for s in steps] == list(range(n_prompt, n_prompt + len(steps)))


@pytest.mark.app  # slow: llama-cpp-python's Llama loaded for every reference
@pytest.mark.parametrize("path", _cases(), ids=lambda p: p.stem)
def test_llama_engine_is_llama_cpp_on_this_machine(path: Path):
    """The program that wrote the fixtures, run here on the same prompt, and the engine on its tokens:
    the engine reads llama.cpp's internals through its eval callback but must not change its numbers."""
    ref = json.loads(path.with_suffix(".logits.json").read_text())
    here = reference(path, ref["prompt_ids"])  # llama-cpp-python's Llama, as the fixtures were made
    ours, _ = _run(_llama(path, kv_type="f32", record_attention=True), here)
    assert_follows_reference(ours, here, LLAMA_SELF_TOLERANCE, exact=True)


@pytest.mark.parametrize("path", _cases(), ids=lambda p: p.stem)
def test_engines_agree_on_experts_logits_and_cache(path: Path):
    ref = json.loads(path.with_suffix(".logits.json").read_text())
    try:
        model = Model.open(path)
    except UnsupportedArchitecture as exc:
        pytest.skip(str(exc))
    tol, _ = _tolerance(model.card.bytes_by_type)
    # As the fixtures were made: F32 KV cache, no flash attention (recording attention turns it off).
    numpy_logits, numpy_steps = _run(Session(model, kv_type="f32"), ref)
    llama_logits, llama_steps = _run(_llama(path, kv_type="f32", record_attention=True), ref)
    assert float(np.max(np.abs(numpy_logits - llama_logits))) <= tol
    for a, b in zip(numpy_steps, llama_steps):
        assert (a.start, a.end, a.kv_len) == (b.start, b.end, b.kv_len)
        assert a.kv_bytes == 2 * model.card.kv_bytes(b.kv_len, "f16")  # F32: twice F16's bytes
        if model.card.architecture == "gemma4":
            # Without flash attention V is stored transposed, and llama.cpp then gives every layer's V rows
            # the widest layer's width (n_embd_v_gqa_max, src/llama-kv-cache.cpp): more than the card counts.
            assert b.kv_bytes > a.kv_bytes
        else:
            assert b.kv_bytes == a.kv_bytes
        assert a.state_bytes == b.state_bytes
        for x, y in zip(a.layers, b.layers):
            assert (x.mixer, x.ffn) == (y.mixer, y.ffn)
            if x.experts is None:
                assert y.experts is None
                continue
            # Same experts for every token of the pass (as sets: near-equal router scores may swap order).
            assert np.array_equal(np.sort(x.experts, axis=1), np.sort(y.experts, axis=1)), (a.start, x.index)
            order_x, order_y = np.argsort(x.experts, axis=1), np.argsort(y.experts, axis=1)
            wx = np.take_along_axis(x.expert_weights, order_x, axis=1)
            wy = np.take_along_axis(y.expert_weights, order_y, axis=1)
            assert np.allclose(wx, wy, atol=max(tol, 1e-3))
        widened = {"kv_cache", "total"} if model.card.architecture == "gemma4" else set()  # see above
        assert {k: v for k, v in a.bytes_read.items() if k not in widened} == \
            {k: v for k, v in b.bytes_read.items() if k not in widened}, a.start


# The shared references only: which files `_cases()` lists first depends on where the checkout sits, and on
# sliding-window layers (gemma3, gemma4) llama.cpp's kq_soft_max covers only the window's cache cells, which
# the engine does not yet map back to positions.
@pytest.mark.parametrize("path", [p for p in _cases((FIXTURES_DIR / "reference",))
                                  if "q8_0" not in p.name and "q4_0" not in p.name][:2], ids=lambda p: p.stem)
def test_attention_weights_and_surprisal_match_the_numpy_engine(path: Path):
    ref = json.loads(path.with_suffix(".logits.json").read_text())
    ids = ref["prompt_ids"][:10]
    options = {"kv_type": "f32", "record_attention": True, "attention_rows": True, "measure_surprisal": True}
    runs = []
    for session in (Session(Model.open(path), **options), _llama(path, **options)):
        runs.append(list(session.prefill(ids, chunk=6)) + [session.feed([ids[0]], phase="decode")])
    for a, b in zip(*runs):
        assert np.allclose(a.surprisal, b.surprisal, atol=1e-3, equal_nan=True)
        for x, y in zip(a.layers, b.layers):
            if x.attention is None:
                assert y.attention is None
                continue
            assert y.attention.shape == x.attention.shape == (x.attention.shape[0], a.end)
            assert np.allclose(x.attention, y.attention, atol=1e-4)
            assert y.attention_rows.shape == x.attention_rows.shape == (x.attention.shape[0], a.end - a.start, a.end)
            assert np.allclose(x.attention_rows, y.attention_rows, atol=1e-4)


def test_a_pass_stops_when_progress_raises(tmp_path: Path):
    from walkthrough.engine.llama.session import PassInterrupted

    path = _cases()[0]
    session = _llama(path)
    seen = []

    class Stop(Exception):
        pass

    def progress(done: int, total: int) -> None:
        seen.append((done, total))
        if done == 1:
            raise Stop()

    with pytest.raises(Stop):
        session.feed([1, 2, 3], phase="prefill", progress=progress)
    n_layers = session.model.config.n_layers
    assert seen == [(0, n_layers), (1, n_layers)]  # stopped after the first layer, not at the end
    with pytest.raises(PassInterrupted):
        session.feed([4], phase="decode")
    whole = []
    _llama(path).feed([1, 2, 3], phase="prefill", progress=lambda d, t: whole.append(d))
    assert whole == list(range(n_layers + 1))


def test_llama_only_architecture_runs_every_pass(tmp_path: Path, capsys):
    path = write_olmoe(tmp_path / "olmoe.gguf")
    with pytest.raises(UnsupportedArchitecture):
        Model.open(path)
    session = _llama(path, record_attention=True)
    sampler = Sampler(SamplerSettings(temperature=0.8, seed=3))
    steps = list(session.prefill([1, 2, 3, 4, 5], chunk=2, sampler=sampler))
    steps += list(session.decode(sampler, 4, stop_ids=[]))
    assert [s.phase for s in steps] == ["prefill"] * 3 + ["decode"] * 4
    assert steps[-1].kv_len == 9
    for step in steps:
        for layer in step.layers:
            assert layer.experts.shape[1] == OLMOE["n_used"]
            assert layer.attention.shape == (OLMOE["n_head"], step.kv_len)
            assert np.allclose(layer.attention.sum(axis=1), 1.0, atol=1e-5)
    # qwen2moe-style routing without renormalisation: weights are softmax probabilities, each below 1
    assert all(0 < w < 1 for w in steps[-1].layers[0].expert_weights.ravel())
    assert main(["trace", str(path), "--engine", "llama.cpp", "--ids", "1,2,3", "--steps", "3", "--json"]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(records) == 3 and all(len(r["experts"]) == OLMOE["n_layers"] for r in records)


def test_same_seed_same_tokens_on_both_engines():
    path = next(p for p in _cases() if "f32" in p.name)
    ref = json.loads(path.with_suffix(".logits.json").read_text())
    runs = []
    for session in (Session(Model.open(path), kv_type="f32"), _llama(path, kv_type="f32")):
        sampler = Sampler(SamplerSettings(temperature=0.7, seed=11))
        steps = list(session.prefill(ref["prompt_ids"], sampler=sampler))
        steps += list(session.decode(sampler, 8, stop_ids=[]))
        runs.append([s.chosen for s in steps])
    assert runs[0] == runs[1]


# ---- the app on the llama.cpp engine --------------------------------------------------------------------


async def test_every_stage_runs_on_a_llama_only_architecture(tmp_path: Path):
    from app_support import SIZES, app_for, play_to_the_end

    from walkthrough.request import stages

    path = write_olmoe(tmp_path / "olmoe.gguf")
    shots = tmp_path / "shots"
    app = app_for(path, [{"role": "user", "content": "Is there an interaction?"}], engine="llama.cpp",
                  autoplay=True, exit_at_end=True, screenshots=shots, pace=0.2)
    app.state.max_new_tokens = 3
    await play_to_the_end(app, SIZES["small"])
    assert app.return_code == 0 and app.state.finished
    assert sorted(p.name for p in shots.glob("*.svg")) == sorted(
        f"{stage.number}-{stage.label}.svg" for stage in stages.STAGES)
    assert all(layer.experts is not None for step in app.state.steps for layer in step.layers)


async def test_costs_stage_shows_measured_beside_modelled():
    from app_support import app_for, press_stage, settle, widget_text

    from walkthrough.costs.measured import measured_here
    from walkthrough.units import fmt

    path = next(p for p in _cases() if "qwen2moe" in p.name)
    app = app_for(path, [{"role": "user", "content": "What does the record say?"}], engine="llama.cpp")
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await press_stage(pilot, "decode")
        await settle(pilot)
        state = app.state
        for _ in range(10):  # the prompt's pass, then decoded tokens
            if len(state.decode_steps) >= 2:
                break
            await pilot.press("space")
            await settle(pilot)
        assert state.decode_steps and state.model.engine == "llama.cpp"
        greedy = Session(Model.open(path))
        sampler = Sampler(SamplerSettings(temperature=0.0))
        first = list(greedy.prefill(state.prompt_ids, sampler=sampler))[-1].chosen
        assert state.answer_ids() == [first, *[s.chosen for s in greedy.decode(sampler, len(state.answer_ids()) - 1)]]
        await press_stage(pilot, "costs")
        await pilot.pause()
        text = " ".join(widget_text(app.screen.query_one("#costs-measured")).split())  # the title wraps
        assert measured_here("llama.cpp") in text
        assert fmt(state.measured().decode_tokens_per_s, "tokens/s") in text
