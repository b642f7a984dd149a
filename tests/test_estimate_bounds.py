"""Estimates stay physical on unusual inputs: every profile (bundled and odd user ones) x every reference
fixture and header-only files of models far outside the measured corpus (a 1B dense F16, a 235B MoE, the
Qwen3.6 hybrid) gives positive finite rates and times, a decode no faster than the bandwidth ceiling, and a
first token that is the prompt at the prefill rate; a model that does not fit has no speeds rather than zero
ones. A profile figure that is not finite is refused when the file is read."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from gguf.constants import GGMLQuantizationType as Q
from gguf_builder import Tensor
from test_card import QWEN36, attention, build, dense_block, head, moe_ffn, qwen36_tensors

from walkthrough.costs.budget import NO_FIT
from walkthrough.costs.estimate import estimate
from walkthrough.costs.hardware import HardwareFileError, load_profiles
from walkthrough.inspect.card import ModelCard, build_card
from walkthrough.inspect.gguf import open_gguf

FIXTURES = sorted((Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "reference").glob("*.gguf"))

# User profiles with odd but valid figures: what --hardware-file accepts.
ODD = [
    {"id": "slow-wire", "name": "1 MB/s memory, a tenth of a GFLOP", "memory_gib": 512, "memory_kind": "system",
     "reserved_gib": 0, "bandwidth_gbs": 0.001, "decode_efficiency": 0.01, "compute_tflops": 1e-4, "host": None},
    {"id": "huge-box", "name": "a petabyte per second", "memory_gib": 1e6, "memory_kind": "unified",
     "reserved_gib": 1, "bandwidth_gbs": 1e6, "decode_efficiency": 1, "compute_tflops": 1e6, "host": None,
     "backend": "CUDA", "compute_basis": "peak"},
    {"id": "cpu-odd", "name": "a CPU profile with a tiny compute", "memory_gib": 64, "memory_kind": "system",
     "reserved_gib": 4, "bandwidth_gbs": 20, "decode_efficiency": 0.5, "compute_tflops": 0.001, "host": None,
     "backend": "CPU", "compute_basis": "peak"},
    {"id": "renamed-4090", "name": "a 4090 with a slow memory bus", "memory_gib": 24, "memory_kind": "vram",
     "reserved_gib": 1, "bandwidth_gbs": 50, "decode_efficiency": 0.8, "compute_tflops": 10, "host": "desktop-ddr5",
     "backend": "CUDA", "machine": "rtx-4090"},
    {"id": "tiny-vram", "name": "1 GiB of VRAM on a slow host", "memory_gib": 1, "memory_kind": "vram",
     "reserved_gib": 0.5, "bandwidth_gbs": 300, "decode_efficiency": 0.7, "compute_tflops": 20,
     "host": "slow-wire", "backend": "ROCm/Vulkan", "compute_basis": "peak"},
]


@pytest.fixture(scope="module")
def profiles(tmp_path_factory: pytest.TempPathFactory) -> dict:
    path = tmp_path_factory.mktemp("hw") / "odd.json"
    path.write_text(json.dumps({"profiles": ODD}), encoding="utf-8")
    return load_profiles(path)


def _llama_1b_f16(tmp: Path) -> ModelCard:
    """Llama 3.2 1B's shapes (16 layers, width 2048, 32 / 8 heads, FFN 8192, vocabulary 128,256), all F16."""
    width, layers = 2048, 16
    tensors = head(width, 128256, tied=True)
    for i in range(layers):
        tensors += dense_block(i, width, 512, 8192, Q.F16)
    hp = {"block_count": layers, "embedding_length": width, "attention.head_count": 32,
          "attention.head_count_kv": 8, "context_length": 131072}
    return build_card(build(tmp, "llama", hp, tensors, sparse=True, name="llama-1b.gguf"))


def _moe_235b(tmp: Path) -> ModelCard:
    """Qwen3-235B-A22B's shapes (94 layers, width 4096, 64 / 4 heads of 128, 128 experts of width 1536,
    8 used, vocabulary 151,936), experts Q4_K and the rest Q8_0."""
    width, layers, experts = 4096, 94, 128
    tensors = [Tensor("token_embd.weight", (width, 151936), Q.Q8_0), Tensor("output_norm.weight", (width,)),
               Tensor("output.weight", (width, 151936), Q.Q8_0)]
    for i in range(layers):
        tensors += [t for t in attention(i, width, 512, Q.Q8_0) if "attn_q" not in t.name
                    and "attn_output" not in t.name]
        tensors += [Tensor(f"blk.{i}.attn_q.weight", (width, 8192), Q.Q8_0),
                    Tensor(f"blk.{i}.attn_output.weight", (8192, width), Q.Q8_0)]
        tensors += moe_ffn(i, width, 1536, experts, Q.Q4_K)
    hp = {"block_count": layers, "embedding_length": width, "attention.head_count": 64,
          "attention.head_count_kv": 4, "attention.key_length": 128, "attention.value_length": 128,
          "expert_count": experts, "expert_used_count": 8, "expert_feed_forward_length": 1536,
          "context_length": 40960}
    return build_card(build(tmp, "qwen3moe", hp, tensors, sparse=True, name="moe-235b.gguf"))


@pytest.fixture(scope="module")
def cards(tmp_path_factory: pytest.TempPathFactory) -> dict[str, ModelCard]:
    tmp = tmp_path_factory.mktemp("shaped")
    out = {p.stem: build_card(open_gguf(p)) for p in FIXTURES}
    out["llama-1b-f16 (header)"] = _llama_1b_f16(tmp)
    out["qwen3-235b-a22b (header)"] = _moe_235b(tmp)
    out["qwen3.6-35b-a3b (header)"] = build_card(build(tmp, "qwen35moe", QWEN36, qwen36_tensors(), sparse=True,
                                                        name="qwen36.gguf"))
    return out


def test_the_header_only_models_have_the_shapes_they_claim(cards: dict[str, ModelCard]) -> None:
    assert round(cards["llama-1b-f16 (header)"].n_params / 1e9, 1) == 1.2  # 1.24e9 with the tied embedding
    big = cards["qwen3-235b-a22b (header)"]
    assert round(big.n_params / 1e9) == 235 and round(big.n_params_active / 1e9) == 22
    assert cards["qwen3.6-35b-a3b (header)"].state_bytes


REQUESTS = [(4096, 2048, 512), (131072, 65536, 1), (64, 1, 4096)]  # (context, prompt tokens, output tokens)


def _positive(value: float | None, what: str) -> float:
    assert value is not None and math.isfinite(value) and value > 0, what
    return value


def test_every_estimate_is_positive_finite_and_under_its_ceiling(profiles, cards) -> None:
    assert len(cards) >= 7 and len(profiles) >= 15
    checked = 0
    for card_name, card in cards.items():
        for hw in profiles.values():
            for context, prompt, output in REQUESTS:
                context = min(context, card.context_length or context)
                prompt = min(prompt, context)
                e = estimate(card, hw, context, prompt, output)
                where = f"{card_name} on {hw.id}, context {context}, prompt {prompt}"
                if e.memory.verdict == NO_FIT:
                    assert e.decode is None and e.prefill is None and e.answer is None, where
                    continue
                checked += 1
                rate = _positive(e.decode.tokens_per_s.value, f"decode: {where}")
                ceiling = _positive(e.decode.ceiling.value, f"ceiling: {where}")
                assert rate <= ceiling * (1 + 1e-9), f"decode {rate:.4g} over its ceiling {ceiling:.4g}: {where}"
                pre = _positive(e.prefill.tokens_per_s.value, f"prefill: {where}")
                ttft = _positive(e.prefill.seconds.value, f"first token: {where}")
                assert ttft == pytest.approx(prompt / pre), where
                _positive(e.answer.value, f"answer: {where}")
                assert e.answer.value >= ttft, where
                for row in e.users_rows:
                    _positive(row.per_user.value, f"{row.users} users: {where}")
                    _positive(row.total.value, f"{row.users} users in all: {where}")
    assert checked > 100


@pytest.mark.parametrize("field, text", [("bandwidth_gbs", "Infinity"), ("compute_tflops", "1e999"),
                                         ("memory_gib", "Infinity")])
def test_a_profile_figure_that_is_not_finite_is_refused_in_one_line(tmp_path: Path, field: str, text: str) -> None:
    # JSON as Python reads it accepts Infinity and 1e999: a machine that reads or computes infinitely fast
    figures = {"memory_gib": "8", "bandwidth_gbs": "1", "compute_tflops": "1"} | {field: text}
    entry = ('{"id": "odd", "name": "odd", "memory_kind": "system", "reserved_gib": 0, "decode_efficiency": 0.5, '
             + ", ".join(f'"{k}": {v}' for k, v in figures.items()) + "}")
    path = tmp_path / "inf.json"
    path.write_text(f'{{"profiles": [{entry}]}}', encoding="utf-8")
    with pytest.raises(HardwareFileError, match=f"'{field}' must be finite"):
        load_profiles(path)
