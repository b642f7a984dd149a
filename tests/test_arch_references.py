"""The newer architectures' reference models (tests/fixtures/arch): layer kinds, KV bytes, bytes per token,
estimate, and the app's stages, each following the rules llama.cpp applies to that architecture.

The logits themselves are held to llama.cpp's by tests/test_engine_reference.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from app_support import SIZES, app_for, play_to_the_end

from walkthrough.cli import main
from walkthrough.engine.glassbox.model import Model
from walkthrough.engine.glassbox.session import Session
from walkthrough.request import stages

ARCH = Path(__file__).parent / "fixtures" / "arch"
F32 = {p.stem.split("-", 1)[1].rsplit("-", 1)[0]: p for p in sorted(ARCH.glob("ref-*-f32.gguf"))}
ALL = sorted(ARCH.glob("ref-*.gguf"))


def _sliding_by_llama_cpp(arch: str, n_layers: int, hp: dict) -> list[bool]:
    """Which layers slide, written out from llama.cpp's loaders (vendored 0.3.36): gemma4 reads a flag per layer,
    gemma3 `load_swa_pattern(ml, 6)`
    and gpt-oss `load_swa_pattern(ml, 2)` mark layer i sliding when i % n < n - 1 (`set_swa_pattern`,
    src/llama-hparams.cpp); phi3 ignores its window ("Phi SWA is currently disabled", src/models/phi3.cpp)."""
    pattern = hp.get("attention.sliding_window_pattern")
    if pattern is not None and np.ndim(pattern) == 1:  # gemma4: one flag per layer, required
        return [bool(x) for x in pattern][:n_layers]
    period = {"gemma3": 6, "gpt-oss": 2}.get(arch)
    if period is None or not hp.get("attention.sliding_window"):
        return [False] * n_layers
    return [i % period < period - 1 for i in range(n_layers)]


def _hp(model: Model) -> dict:
    arch = model.card.architecture
    return {k.removeprefix(arch + "."): model.file.get(k) for k in model.file.fields if k.startswith(arch + ".")}


def test_every_architecture_has_its_two_references():
    arches = {p.stem.split("-", 1)[1].rsplit("-", 1)[0] for p in ALL}
    assert arches >= {"gemma3", "gemma4", "phi3", "mistral3", "qwen35", "gpt-oss", "smollm3", "glm4moe", "lfm2"}
    for arch in arches:  # F32 and a quantized type; glm4moe's quantized reference is not matched yet (README)
        assert len([p for p in ALL if p.stem.startswith(f"ref-{arch}-")]) == (1 if arch == "glm4moe" else 2), arch
    assert all(p.stat().st_size < 1 << 20 and p.with_suffix(".logits.json").stat().st_size < 1 << 20 for p in ALL)


@pytest.mark.parametrize("arch", sorted(F32))
def test_layer_kinds_and_kv_bytes_follow_llama_cpp(arch: str):
    model = Model.open(F32[arch])
    hp, card = _hp(model), model.card
    n = card.n_layers
    sliding = _sliding_by_llama_cpp(arch, n, hp)
    window = hp.get("attention.sliding_window") if any(sliding) else None
    assert [layer.attention == "sliding" for layer in card.layers] == sliding
    assert all(layer.sliding_window == window for layer in card.layers if layer.attention == "sliding")
    # KV: 2 (K and V) x KV heads x head size x 2 bytes (F16) per position, a sliding layer at most its window
    # and with its own head size where the file gives one (`attention.key_length_swa`).
    def per_layer(i: int, kind: str) -> int:
        head = hp.get("attention.key_length_swa", hp["attention.key_length"]) if kind == "sliding" else \
            hp["attention.key_length"]
        heads = np.ravel(hp["attention.head_count_kv"])  # one count, or one per layer (lfm2: 0 = convolution)
        return 2 * int(heads[i] if heads.size > 1 else heads[0]) * head * 2

    kv_layers = [layer for layer in card.layers if layer.attention in ("full", "sliding")]
    for length in (3, 24, 100):
        expected = sum(per_layer(x.index, x.attention) * (min(length, window) if x.attention == "sliding" else length)
                       for x in kv_layers)
        assert card.kv_bytes(length) == expected
    session = Session(model)
    step = list(session.prefill(list(range(24))))[-1]
    assert step.kv_bytes == card.kv_bytes(24)
    assert step.state_bytes == (card.state_bytes or 0)


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.stem)
def test_one_decode_pass_reads_the_cards_bytes_per_token(path: Path):
    model = Model.open(path)
    session = Session(model)
    list(session.prefill([5, 17, 99]))
    step = session.feed([7], phase="decode")
    weights = {g: n for g, n in step.bytes_read.items() if g not in ("kv_cache", "state", "total")}
    if model.card.is_moe:  # routed experts: the card counts n_used of n_experts, a pass reads the chosen ones
        chosen = {int(e) for layer in step.layers if layer.experts is not None for e in np.ravel(layer.experts)}
        assert chosen
    assert weights == model.card.bytes_per_token_by_group
    assert sum(weights.values()) == model.card.bytes_per_token


@pytest.mark.parametrize("arch", sorted(F32))
def test_estimate_counts_the_window(arch: str, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    model = Model.open(F32[arch])
    assert main(["estimate", str(F32[arch]), "--json", "--context", "200", "--prompt-tokens", "100",
                 "--output-tokens", "50"]) == 0
    rows = json.loads(capsys.readouterr().out)
    card = model.card
    for row in rows:  # decode is measured at the answer's middle: 125 positions
        assert row["bytes_per_token"] == card.bytes_per_token + card.kv_bytes(125) + 2 * (card.state_bytes or 0)


async def test_the_stages_run_on_gpt_oss(tmp_path):
    app = app_for(ARCH / "ref-gpt-oss-mxfp4.gguf", [{"role": "user", "content": "Is there an interaction?"}],
                  autoplay=True, exit_at_end=True, screenshots=tmp_path, pace=0.2)
    app.state.max_new_tokens = 3
    await play_to_the_end(app, SIZES["small"])
    assert app.return_code == 0
    assert sorted(p.name for p in tmp_path.glob("*.svg")) == sorted(
        f"{stage.number}-{stage.label}.svg" for stage in stages.STAGES)
    assert app.state.finished


def test_short_convolution_state_carries_across_passes():
    """lfm2's convolution reads the previous inputs from its state: chunked prefill equals one pass."""
    model = Model.open(F32["lfm2"])
    ids = list(range(30, 54))
    whole = np.concatenate([s.all_logits for s in Session(model, kv_type="f32").prefill(ids, all_logits=True)])
    chunked = np.concatenate([s.all_logits for s in Session(model, kv_type="f32").prefill(ids, chunk=5,
                                                                                        all_logits=True)])
    assert np.abs(whole - chunked).max() <= 1e-5 * max(1.0, float(np.abs(whole).max()))
    assert {a.shape for a in Session(model).cache.states.values() for a in a.values()} == {(2, model.config.n_embd)}
