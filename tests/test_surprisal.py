"""Surprisal of every token of a run, from the run's own logits: per pass, across chunks, in `trace --json`."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np

from walkthrough.engine.glassbox.model import Model
from walkthrough.engine.glassbox.session import Session
from walkthrough.engine.sampler import Sampler
from walkthrough.engine.surprisal import run_summary, surprisal

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "walkthrough" / "assets" / "tiny-clinical-moe.gguf"
PROMPT = [5, 17, 200, 33, 41, 1024, 7, 9, 300, 12, 88, 2048, 3, 4]


def _nll(logits: np.ndarray, ids: list[int]) -> np.ndarray:
    """-log softmax(logits[i])[ids[i]], written out with float64 and no shared code."""
    x = logits.astype(np.float64)
    p = np.exp(x - x.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return -np.log(p[np.arange(len(ids)), ids])


def test_surprisal_at_the_tokens_matches_a_float64_softmax_over_a_large_vocabulary():
    rng = np.random.default_rng(7)
    logits = (rng.standard_normal((3, 49152)) * 6 + np.array([[0.0], [80.0], [-300.0]])).astype(np.float32)
    ids = [int(np.argmax(logits[0])), 17, 40000]
    got = surprisal(logits, ids)
    np.testing.assert_allclose(got, _nll(logits, ids), rtol=0, atol=1e-6)  # float32 exps, float64 sum


def test_chunked_prefill_and_decode_surprisal_match_one_pass():
    model = Model.open(TINY, match_llama_cpp=False)
    whole = next(Session(model).prefill(PROMPT, all_logits=True)).all_logits  # [n, V]
    expected = _nll(whole[:-1], PROMPT[1:])
    session, sampler = Session(model), Sampler.greedy()
    steps = list(session.prefill(PROMPT, chunk=5, sampler=sampler, all_logits=True))
    steps += list(session.decode(sampler, 3))
    got = np.concatenate([s.surprisal for s in steps if s.phase == "prefill"])
    assert math.isnan(got[0])  # the first token has nothing before it
    np.testing.assert_allclose(got[1:], expected, rtol=1e-4, atol=1e-4)  # chunk borders use the previous pass's last logits
    for before, after in itertools.pairwise(steps):
        if after.phase == "decode":  # a decode pass feeds what the pass before chose
            assert after.surprisal[0] == before.chosen_surprisal
    summary = run_summary(steps)
    assert summary["request"]["tokens"] == len(PROMPT) - 1
    assert summary["request"]["perplexity"] == math.exp(np.mean(got[1:]))
    assert summary["answer"]["tokens"] == len([s for s in steps if s.chosen is not None])


def test_prefill_without_all_logits_knows_only_its_first_token():
    session = Session(Model.open(TINY))
    first, second = session.prefill(PROMPT, chunk=7)
    assert np.isnan(first.surprisal).all()
    assert np.isfinite(second.surprisal[0]) and np.isnan(second.surprisal[1:]).all()


def test_trace_json_carries_surprisal_and_loss(capsys):
    from walkthrough.cli import main

    ids = ",".join(map(str, PROMPT))
    assert main(["trace", str(TINY), "--ids", ids, "--steps", "3", "--json"]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    prefill = records[0]
    assert prefill["surprisal"][0] is None and len(prefill["surprisal"]) == len(PROMPT)
    last = records[-1]["loss"]
    request = [x for x in prefill["surprisal"] if x is not None]
    assert last["request"]["tokens"] == len(PROMPT) - 1
    assert abs(last["request"]["loss"] - np.mean(request)) < 1e-5  # the records round to 6 places
    chosen = [r["chosen_surprisal"] for r in records]
    assert abs(last["answer"]["perplexity"] - math.exp(np.mean(chosen))) < 1e-4


def test_measuring_surprisal_leaves_the_pass_and_its_costs_as_they_are():
    model = Model.open(TINY)
    plain = list(Session(model).prefill(PROMPT, chunk=6))
    measured = list(Session(model, measure_surprisal=True).prefill(PROMPT, chunk=6))
    every = list(Session(model).prefill(PROMPT, chunk=6, all_logits=True))
    for a, b, c in zip(plain, measured, every):
        assert (a.flops, a.bytes_read) == (b.flops, b.bytes_read)  # the extra rows are not the pass's cost
        assert b.all_logits is None
        np.testing.assert_array_equal(a.logits, b.logits)
        np.testing.assert_allclose(b.surprisal[1:], c.surprisal[1:], rtol=1e-5, atol=1e-5)
        assert c.flops > a.flops  # keeping every row's logits does cost the pass more
