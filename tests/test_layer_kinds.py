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


# ---- a kind with a hyperparameter of its own ----------------------------------------------------------------
QWEN35 = "ref-qwen35moe-f32.gguf"  # linear layers (Gated DeltaNet) and gated full attention


def toy_params(f, card) -> dict[str, object]:
    """The toy kind's own hyperparameters, read from the file: what its mixer multiplies by, its state's rows
    (and, as the test borrows a qwen35moe file's linear layers, the sizes of the tensors they hold)."""
    from walkthrough.engine.glassbox.qwen35 import hybrid_dims

    return {"scale": float(f.get(f"{card.architecture}.toy.scale")),
            "rows": int(f.get(f"{card.architecture}.toy.rows")), "tensors": hybrid_dims(f, card)}


def toy_shapes(config, layer: int) -> dict[str, tuple[int, ...]]:
    """The tensors a toy layer holds (those of the borrowed file's Gated DeltaNet layers)."""
    return config.params["toy_scaled"]["tensors"].tensor_shapes(config.n_embd)


def toy_scaled(p: layers.PassInput, layer: int, x: np.ndarray, trace: LayerTrace) -> np.ndarray:
    """[n, d] -> [n, d]: each position times the file's `toy.scale`."""
    calls.append((layer, x.shape[0]))
    return p.config.params["toy_scaled"]["scale"] * x


def toy_rows_state(config, layer: int) -> dict[str, np.ndarray]:
    """[rows, d]: as many rows as the file's `toy.rows`."""
    return {"memory": np.zeros((config.params["toy_scaled"]["rows"], config.n_embd), np.float32)}


def toy_state_values(read, n_embd: int | None) -> int | None:
    """Values in one toy layer's state, from the keys it reads: rows x n_embd."""
    rows = read("toy.rows")
    return None if rows is None or n_embd is None else rows * n_embd


@pytest.fixture
def toy_file(fixtures_dir, tmp_path) -> Path:
    from gguf.constants import GGUFValueType as V
    from gguf_builder import rewrite_gguf

    return rewrite_gguf(fixtures_dir / "reference" / QWEN35, tmp_path / "toy.gguf",
                        {"qwen35moe.toy.scale": (V.FLOAT32, 0.5), "qwen35moe.toy.rows": (V.UINT32, 3)})


def test_a_kind_with_its_own_hyperparameter_changes_neither_config_nor_card(toy_file, monkeypatch) -> None:
    """Its module (the functions above) and one declaration line; the architecture says its linear layers
    run it. The engine's Config carries the kind's values and the card sizes its state, from the
    declaration alone."""
    from walkthrough.architectures import declarations
    from walkthrough.inspect.card import build_card
    from walkthrough.inspect.gguf import open_gguf

    here = __name__
    register(LayerKind("toy_scaled", f"{here}:toy_scaled", "state", ("toy.scale", "toy.rows"),
                       f"{here}:toy_rows_state", f"{here}:toy_shapes", params=f"{here}:toy_params",
                       state_values=f"{here}:toy_state_values"))  # the one declaration line
    spec = declarations.ARCHITECTURES["qwen35moe"]
    monkeypatch.setitem(declarations.ARCHITECTURES, "qwen35moe",
                        dataclasses.replace(spec, linear_kind="toy_scaled"))
    try:
        card = build_card(open_gguf(toy_file))
        linear = card.linear_layers
        assert linear and all(card.layers[i].state_bytes == 3 * card.n_embd * 4 for i in linear)
        model = Model.open(toy_file)
        config = model.config
        assert config.params["toy_scaled"]["scale"] == 0.5 and config.params["toy_scaled"]["rows"] == 3
        assert "linear" not in config.params  # no layer runs Gated DeltaNet now
        calls.clear()
        session = Session(model)
        steps = list(session.prefill([1, 2, 3]))
        assert calls == [(i, 3) for i in linear]  # the linear layers ran the toy kind
        assert {i: s["memory"].shape for i, s in session.cache.states.items()} == {i: (3, config.n_embd)
                                                                                 for i in linear}
        assert session.cache.state_bytes_by_layer == {i: card.layers[i].state_bytes for i in linear}
        assert np.all(np.isfinite(steps[-1].logits))
    finally:
        del LAYER_KINDS["toy_scaled"]
        layers.runner.cache_clear()


def test_the_card_sizes_declared_states_as_before(fixtures_dir) -> None:
    """Gated DeltaNet's state, sized from its declaration, is llama.cpp's n_embd_r + n_embd_s (1408 values
    on the qwen35moe reference: conv 4, inner 64, state 16, groups 2)."""
    from walkthrough.inspect.card import build_card
    from walkthrough.inspect.gguf import open_gguf

    card = build_card(open_gguf(fixtures_dir / "reference" / QWEN35))
    assert {card.layers[i].state_bytes for i in card.linear_layers} == {1408 * 4}
