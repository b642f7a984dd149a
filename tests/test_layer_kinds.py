"""A new layer kind is its module (one function) and one declaration line; the engine runs it by name.

The toy mixer below stands for a new kind's module; `register(LayerKind(...))` is the declaration
line. Nothing else changes: the block dispatches by `architectures.layer_kinds`, and the KV cache
keeps K and V only for kinds that say they keep them.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from walkthrough.architectures.layer_kinds import LAYER_KINDS, LayerKind, keeps, register, resolve
from walkthrough.engine.glassbox import layers
from walkthrough.engine.glassbox.model import Model
from walkthrough.engine.glassbox.session import Session
from walkthrough.engine.steps import LayerTrace

TINY = Path(__file__).resolve().parents[1] / "assets" / "tiny-clinical-moe.gguf"
calls: list[tuple[int, int]] = []  # (layer, tokens) per call of the toy mixer


def toy_mixer(p: layers.PassInput, layer: int, x: np.ndarray, trace: LayerTrace) -> np.ndarray:
    """[n, d] -> [n, d]: each position keeps only half of itself (moves nothing between positions)."""
    calls.append((layer, x.shape[0]))
    return 0.5 * x


def toy_state(config, layer: int) -> dict[str, np.ndarray]:
    """A toy kind's zero state: one [4, d] array per layer."""
    return {"memory": np.zeros((4, config.n_embd), np.float32)}


@pytest.fixture
def toy_kind():
    register(LayerKind("toy", f"{__name__}:toy_mixer"))  # the one declaration line
    yield LAYER_KINDS["toy"]
    del LAYER_KINDS["toy"]
    layers.runner.cache_clear()


def test_every_declared_kind_resolves_to_an_engine_function() -> None:
    for kind in LAYER_KINDS.values():
        assert callable(layers.runner(kind.name)), kind.name
        for target in (kind.state, kind.shapes):
            assert not target or callable(resolve(target)), (kind.name, target)
        assert kind.keeps in ("kv", "state", "")


def test_a_new_layer_kind_runs_from_its_declaration(toy_kind) -> None:
    model = Model.open(TINY)
    n = model.config.n_layers
    model.config = dataclasses.replace(model.config, mixers=("toy",) * n)
    calls.clear()
    session = Session(model)
    steps = list(session.prefill([1, 2, 3]))
    assert calls == [(i, 3) for i in range(n)]  # every layer ran the toy mixer, once, on the 3 tokens
    assert session.cache.layers == []  # the toy kind keeps nothing: no K and V are kept for its layers
    assert all(layer.kv_len == 0 for layer in steps[-1].layers)
    logits = steps[-1].logits
    assert logits is not None and np.all(np.isfinite(logits))


def test_a_new_kind_with_a_state_gets_it_from_its_declaration() -> None:
    register(LayerKind("toy_state", f"{__name__}:toy_mixer", "state", state=f"{__name__}:toy_state"))
    try:
        model = Model.open(TINY)
        n = model.config.n_layers
        model.config = dataclasses.replace(model.config, mixers=("toy_state",) * n)
        session = Session(model)
        assert sorted(session.cache.states) == list(range(n))
        assert session.cache.state_bytes_by_layer == {i: 4 * model.config.n_embd * 4 for i in range(n)}
    finally:
        del LAYER_KINDS["toy_state"]
        layers.runner.cache_clear()


def test_layers_no_kind_runs_keep_nothing() -> None:
    """The card's "none" / "unknown" layers (and the MTP block's skipped trunk) keep no cache."""
    assert keeps("none") == keeps("unknown") == "" and keeps("full") == "kv" and keeps("linear") == "state"


def test_a_kind_is_declared_once(toy_kind) -> None:
    with pytest.raises(ValueError, match="already declared"):
        register(LayerKind("toy", f"{__name__}:toy_mixer"))
    with pytest.raises(ValueError, match="keeps"):
        register(LayerKind("toy2", f"{__name__}:toy_mixer", keeps="everything"))
    with pytest.raises(ValueError, match="names the function"):
        register(LayerKind("toy3", f"{__name__}:toy_mixer", keeps="state"))
