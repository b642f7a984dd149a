"""The Costs stage's knobs (engine.request_size) and every machine side by side (engine.machines)."""

from __future__ import annotations

import pytest

from walkthrough.costs.estimate import estimate
from walkthrough.costs.hardware import load_profiles
from walkthrough.costs.machines import SORT_KEYS, machine_rows, sort_rows
from walkthrough.costs.request_size import MAX_USERS, RequestSize, estimate_for
from walkthrough.inspect.card import build_card
from walkthrough.inspect.gguf import open_gguf


def test_knobs_double_halve_and_stay_in_bounds():
    size = RequestSize(None, 40, 128)
    assert size.context == 168
    bigger = size.scaled("prompt_tokens", 2)
    assert (bigger.prompt_tokens, bigger.context) == (80, 208)  # the context follows prompt + output
    fixed = size.scaled("context", 2)
    assert fixed.context == 336 and fixed.scaled("prompt_tokens", 2).context == 336
    assert RequestSize(None, 1, 1).scaled("output_tokens", 0.5).output_tokens == 1
    assert RequestSize(None, 1, 1, users=MAX_USERS).scaled("users", 2).users == MAX_USERS
    assert [s.cache_type for s in (size.next_cache_type(), size.next_cache_type().next_cache_type(),
                                   size.next_cache_type().next_cache_type().next_cache_type())] == [
        "q8_0", "q4_0", "f16"]
    with pytest.raises(ValueError):
        size.scaled("temperature", 2)


def test_machines_view_is_one_estimate_per_profile_and_sorts(fixtures_dir):
    card = build_card(open_gguf(fixtures_dir / "reference" / "ref-qwen3-f16.gguf"))
    profiles = list(load_profiles().values())
    size = RequestSize(None, 300, 100, "q8_0", 2)
    rows = machine_rows(card, profiles, size)
    assert [r.id for r in rows] == [p.id for p in profiles]
    for hw, row in zip(profiles, rows):
        e = estimate(card, hw, 400, 300, 100, "q8_0", 2)
        assert e == estimate_for(card, hw, size)
        assert row.verdict == e.memory.verdict
        if e.decode is not None:
            assert row.realistic == e.decode.tokens_per_s.value
            assert row.first_token == e.prefill.seconds.value
    fastest = sort_rows(rows, "decode")
    speeds = [r.realistic for r in fastest if r.realistic is not None]
    assert speeds == sorted(speeds, reverse=True)
    assert [r.bandwidth for r in sort_rows(rows, "bandwidth")] == sorted((r.bandwidth for r in rows), reverse=True)
    for key in SORT_KEYS:
        assert sorted(r.id for r in sort_rows(rows, key)) == sorted(r.id for r in rows)
