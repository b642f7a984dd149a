"""Products resolved once (`meter.HeldProduct`): a model's later passes take them and change nothing they report.

A `Model` keeps every float32 product whose matrix the weight cache holds, so later passes skip the lookups that
find it. These tests run the same passes through two models of one file, one keeping those products and one made to
forget them, and hold the two to the same logits bit for bit, the same bytes read per group, FLOPs and activation
bytes, pass by pass: on files with biases (qwen2), a tied output head (llama q4_0), Q4_1-style block offsets folded
in (SmolLM2, when present), F16 weights and experts.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import FIXTURES_DIR
from real_weights_support import find_smollm2

from walkthrough.engine.glassbox import meter as meter_module
from walkthrough.engine.glassbox.model import Model
from walkthrough.engine.glassbox.session import Session
from walkthrough.inspect.gguf import open_gguf

# file -> whether its products can be held: not an F32 file's (multiplied in float64) nor a product with a bias
REFERENCES = {"ref-llama-q4_0": True, "ref-qwen2-f32": False, "ref-qwen3-f16": True, "ref-qwen3moe-q8_0": True}


class _Forgetful(dict):
    """A `Model._held` that keeps nothing: every pass resolves every product afresh."""

    def __setitem__(self, key, value):
        pass


def _passes(model: Model, ids: list[int], decode: int) -> list:
    """The Steps of a prefill of ids, then `decode` greedy passes, F32 cache."""
    session = Session(model, kv_type="f32")
    steps = [session.feed(ids, phase="prefill")]
    for _ in range(decode):
        steps.append(session.feed([int(np.argmax(session.last_logits))], phase="decode"))
    return steps


def _same_passes(path, monkeypatch) -> tuple[Model, int]:
    """Two models of `path`, one keeping its products and one not, through the same passes: returns the first, and
    how many products its passes took held."""
    f = open_gguf(path)
    keeping, forgetting = Model(f), Model(f)
    forgetting._held = _Forgetful()
    ids = [int(i) for i in np.random.default_rng(7).integers(1, keeping.config.n_vocab, 9)]
    taken = []
    held_product = meter_module.Meter._held_product
    monkeypatch.setattr(meter_module.Meter, "_held_product",
                        lambda self, *a: taken.append(1) or held_product(self, *a))
    ours, theirs = _passes(keeping, ids, 4), _passes(forgetting, ids, 4)
    for a, b in zip(ours, theirs, strict=True):
        assert np.array_equal(a.logits, b.logits)
        assert a.bytes_read == b.bytes_read and list(a.bytes_read) == list(b.bytes_read)
        assert a.flops == b.flops
        assert [t.activation_bytes for t in a.layers] == [t.activation_bytes for t in b.layers]
    assert not forgetting._held
    return keeping, len(taken)


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_held_products_change_no_number(name, monkeypatch):
    model, taken = _same_passes(FIXTURES_DIR / "reference" / f"{name}.gguf", monkeypatch)
    assert bool(taken) == bool(model._held) == REFERENCES[name]
    assert all(route.matrix.dtype == np.float32 for route in model._held.values())


def test_held_products_on_smollm2(monkeypatch):
    path = find_smollm2()
    if path is None:
        pytest.skip("SmolLM2-135M-Instruct Q4_1 not found (SMOLLM2_GGUF)")
    model, taken = _same_passes(path, monkeypatch)
    per_pass = 4 * model.config.n_layers + 1  # q/k/v, attention output, gate and up, FFN down; the output head
    assert len(model._held) == per_pass
    assert taken == 4 * per_pass  # every product of the 4 passes after the first


def test_a_product_the_cache_cannot_hold_is_not_kept():
    path = FIXTURES_DIR / "reference" / "ref-llama-q4_0.gguf"
    model = Model(open_gguf(path), max_cache_bytes=0)
    _passes(model, [1, 2, 3], 2)
    assert not model._held
