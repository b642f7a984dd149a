"""The cost model: the issue's worked examples, real fixture cards, offload plans on synthetic big cards."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest

from walkthrough.costs import fitted
from walkthrough.costs.budget import (
    FITS,
    NO_FIT,
    OFFLOAD,
    CostsError,
    kv_cache_bytes,
    max_users,
    memory_plan,
)
from walkthrough.costs.estimate import (
    card_shape,
    decode,
    decode_ceiling,
    estimate,
    prefill,
    prompt_seconds,
    users_row,
    weights_bytes,
)
from walkthrough.costs.figure import given
from walkthrough.costs.hardware import load_profiles
from walkthrough.inspect.card import LayerInfo, ModelCard, build_card, type_bytes_per_value
from walkthrough.inspect.gguf import open_gguf

GB = 1e9


@pytest.fixture(scope="module")
def profiles():
    return load_profiles()


@pytest.fixture(scope="module")
def cards(fixtures_dir: Path) -> dict[str, ModelCard]:
    paths = sorted((fixtures_dir / "reference").glob("*.gguf"))
    assert paths, "no reference GGUF fixtures"
    return {p.stem: build_card(open_gguf(p)) for p in paths}


# --- the worked examples ---------------------------------------------------------------------


def test_ceiling_of_184_gb_per_token_at_128_gbs_is_near_70():
    ceiling = decode_ceiling(given(1.84 * GB, "B", "example"), given(128 * GB, "B/s", "example"))
    assert ceiling.unit == "tokens/s"
    assert 69 < ceiling.value < 71
    assert ceiling.formula == "bandwidth / bytes per token"
    assert dict(ceiling.inputs)["bytes_per_token"].value == 1.84 * GB


def test_ceiling_of_16_gb_per_token_at_128_gbs_is_8():
    assert decode_ceiling(given(16 * GB, "B", "x"), given(128 * GB, "B/s", "x")).value == pytest.approx(8)


def test_6500_token_prompt_at_93_tokens_per_s_takes_about_70_s():
    seconds = prompt_seconds(given(6500, "tokens", "x"), given(93, "tokens/s", "x"))
    assert seconds.unit == "s"
    assert seconds.value == pytest.approx(70, abs=0.5)


def test_35_5_billion_params_at_4_89_bits_are_about_21_7_gb():
    size = weights_bytes(given(35.5e9, "params", "x"), given(4.89, "bits", "x"))
    assert size.value / GB == pytest.approx(21.7, abs=0.05)


def test_laptop_profile_gives_the_worked_example(profiles):
    laptop = profiles["laptop-860m"]
    assert laptop.bandwidth_gbs == 8000 * 128 / 8 / 1000  # LPDDR5X-8000 on a 128-bit bus
    ceiling = decode_ceiling(given(1.84 * GB, "B", "x"), given(laptop.bandwidth, "B/s", "x"))
    assert 69 < ceiling.value < 71


# --- real cards ------------------------------------------------------------------------------


def test_kv_cache_matches_the_card_and_grows_with_context(cards):
    for name, card in cards.items():
        for kind in ("f16", "q8_0", "q4_0"):
            assert kv_cache_bytes(card, 100, kind).value == card.kv_bytes_per_token[kind] * 100, name
        assert kv_cache_bytes(card, 200).value == 2 * kv_cache_bytes(card, 100).value
        assert kv_cache_bytes(card, 100, "q8_0").value < kv_cache_bytes(card, 100, "f16").value


def test_hybrid_counts_kv_only_for_full_attention_layers(cards):
    card = cards["ref-qwen35moe-f32"]
    full = [layer for layer in card.layers if layer.attention == "full" and not layer.mtp]
    linear = [layer for layer in card.layers if layer.attention == "linear"]
    assert full and linear
    per_token = sum(layer.n_head_kv * (card.head_dim_k + card.head_dim_v) * 2 for layer in full)
    assert kv_cache_bytes(card, 1).value == per_token
    assert kv_cache_bytes(card, 1).value * len(card.layers) / len(full) > kv_cache_bytes(card, 1).value
    assert card.state_bytes > 0


def test_memory_needed_adds_up(cards, profiles):
    hw = profiles["cpu-here"]
    for name, card in cards.items():
        plan = memory_plan(card, hw, 256, "f16")
        parts = dict(plan.needed.inputs)
        assert parts["weights"].value == sum(card.bytes_by_type.values()), name
        assert parts["kv_cache"].value == card.kv_bytes_per_token["f16"] * 256
        assert parts["state"].value == card.state_bytes
        assert plan.needed.value == sum(f.value for f in parts.values())
        assert plan.verdict == FITS
        assert plan.usable.value == (hw.memory_gib - hw.reserved_gib) * 2**30


def test_decode_reads_weights_kv_and_state(cards, profiles):
    hw = profiles["cpu-here"]  # no backend family: the roofline at the profile's decode efficiency
    for name, card in cards.items():
        d = decode(card, hw, 200, "f16")
        expected = card.bytes_per_token + card.kv_bytes_per_token["f16"] * 200 + 2 * card.state_bytes
        assert d.bytes_per_token.value == expected, name
        assert d.ceiling.value == pytest.approx(hw.bandwidth / expected)
        assert d.tokens_per_s.value == pytest.approx(d.ceiling.value * hw.decode_efficiency)
        assert decode(card, hw, 250).tokens_per_s.value < d.tokens_per_s.value
        assert d.slow_share.value == 0 and d.band is None


def test_decode_on_a_profile_with_a_backend_is_the_fitted_model_with_its_band(cards, profiles):
    hw = profiles["rtx-4090"]
    for name, card in cards.items():
        d = decode(card, hw, 200, "f16")
        rate, band = fitted.decode_rate(card_shape(card), hw, 200)
        assert d.tokens_per_s.value == pytest.approx(rate), name
        assert d.band == band and band.family == "CUDA" and band.runs >= 8
        # the reference fixtures read a few MB per token, far less than any measured CUDA run: no band, and why
        assert band.fraction is None and band.describe().startswith("no band: extrapolated"), name
        assert d.tokens_per_s.value < d.ceiling.value
        assert decode(card, hw, 20000).tokens_per_s.value < d.tokens_per_s.value  # attention grows with depth


def test_moe_decode_reads_only_the_routed_experts(cards):
    card = cards["ref-qwen2moe-f32"]
    experts = card.bytes_by_group["experts"]
    read = card.bytes_per_token_by_group["experts"]
    assert read == pytest.approx(experts * card.n_experts_used / card.n_experts, abs=1)


def test_prefill_flops_time_and_roofline(cards, profiles):
    for hw in (profiles["cpu-here"],):
        for name, card in cards.items():
            p = prefill(card, hw, 200)
            assert p.flops_per_token.value > 2 * card.n_params_active, name
            assert p.seconds.value == pytest.approx(200 / p.tokens_per_s.value)
            # never faster than computing the FLOPs, nor than reading the weights once (200 < 512 tokens)
            assert p.seconds.value >= p.flops_per_token.value * 200 / hw.compute * (1 - 1e-9)
            assert p.seconds.value >= card.bytes_per_token / (hw.bandwidth * hw.decode_efficiency)
            assert prefill(card, hw, 400).seconds.value > p.seconds.value


def test_prefill_on_a_profile_with_a_backend_is_fitted_and_banded(cards, profiles):
    hw = profiles["laptop-860m"]
    for name, card in cards.items():
        p = prefill(card, hw, 200)
        seconds, band = fitted.prefill_seconds(card_shape(card), hw, 200, 512)
        assert p.seconds.value == pytest.approx(seconds), name
        assert p.seconds.value == pytest.approx(200 / p.tokens_per_s.value)
        assert p.band == band and band.family == "ROCm/Vulkan" and band.machine_runs == 2
        assert prefill(card, hw, 2000).seconds.value > p.seconds.value


def test_attention_flops_grow_with_the_prompt(cards, profiles):
    card = cards["ref-llama-f32"]
    hw = profiles["cpu-here"]
    short, long = prefill(card, hw, 64), prefill(card, hw, 256)
    assert long.flops_per_token.value > short.flops_per_token.value
    # mean attention over positions 1..n is (n + 1) / 2 positions, per KV layer 2 x heads x (k + v dims)
    per_position = sum(2 * card.n_head * (card.head_dim_k + card.head_dim_v) for layer in card.layers if layer.keeps_kv)
    gap = long.flops_per_token.value - short.flops_per_token.value
    assert gap == pytest.approx(per_position * ((256 + 1) / 2 - (64 + 1) / 2))


def test_estimate_answer_time(cards, profiles):
    card = cards["ref-qwen3moe-q8_0"]
    e = estimate(card, profiles["dgx-spark"], 256, 128, 64)
    assert e.fits
    assert e.answer.value == pytest.approx(e.prefill.seconds.value + 64 / e.decode.tokens_per_s.value)


def test_users_share_the_weight_reads(cards, profiles):
    card = cards["ref-qwen2-f32"]
    hw = profiles["h100"]
    one, four = users_row(card, hw, 1, 256), users_row(card, hw, 4, 256)
    assert four.per_user.value < one.per_user.value
    assert four.total.value > one.total.value
    assert four.total.value == pytest.approx(4 * four.per_user.value)


def test_max_users_is_where_memory_runs_out(profiles):
    card = qwen36_like()
    hw = profiles["strix-halo"]
    n = int(max_users(card, hw, 32768).value)
    assert n >= 1
    assert memory_plan(card, hw, 32768, users=n).verdict == FITS
    assert memory_plan(card, hw, 32768, users=n + 1).verdict == NO_FIT
    assert users_row(card, hw, n + 1, 32768, fit=n).limit == "memory"


# --- offload on synthetic big cards ----------------------------------------------------------


def synthetic_card(n_layers: int, n_params: float, bits: float, *, experts: int = 0, used: int = 0,
                   expert_share: float = 0.0, hybrid_interval: int = 0) -> ModelCard:
    """A header-free card with the published shape of a large model (sizes from params x bits)."""

    def size(params: float) -> int:
        return round(params * bits / 8)

    vocab, width = 152064, 4096
    emb = vocab * width
    expert_params = n_params * expert_share
    rest = n_params - expert_params - 2 * emb
    by_group = {"embedding": size(emb), "output": size(emb), "attention": size(rest)}
    read = {"embedding": size(width), "output": size(emb), "attention": size(rest)}
    if experts:
        by_group["experts"] = size(expert_params)
        read["experts"] = size(expert_params * used / experts)
    per_layer = (sum(by_group.values()) - by_group["embedding"] - by_group["output"]) // n_layers
    layers = []
    for i in range(n_layers):
        linear = bool(hybrid_interval and (i + 1) % hybrid_interval)
        layers.append(LayerInfo(
            index=i, attention="linear" if linear else "full", ffn="moe" if experts else "dense",
            n_head_kv=None if linear else 8, keeps_kv=not linear, state_bytes=1_000_000 if linear else 0,
            kv_values_per_token=0 if linear else 8 * 256, nbytes=per_layer))
    kv_values = sum(layer.kv_values_per_token for layer in layers)
    return ModelCard(
        architecture="synthetic", name="synthetic", file_size=sum(by_group.values()), n_tensors=0,
        n_layers=n_layers, n_embd=width, n_head=32, n_head_kv=8, head_dim_k=128, head_dim_v=128,
        context_length=131072, rope_base=None, rope_dims=None, vocab_size=vocab, n_ff=14336,
        n_experts=experts, n_experts_used=used if experts else 0, n_shared_experts=0, expert_ff=1536 if experts else None,
        shared_expert_ff=None, norm_eps=None, n_params=int(n_params),
        n_params_active=int(n_params - expert_params + expert_params * used / max(experts, 1) - emb),
        layers=tuple(layers), params_by_group={}, bytes_by_group=by_group,
        bytes_by_type={"Q4_K": sum(by_group.values())},
        params_by_type={}, bytes_per_token=sum(read.values()), bytes_per_token_by_group=read,
        kv_bytes_per_token={t: round(kv_values * type_bytes_per_value(t)) for t in ("f16", "q8_0", "q4_0")},
        state_bytes=sum(layer.state_bytes for layer in layers),
    )


def qwen36_like() -> ModelCard:
    """35.5e9 parameters at 4.89 bits, 40 layers, full attention every 4th, 256 experts with 8 used."""
    return synthetic_card(40, 35.5e9, 4.89, experts=256, used=8, expert_share=0.9, hybrid_interval=4)


def test_moe_offloads_experts_first_and_just_enough(profiles):
    card = qwen36_like()
    hw = profiles["rtx-4090"]
    plan = memory_plan(card, hw, 131072)
    assert plan.verdict == OFFLOAD
    assert plan.placement.whole_layers == ()
    k = len(plan.placement.expert_layers)
    per_layer = card.bytes_by_group["experts"] / 40
    assert plan.placement.expert_layers == tuple(range(k))
    deficit = plan.needed.value - plan.usable.value
    assert (k - 1) * per_layer < deficit <= k * per_layer
    assert f"--n-cpu-moe {k}" in plan.placement.describe()
    assert plan.host_needed.value <= plan.host_usable.value


def test_offloaded_decode_pays_for_the_slow_part(profiles):
    card = qwen36_like()
    hw = profiles["rtx-4090"]
    plan = memory_plan(card, hw, 131072)
    slow = decode(card, hw, 4096, placement=plan.placement)
    fast = decode(card, hw, 4096)
    assert 0 < slow.slow_share.value < 1
    assert slow.tokens_per_s.value < fast.tokens_per_s.value
    roofline = dict(slow.tokens_per_s.inputs)["roofline_with_offload"]
    fast_bytes, slow_bytes = (dict(roofline.inputs)[k].value for k in ("fast_bytes", "slow_bytes"))
    assert fast_bytes + slow_bytes == pytest.approx(slow.bytes_per_token.value)
    host = hw.host
    expected = 1 / (fast_bytes / (hw.bandwidth * hw.decode_efficiency)
                    + slow_bytes / (host.bandwidth * host.decode_efficiency))
    assert roofline.value == pytest.approx(expected)
    # the fitted speed, slowed as much as the roofline slows with the offload
    all_fast = 1 / (slow.bytes_per_token.value / (hw.bandwidth * hw.decode_efficiency))
    assert slow.tokens_per_s.value == pytest.approx(fast.tokens_per_s.value * expected / all_fast)


def test_dense_model_offloads_whole_layers(profiles):
    card = synthetic_card(80, 70.6e9, 4.85)  # a 70B dense model at about Q4_K_M: ~42.8 GB
    plan = memory_plan(card, profiles["rtx-4090"], 8192)
    assert plan.verdict == OFFLOAD
    assert plan.placement.expert_layers == ()
    assert 0 < len(plan.placement.whole_layers) < 80
    assert plan.placement.whole_layers == tuple(range(len(plan.placement.whole_layers)))
    assert "-ngl" in plan.placement.describe()


def test_too_big_for_gpu_and_host_does_not_fit(profiles):
    card = synthetic_card(126, 405e9, 4.85)  # ~245 GB
    plan = memory_plan(card, profiles["rtx-4090"], 8192)
    assert plan.verdict == NO_FIT
    assert plan.shortfall.value > 0
    e = estimate(card, profiles["rtx-4090"], 8192, 1000, 100)
    assert not e.fits and e.decode is None and e.answer is None


def test_unified_memory_does_not_offload(profiles):
    card = synthetic_card(126, 405e9, 4.85)
    plan = memory_plan(card, profiles["m4-max"], 8192)
    assert plan.verdict == NO_FIT
    assert plan.host_needed is None
    assert plan.shortfall.value == pytest.approx(plan.needed.value - plan.usable.value)


def test_bigger_memory_fits_without_offload(profiles):
    card = qwen36_like()
    plan = memory_plan(card, profiles["h100"], 131072)
    assert plan.verdict == FITS
    assert plan.placement.describe().startswith("no offload")
    assert math.isclose(plan.needed.value, sum(f.value for _, f in plan.needed.inputs))


def test_sliding_window_layers_cap_kv_and_attention(profiles):
    card = synthetic_card(4, 1e9, 8.0)
    window = 64
    layers = tuple(replace(layer, attention="sliding", sliding_window=window) for layer in card.layers)
    sliding = replace(card, layers=layers)
    assert kv_cache_bytes(sliding, 1000).value == kv_cache_bytes(card, window).value
    hw = profiles["cpu-here"]
    long, longer = decode(sliding, hw, 1000), decode(sliding, hw, 5000)
    assert long.bytes_per_token.value == longer.bytes_per_token.value  # the window, not the context, is read
    # prompt of n tokens: position p sees min(p, window) positions; per KV layer 2 x heads x (k + v dims)
    n = 200
    seen = window * (window + 1) / 2 + (n - window) * window
    per_position = 4 * 2 * sliding.n_head * (sliding.head_dim_k + sliding.head_dim_v)
    expected = 2 * sliding.n_params_active + per_position * seen / n
    assert prefill(sliding, hw, n).flops_per_token.value == pytest.approx(expected)


def test_card_without_the_needed_numbers_is_a_clear_error(cards, profiles):
    card = replace(cards["ref-qwen2moe-f32"], n_experts_used=None, n_params_active=None, bytes_per_token=None)
    with pytest.raises(CostsError) as err:
        estimate(card, profiles["h100"], 256, 100, 10)
    assert "n_params_active" in str(err.value) and "\n" not in str(err.value)
