"""Cost curves (engine.curves): each point agrees with the memory plan and the cost model it is drawn from."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from walkthrough.costs.budget import FITS, NO_FIT, memory_plan
from walkthrough.costs.curves import (
    CACHE_TYPES,
    all_kv_bytes,
    contexts,
    decode_curve,
    is_hybrid,
    kv_curve,
    ttft_curve,
    users_curve,
)
from walkthrough.costs.estimate import users_table
from walkthrough.costs.hardware import load_profiles
from walkthrough.inspect.card import build_card, type_bytes_per_value
from walkthrough.inspect.gguf import open_gguf


@pytest.fixture(scope="module")
def profiles():
    return load_profiles()


def card_of(fixtures_dir: Path, stem: str):
    return build_card(open_gguf(fixtures_dir / "reference" / f"{stem}.gguf"))


def test_contexts_doubles_up_to_the_last():
    assert contexts(3000) == (256, 512, 1024, 2048, 3000)
    assert contexts(4096) == (256, 512, 1024, 2048, 4096)
    assert contexts(100) == (100,)


def test_kv_curve_scales_with_bytes_per_value_and_free_line_is_the_fit_boundary(fixtures_dir, profiles):
    card = card_of(fixtures_dir, "ref-llama-f32")
    hw = profiles["cpu-here"] if "cpu-here" in profiles else next(iter(profiles.values()))
    xs = contexts(1 << 22)
    curve = kv_curve(card, hw, xs)
    by = {s.label: s.ys for s in curve.series}
    for t in CACHE_TYPES:
        ys = by[f"KV {t}"]
        # linear in context, at the type's bytes per value relative to f16
        assert ys[1] == pytest.approx(2 * ys[0])
        assert ys[0] == pytest.approx(by["KV f16"][0] * type_bytes_per_value(t) / type_bytes_per_value("f16"))
    free = by[f"free on {hw.id}"][0]
    # one user fits exactly while the f16 cache is below the free line (checked against budget.memory_plan)
    for x, kv in zip(xs, by["KV f16"]):
        verdict = memory_plan(card, hw, x, "f16").verdict
        assert (verdict == FITS) == (kv <= free), (x, kv, free, verdict)
    assert not is_hybrid(card)


def test_hybrid_file_adds_every_layer_kv(fixtures_dir, profiles):
    card = card_of(fixtures_dir, "ref-qwen35moe-f32")
    assert is_hybrid(card)
    hw = next(iter(profiles.values()))
    curve = kv_curve(card, hw, (256, 512))
    by = {s.label: s.ys for s in curve.series}
    kv_layers = [layer for layer in card.layers if layer.keeps_kv and not layer.mtp]
    trunk = [layer for layer in card.layers if not layer.mtp]
    # every layer keeping K and V: the KV layers' cache scaled by trunk layers / KV layers (same width here)
    assert by["every layer K+V f16"][0] == pytest.approx(by["KV f16"][0] * len(trunk) / len(kv_layers))
    assert all_kv_bytes(card, 512) == pytest.approx(2 * all_kv_bytes(card, 256))


def test_ttft_grows_and_decode_falls_with_context(fixtures_dir, profiles):
    card = card_of(fixtures_dir, "ref-qwen3-f16")
    hw = next(p for p in profiles.values() if memory_plan(card, p, 1 << 14).verdict != NO_FIT)
    xs = contexts(1 << 14)
    ttft = ttft_curve(card, hw, xs).series[0].ys
    assert all(b > a for a, b in itertools.pairwise(ttft))
    ceiling, real = (s.ys for s in decode_curve(card, hw, xs).series)
    assert all(b < a for a, b in itertools.pairwise(ceiling))
    assert all(r <= c for r, c in zip(real, ceiling))


def test_users_curve_is_the_users_table(fixtures_dir, profiles):
    card = card_of(fixtures_dir, "ref-qwen3-f16")
    hw = next(iter(profiles.values()))
    curve = users_curve(card, hw, 1024, "q8_0")
    rows, _ = users_table(card, hw, 1024, "q8_0")
    assert curve.xs == tuple(r.users for r in rows)
    each, total = (s.ys for s in curve.series)
    for x, e, t in zip(curve.xs, each, total):
        assert t == pytest.approx(x * e)
    assert all(b <= a for a, b in itertools.pairwise(each))  # sharing a step never makes one user faster
