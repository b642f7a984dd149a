"""Architectures as declarations: names from gguf-py, unknown tensors refused, the card reading the same kinds."""

from __future__ import annotations

import pytest
from conftest import FIXTURES_DIR
from gguf.constants import MODEL_ARCH_NAMES, MODEL_TENSORS
from gguf.constants import GGMLQuantizationType as Q
from gguf_builder import Tensor, write_gguf
from test_engine_weights import _metadata

from walkthrough.architectures.declarations import ARCHITECTURES, stem
from walkthrough.engine.glassbox.model import Model
from walkthrough.engine.glassbox.validate import UnexpectedTensor
from walkthrough.inspect.card import build_card
from walkthrough.inspect.gguf import open_gguf

LLAMA = FIXTURES_DIR / "reference" / "ref-llama-f32.gguf"
_BY_NAME = {name: arch for arch, name in MODEL_ARCH_NAMES.items()}


@pytest.mark.parametrize("name", sorted(ARCHITECTURES))
def test_declared_tensors_are_gguf_pys_for_that_architecture(name: str):
    arch = ARCHITECTURES[name]
    known = {stem(t) for t in MODEL_TENSORS[_BY_NAME[name]]}
    stems = {n.rsplit(".", 1)[0] if n.endswith((".weight", ".bias")) else n
             for n in arch.names | arch.tensors.names}
    assert stems <= known, f"{name} declares tensors gguf-py does not list for it: {sorted(stems - known)}"


def _with_extra(tmp_path, extra: Tensor):
    with open_gguf(LLAMA) as f:
        meta = _metadata(f)
        tensors = [Tensor(t.name, t.shape, t.ggml_type, f.tensor_bytes(t.name).tobytes()) for t in f.tensors.values()]
    return write_gguf(tmp_path / "extra.gguf", meta, [*tensors, extra])


def test_a_tensor_the_recipe_would_skip_is_an_error_naming_it(tmp_path):
    # A gemma-style post-norm in a llama file: the llama recipe has no place for it.
    with open_gguf(LLAMA) as f:
        width = f.tensors["blk.0.attn_norm.weight"].shape[0]
    path = _with_extra(tmp_path, Tensor("blk.1.post_ffw_norm.weight", (width,), Q.F32))
    with pytest.raises(UnexpectedTensor, match=r"blk\.1\.post_ffw_norm\.weight") as err:
        Model.open(path)
    assert "\n" not in str(err.value)
    card = build_card(open_gguf(path))  # the file can still be inspected
    assert card.n_layers == Model.open(LLAMA).config.n_layers


def test_a_stray_global_tensor_is_refused(tmp_path):
    path = _with_extra(tmp_path, Tensor("token_embd_norm.weight", (4,), Q.F32))
    with pytest.raises(UnexpectedTensor, match=r"token_embd_norm\.weight, .* outside the blocks"):
        Model.open(path)


@pytest.mark.parametrize("path", sorted((FIXTURES_DIR / "reference").glob("ref-*.gguf")), ids=lambda p: p.stem)
def test_card_and_engine_classify_layers_alike(path):
    model = Model.open(path)
    kinds = [(layer.attention, layer.ffn) for layer in model.card.layers[: model.config.n_layers]]
    assert kinds == list(zip(model.config.mixers, model.config.ffns))
    for mixer, ffn in kinds:
        assert mixer in model.config.spec.mixers and ffn in model.config.spec.ffns
