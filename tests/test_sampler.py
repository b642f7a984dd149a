"""The sampler: each knob's effect, stage order as llama.cpp's default chain, determinism, greedy at T=0."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from walkthrough.engine.sampler import Sampler, SamplerSettings, sample_stages

OFF = SamplerSettings(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)


def _logits(seed: int = 0, n: int = 300) -> np.ndarray:
    return np.random.default_rng(seed).normal(0, 2, n).astype(np.float32)


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x.astype(np.float64) - x.max())
    return e / e.sum()


def test_same_seed_same_tokens_and_other_seed_other_tokens():
    logits = _logits()
    a = Sampler(OFF.with_(seed=7))
    b = Sampler(OFF.with_(seed=7))
    c = Sampler(OFF.with_(seed=8))
    seq_a = [a.sample(logits).chosen for _ in range(40)]
    seq_b = [b.sample(logits).chosen for _ in range(40)]
    seq_c = [c.sample(logits).chosen for _ in range(40)]
    assert seq_a == seq_b
    assert seq_a != seq_c


def test_temperature_zero_is_greedy_whatever_the_draw():
    for seed in range(5):
        logits = _logits(seed)
        sampler = Sampler(SamplerSettings(temperature=0.0, seed=seed))
        picks = {sampler.sample(logits).chosen for _ in range(20)}
        assert picks == {int(np.argmax(logits))}


def test_top_k_keeps_the_k_highest():
    logits = _logits(1)
    r = sample_stages(logits, OFF.with_(top_k=10), 0.3)
    assert r.after_top_k.tolist() == np.argsort(-logits)[:10].tolist()
    assert len(sample_stages(logits, OFF, 0.3).after_top_k) == len(logits)  # k <= 0 keeps all


def test_top_p_keeps_the_shortest_prefix_reaching_p():
    logits = _logits(2)
    p = 0.8
    r = sample_stages(logits, OFF.with_(top_p=p), 0.3)
    probs = _softmax(logits)
    kept = probs[r.after_top_p]
    assert kept.sum() >= p - 1e-9
    assert kept[:-1].sum() < p
    assert np.all(np.diff(logits[r.after_top_p]) <= 0)  # best first


def test_min_p_keeps_tokens_within_a_factor_of_the_best():
    logits = _logits(3)
    r = sample_stages(logits, OFF.with_(min_p=0.1), 0.3)
    probs = _softmax(logits)
    kept = set(r.after_min_p.tolist())
    assert kept == {i for i in range(len(logits)) if probs[i] >= 0.1 * probs.max() - 1e-12}


def test_temperature_reshapes_but_filters_run_at_temperature_one():
    logits = _logits(4)
    base = OFF.with_(top_k=50, top_p=0.9, min_p=0.02)
    hot, cold = sample_stages(logits, base.with_(temperature=2.0), 0.5), sample_stages(logits, base.with_(temperature=0.5), 0.5)
    assert hot.after_min_p.tolist() == cold.after_min_p.tolist()  # llama.cpp: temperature comes after the filters
    assert np.allclose(cold.probs, _softmax(logits[cold.after_min_p] / 0.5))
    assert cold.probs[0] > hot.probs[0]  # a colder distribution puts more on the best token


def test_the_draw_picks_where_the_running_sum_reaches_u():
    logits = _logits(5, 20)
    for u in (0.0, 0.2, 0.5, 0.9, 0.999):
        r = sample_stages(logits, OFF, u)
        cum = np.cumsum(r.probs)
        assert r.chosen == int(r.candidates[int(np.argmax(cum >= u))])


def test_draw_frequencies_follow_the_probabilities():
    logits = np.log(np.array([0.5, 0.3, 0.2], np.float32))
    sampler = Sampler(OFF.with_(seed=1))
    picks = np.bincount([sampler.sample(logits).chosen for _ in range(4000)], minlength=3) / 4000
    assert np.allclose(picks, [0.5, 0.3, 0.2], atol=0.03)


def test_resample_reuses_logits_and_draw():
    logits = _logits(6)
    first = Sampler(SamplerSettings(seed=3)).sample(logits)
    again = first.resample(first.settings)
    assert again.chosen == first.chosen and again.u == first.u
    greedy = first.resample(first.settings.with_(top_k=1))
    assert greedy.chosen == int(np.argmax(logits))
    assert len(greedy.after_top_k) == 1


@settings(max_examples=60, deadline=None)
@given(
    logits=arrays(np.float32, st.integers(2, 60), elements=st.floats(-20, 20, width=32)),
    top_k=st.integers(-1, 70),
    top_p=st.floats(0.05, 1.0),
    min_p=st.floats(0.0, 0.9),
    temperature=st.floats(0.0, 3.0),
    u=st.floats(0.0, 0.999),
)
def test_stages_nest_and_probabilities_sum_to_one(logits, top_k, top_p, min_p, temperature, u):
    r = sample_stages(logits, SamplerSettings(temperature, top_k, top_p, min_p), u)
    assert set(r.after_top_p) <= set(r.after_top_k)
    assert r.after_min_p.tolist() == r.after_top_p[: len(r.after_min_p)].tolist()
    assert len(r.after_min_p) >= 1
    assert abs(float(r.probs.sum()) - 1.0) < 1e-9
    assert r.chosen in set(r.after_min_p.tolist())
    assert logits[r.after_min_p[0]] == logits.max()
