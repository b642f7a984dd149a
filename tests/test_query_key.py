"""Two arrows of a dot product: the recorded query and key give back the run's own attention weights, and
the plane is the keys' first two principal directions."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from walkthrough.engine.attention_map import AttentionMap
from walkthrough.engine.glassbox.model import Model
from walkthrough.engine.glassbox.session import Session
from walkthrough.engine.query_key import QueryKeys
from walkthrough.engine.sampler import Sampler

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "walkthrough" / "assets" / "tiny-clinical-moe.gguf"
PROMPT = [5, 17, 200, 33, 41, 102, 7, 9, 30, 12, 88]


def _run(path, chunk=4, decode=2, prompt=PROMPT):
    model = Model.open(path)
    session, sampler = Session(model, attention_rows=True), Sampler.greedy()
    steps = list(session.prefill(prompt, chunk=chunk, sampler=sampler))
    steps += list(session.decode(sampler, decode))
    return model, steps


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x.astype(np.float64) - x.max())
    return e / e.sum()


def _check_scores_are_the_runs(model, steps):
    amap, qk = AttentionMap.from_steps(steps, model.config), QueryKeys.from_steps(steps)
    assert qk.length == amap.length and set(qk.queries) == set(amap.layers)
    for layer in amap.layers:
        for head in range(model.config.n_head):
            for row in (0, qk.length // 2, qk.length - 1):
                # The softmax of the scores rebuilt from the recorded q and k is the row the run recorded.
                np.testing.assert_allclose(_softmax(qk.scores(layer, head, row)),
                                           amap.matrix(layer, head)[row, : row + 1], atol=2e-6)


def test_recorded_queries_and_keys_give_the_runs_weights():
    model, steps = _run(TINY)
    _check_scores_are_the_runs(model, steps)


@pytest.mark.app  # slow: a real trained model (SmolLM2) run and its scores rebuilt
@pytest.mark.skipif(not os.environ.get("SMOLLM2_GGUF"), reason="SMOLLM2_GGUF not set")
def test_recorded_queries_and_keys_give_the_runs_weights_on_smollm2():
    model, steps = _run(Path(os.environ["SMOLLM2_GGUF"]), chunk=None, decode=1, prompt=PROMPT[:6])
    _check_scores_are_the_runs(model, steps)


def test_the_pair_and_its_plane():
    model, steps = _run(TINY)
    qk = QueryKeys.from_steps(steps)
    layer, head, row, key = next(iter(qk.queries)), 1, qk.length - 1, 3
    pair = qk.pair(layer, head, row, key)
    hd = pair.query.shape[0]
    assert pair.kv_head == head // (model.config.n_head // model.config.n_head_kv[layer])
    assert pair.scale == pytest.approx(1 / np.sqrt(hd), rel=1e-6)
    assert pair.score == pytest.approx(pair.dot * pair.scale, rel=1e-5)
    # The plane: the keys' two largest principal directions (not centred), holding at most all their length.
    keys = qk.keys[layer][:, pair.kv_head].astype(np.float64)
    values = np.sort(np.linalg.eigvalsh(keys.T @ keys))[::-1]
    assert pair.plane_share == pytest.approx(values[:2].sum() / values.sum(), rel=1e-6)
    assert 0 < pair.plane_share <= 1
    # Coordinates are projections: each no longer than the vector itself.
    assert np.hypot(*pair.q2) <= np.linalg.norm(pair.query) + 1e-5
    assert np.hypot(*pair.k2) <= np.linalg.norm(pair.key_vector) + 1e-5
    assert pair.projected_score == pytest.approx((pair.q2[0] * pair.k2[0] + pair.q2[1] * pair.k2[1]) * pair.scale)
    with pytest.raises(ValueError, match="must satisfy"):
        qk.pair(layer, head, 2, 5)


def test_trace_arrows_prints_the_runs_score(capsys):
    from walkthrough.cli import main
    from walkthrough.engine.attention_map import AttentionMap

    ids = PROMPT[:6]
    assert main(["trace", str(TINY), "--ids", ",".join(map(str, ids)), "--steps", "3", "--arrows", "1:2"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    model = Model.open(TINY)  # the same request, run here: the CLI's figures are this run's
    steps = list(Session(model, attention_rows=True).generate(ids, Sampler.greedy(), 3, chunk=512))
    qk, amap = QueryKeys.from_steps(steps), AttentionMap.from_steps(steps, model.config)
    row = qk.length - 1
    key, weight = amap.top(1, 2, row, 1)[0]
    pair = qk.pair(1, 2, row, key)
    assert f"the query of position {row} and the key it weighted most, position {key}" in out
    assert f"= {pair.score:.4g} (the run's" in out and f"weight {weight:.1%}" in out
    assert f"= {pair.projected_score:.4g}: the plane alone, an approximation" in out
    for bad, needle in ((["--arrows", "1"], "write LAYER:HEAD"), (["--arrows", "7:0"], "layers 0..3"),
                        (["--arrows", "0:0", "--json"], "leave out")):
        assert main(["trace", str(TINY), "--ids", "5,17", "--steps", "1", *bad]) == 2
        assert needle in capsys.readouterr().err
