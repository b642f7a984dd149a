"""Memory you can see and bound: what the chosen engine will hold beside the free memory (File stage, trace,
bench), the numpy engine's weights bounded by --max-memory, a model larger than its budget still running
with the same tokens, and the fast decoders that make a weight decoded again cheap.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from app_support import SIZES, app_for, settle, widget_text
from conftest import FIXTURES_DIR
from gguf import quants
from test_cli_errors import run_cli
from test_engine_reference import _cases as reference_cases

from walkthrough.costs import memory
from walkthrough.costs.memory import Holding, dequantized_bytes, lane_copy_bytes, parse_size
from walkthrough.engine.glassbox.dequant import FAST, dequantize_fast
from walkthrough.engine.glassbox.model import Model
from walkthrough.engine.glassbox.session import Session
from walkthrough.engine.sampler import Sampler, SamplerSettings
from walkthrough.errors import WalkthroughError
from walkthrough.inspect.card import build_card
from walkthrough.inspect.gguf import open_gguf
from walkthrough.inspect.kquants import WRITERS

LLAMA_Q4 = FIXTURES_DIR / "reference" / "ref-llama-q4_0.gguf"
QWEN2MOE = FIXTURES_DIR / "reference" / "ref-qwen2moe-f32.gguf"
PHI3_Q4 = Path(__file__).parent / "fixtures" / "arch" / "ref-phi3-q4_0.gguf"  # tests/bench/make_arch_references.py
PROMPT = list(range(3, 40))


@pytest.mark.parametrize("qtype", list(FAST), ids=lambda t: t.name)
def test_fast_decoders_give_gguf_quants_values_bit_for_bit(qtype):
    """Random bytes (NaN, infinite and subnormal scales included) and quantized rows (the k-quants as
    llama.cpp writes them: inspect/kquants.py, byte-equal to ggml_quantize_chunk by test_kquants)."""
    rng = np.random.default_rng(1)
    size = FAST[qtype][0]
    rows = rng.normal(0, 1, (64, 256)).astype(np.float32)
    written = (np.frombuffer(WRITERS[qtype](rows), np.uint8) if qtype in WRITERS
               else np.ascontiguousarray(quants.quantize(rows, qtype)).view(np.uint8).ravel())
    raws = [rng.integers(0, 256, size * 4096, dtype=np.uint8), written]
    for raw in raws:
        with np.errstate(invalid="ignore", over="ignore"):  # NaN and infinite scales are part of the test
            expected = quants.dequantize(raw.reshape(-1, size), qtype).astype(np.float32).reshape(-1)
            got = dequantize_fast(raw, qtype)
        assert np.array_equal(got.view(np.uint32), expected.view(np.uint32))


def test_sizes_parse_in_binary_units():
    assert parse_size("512M") == 512 << 20 and parse_size("2G") == 2 << 30 and parse_size("1.5GiB") == 3 << 29
    for bad in ("lots", "1X", "-2G", "10M"):
        with pytest.raises(WalkthroughError, match="--max-memory"):
            parse_size(bad)


def _run(path, budget: int) -> tuple[list[int], np.ndarray, Model]:
    model = Model(open_gguf(path), max_cache_bytes=budget)
    steps = list(Session(model).generate(PROMPT, Sampler(SamplerSettings()), 6, chunk=16))
    return [s.chosen for s in steps], steps[-1].logits, model


@pytest.mark.parametrize("path", [LLAMA_Q4, QWEN2MOE], ids=lambda p: p.stem)
def test_a_model_larger_than_its_budget_runs_with_the_same_tokens(path):
    everything = dequantized_bytes(open_gguf(path))
    ids, logits, unbounded = _run(path, 4 * everything)
    assert unbounded.weights.cached_bytes == everything  # the count is what the cache really holds
    small = everything // 4
    small_ids, small_logits, bounded = _run(path, small)
    assert small_ids == ids
    assert np.abs(small_logits - logits).max() < 1e-5
    assert 0 < bounded.weights.cached_bytes <= small
    decoded = bounded.weights.dequantized_bytes
    assert decoded > unbounded.weights.dequantized_bytes  # what did not fit was decoded again


def test_a_matrix_over_a_share_of_the_budget_is_never_held_whole():
    f = open_gguf(LLAMA_Q4)
    biggest = max((t for t in f.tensors.values() if len(t.shape) == 2), key=lambda t: t.n_elements)
    budget = biggest.n_elements * 4 * 2  # the biggest matrix takes half: over WHOLE_SHARE
    ids, _, model = _run(LLAMA_Q4, budget)
    held = [key for key in model.weights.cached() if biggest.name in repr(key)]  # alone, with offsets, or stacked
    assert model.weights.cached() and not held
    assert ids == _run(LLAMA_Q4, 1 << 30)[0]


def test_the_holding_splits_and_warns_with_llama_cpp_s_figure():
    f = open_gguf(LLAMA_Q4)
    card = build_card(f)
    mine = Holding.numpy(f, card, 300, 64, 1 << 30)
    other = Holding.llama_cpp(f, card, 300, 64)
    assert mine.weights == dequantized_bytes(f) and other.weights == f.data_bytes
    assert mine.kv == card.kv_bytes(300, "f32") == 2 * other.kv
    assert mine.lane_copies == lane_copy_bytes(f) == 0  # this file's matrices are too short for lanes
    phi3 = open_gguf(PHI3_Q4)  # one whose q/k/v stack and FFN down take lanes
    lanes = Holding.numpy(phi3, build_card(phi3), 300, 64, 1 << 30).lane_copies
    assert lanes == lane_copy_bytes(phi3) > 0  # passes of 64 tokens, and room for the lane copies
    assert mine.total == mine.weights + mine.lane_copies + mine.kv + mine.activations
    assert mine.warning(mine.total) is None
    warning = mine.warning(other.total + 1, other)
    assert warning is not None and "--engine llama.cpp" in warning and "--max-memory" in warning


def test_trace_says_what_the_engine_holds_and_warns_when_it_will_not_fit(capsys, monkeypatch):
    code, out, err = run_cli(capsys, ["trace", LLAMA_Q4, "--ids", "3,4,5", "--steps", "1", "--max-memory", "256M"])
    assert code == 0 and err == ""
    assert "the numpy engine will hold" in out and "free" in out
    monkeypatch.setattr(memory, "free_memory", lambda: 1 << 10)
    code, out, err = run_cli(capsys, ["trace", LLAMA_Q4, "--ids", "3,4,5", "--steps", "1"])
    assert code == 0
    assert err.startswith("walkthrough: warning: the numpy engine needs") and "--engine llama.cpp" in err


def test_a_bad_budget_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as info:
        run_cli(capsys, ["trace", LLAMA_Q4, "--ids", "3", "--max-memory", "lots"])
    assert info.value.code == 2
    assert "--max-memory 'lots': give a size" in capsys.readouterr().err


def test_bench_reports_the_holding(capsys):
    code, out, _ = run_cli(capsys, ["bench", LLAMA_Q4, "--prompt-tokens", "4", "--output-tokens", "1", "--json",
                                    "--max-memory", "128M"])
    assert code == 0
    assert json.loads(out)["memory"].startswith("the numpy engine will hold")


@pytest.mark.parametrize("size", SIZES.values())
async def test_the_file_stage_says_what_the_engine_will_hold(size, monkeypatch):
    from textual.widgets import Static

    app = app_for(LLAMA_Q4, max_memory=128 << 20)
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        assert app.state.model.weights.max_cache_bytes == 128 << 20
        text = widget_text(app.screen.query_one("#overview-text", Static))
        assert "Memory: the numpy engine will hold" in text and "Will not fit" not in text
        monkeypatch.setattr(memory, "free_memory", lambda: 1 << 10)
        app.screen.refresh_view()
        text = widget_text(app.screen.query_one("#overview-text", Static))
    assert "Will not fit: the numpy engine needs" in text and "--engine llama.cpp" in text


@pytest.mark.parametrize("path", reference_cases(), ids=lambda p: p.stem)
def test_lane_copy_bytes_is_at_least_what_a_long_pass_holds(path):
    """On every reference architecture a pass of LANE_ROWS tokens keeps no more lane copies than `lane_copy_bytes`
    counts for the memory line (fewer where a matrix is too short for them or a last layer takes one row), and
    with the budget holding them every weight is still held."""
    from walkthrough.engine.glassbox.config import UnsupportedArchitecture
    from walkthrough.engine.glassbox.ops import LANE_ROWS

    f = open_gguf(path)
    try:
        model = Model(f)
    except UnsupportedArchitecture as exc:
        pytest.skip(str(exc))
    n_vocab = model.config.n_vocab
    list(Session(model).prefill([(5 + i) % n_vocab for i in range(LANE_ROWS)], sampler=Sampler.greedy()))
    held = sum(v.nbytes for k, v in model.weights.cached().items() if isinstance(k, tuple) and k[0] == "lanes")
    assert held <= lane_copy_bytes(f)  # less where the BLAS gives a shape no lane plan (64 inputs here)
    assert model.weights.cached_bytes - held <= dequantized_bytes(f)
