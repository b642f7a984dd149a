"""Weights: dequantization per type, per-expert slicing, embedding rows, tied embeddings, shape checks."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import FIXTURES_DIR
from gguf import quants
from gguf.constants import GGMLQuantizationType as Q
from gguf.constants import GGUFValueType as V
from gguf_builder import Tensor, write_gguf

from walkthrough.engine.glassbox.config import UnsupportedArchitecture
from walkthrough.engine.glassbox.model import Model
from walkthrough.engine.glassbox.session import Session
from walkthrough.engine.glassbox.validate import IncompleteModel
from walkthrough.engine.glassbox.weights import Weights, dequantize_rows
from walkthrough.inspect.gguf import open_gguf

QWEN2 = FIXTURES_DIR / "reference" / "ref-qwen2-f32.gguf"

# Largest error of a round trip, as a fraction of the block's largest magnitude (or of the value for BF16):
# 8-bit codes step by 1/127 of it, 5-bit by 1/15 (Q5_0) or 1/31 of the range, 4-bit by 1/7 or 1/15.
ROUND_TRIP = {Q.Q8_0: 1 / 127, Q.Q5_0: 1 / 15, Q.Q5_1: 1 / 31, Q.Q4_0: 1 / 7, Q.Q4_1: 1 / 15, Q.BF16: 1 / 128}


@pytest.mark.parametrize("qtype", list(ROUND_TRIP), ids=lambda t: t.name)
def test_quantized_rows_come_back_within_one_step(qtype):
    data = np.random.default_rng(0).normal(0, 1, (6, 64)).astype(np.float32)
    raw = np.ascontiguousarray(quants.quantize(data, qtype)).view(np.uint8).ravel()
    back = dequantize_rows(raw, qtype, 64, "test")
    assert back.shape == data.shape
    if qtype == Q.BF16:
        bound = np.abs(data) * ROUND_TRIP[qtype]
    else:
        blocks = np.abs(data).reshape(6, 2, 32).max(axis=-1, keepdims=True)
        bound = np.broadcast_to(blocks * ROUND_TRIP[qtype], (6, 2, 32)).reshape(6, 64)
    assert np.all(np.abs(back - data) <= bound + 1e-6)


def test_q4_k_block_decodes_as_ggml_lays_it_out():
    # One Q4_K super-block (256 values): f16 d, f16 dmin, 12 bytes of 6-bit scales/mins, 128 bytes of nibbles.
    # Scales all 1 and mins all 0 (bytes 0-3 = 1, 4-7 = 0, 8-11 = 0x01), d = 0.5: value = 0.5 * nibble, where
    # each 32-byte chunk j holds values 64j..64j+31 in its low nibbles and 64j+32..64j+63 in its high ones.
    qs = np.random.default_rng(1).integers(0, 256, 128, dtype=np.uint8)
    block = np.concatenate([
        np.array([0.5, 0.0], np.float16).view(np.uint8),
        np.array([1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1], np.uint8),
        qs,
    ])
    expected = np.concatenate([np.concatenate([qs[32 * j : 32 * j + 32] & 15, qs[32 * j : 32 * j + 32] >> 4])
                               for j in range(4)]) * 0.5
    assert np.array_equal(dequantize_rows(block, Q.Q4_K, 256, "test")[0], expected.astype(np.float32))


@pytest.fixture()
def stacked(tmp_path):
    """A file with a Q8_0 expert stack (4 experts of [3 out, 32 in]) and a Q8_0 embedding of 5 rows."""
    rng = np.random.default_rng(2)
    experts = rng.normal(0, 1, (4, 3, 32)).astype(np.float32)
    embedding = rng.normal(0, 1, (5, 32)).astype(np.float32)
    path = write_gguf(tmp_path / "stack.gguf", {"general.architecture": (V.STRING, "test")}, [
        Tensor("blk.0.ffn_up_exps.weight", (32, 3, 4), Q.Q8_0, quants.quantize(experts, Q.Q8_0).tobytes()),
        Tensor("token_embd.weight", (32, 5), Q.Q8_0, quants.quantize(embedding, Q.Q8_0).tobytes()),
    ])
    return path, experts, embedding


def test_experts_are_sliced_and_only_chosen_ones_dequantized(stacked):
    path, experts, _ = stacked
    w = Weights(open_gguf(path))
    one = w.expert("blk.0.ffn_up_exps.weight", 2)
    assert one.shape == (3, 32)
    assert w.dequantized_bytes == one.nbytes  # nothing else was touched
    assert np.abs(one - experts[2]).max() < 0.05
    whole = w.get("blk.0.ffn_up_exps.weight")
    for e in range(4):
        assert np.array_equal(w.expert("blk.0.ffn_up_exps.weight", e), whole[e])
    assert w.expert_nbytes("blk.0.ffn_up_exps.weight") == 3 * 34  # 3 rows of one Q8_0 block


def test_embedding_rows_without_the_whole_matrix(stacked):
    path, _, embedding = stacked
    w = Weights(open_gguf(path))
    rows = w.rows("token_embd.weight", np.array([4, 0, 4]))
    assert w.dequantized_bytes == 0  # rows are decoded from their own bytes, nothing cached
    assert np.array_equal(rows, w.get("token_embd.weight")[[4, 0, 4]])
    assert np.abs(rows - embedding[[4, 0, 4]]).max() < 0.05


def test_a_full_cache_keeps_what_it_holds(stacked):
    """Passes read the weights in the same order: a full cache keeps its first weights (evicting the least
    recently used one would evict each weight just before it is read again)."""
    path, _, _ = stacked
    w = Weights(open_gguf(path), max_cache_bytes=2 * 3 * 32 * 4)  # room for two experts
    for e in (0, 1, 2):
        w.expert("blk.0.ffn_up_exps.weight", e)
    before = w.dequantized_bytes
    for e in (0, 1):  # still cached
        w.expert("blk.0.ffn_up_exps.weight", e)
    assert w.dequantized_bytes == before
    w.expert("blk.0.ffn_up_exps.weight", 2)  # no room: decoded again
    assert w.dequantized_bytes == before + 3 * 32 * 4
    assert w.cached_bytes == 2 * 3 * 32 * 4


def _metadata(f) -> dict:
    out = {}
    for key, field in f.fields.items():
        value = f.get(key)
        if field.is_array:
            out[key] = (V.ARRAY, field.element_type, list(value) if isinstance(value, list) else value.tolist())
        else:
            out[key] = (field.type, value)
    return out


def _rewrite(src, dst, *, metadata=None, replace=None, drop=()):
    """A copy of a model file with metadata changed, tensors' data replaced, or tensors dropped."""
    with open_gguf(src) as f:
        meta = _metadata(f) | (metadata or {})
        tensors = [
            Tensor(t.name, t.shape, t.ggml_type, (replace or {}).get(t.name, f.tensor_bytes(t.name).tobytes()))
            for t in f.tensors.values() if t.name not in drop
        ]
    return write_gguf(dst, meta, tensors)


def test_missing_output_head_reuses_the_embedding(tmp_path):
    with open_gguf(QWEN2) as f:
        head = f.tensor_bytes("output.weight").tobytes()
    untied = _rewrite(QWEN2, tmp_path / "untied.gguf", replace={"token_embd.weight": head})
    tied = _rewrite(QWEN2, tmp_path / "tied.gguf", replace={"token_embd.weight": head}, drop={"output.weight"})
    ids = [5, 17, 99, 200, 3]
    a = Session(Model.open(untied)).feed(ids, phase="prefill", all_logits=True)
    model = Model.open(tied)
    b = Session(model).feed(ids, phase="prefill", all_logits=True)
    assert model.tied_output
    assert np.array_equal(a.all_logits, b.all_logits)
    one = Session(model).feed([7], phase="decode")  # one token: the card's bytes per token
    weights = {g: n for g, n in one.bytes_read.items() if g not in ("kv_cache", "total")}
    assert weights == model.card.bytes_per_token_by_group


def test_shapes_that_disagree_with_the_metadata_are_refused(tmp_path):
    bad = _rewrite(QWEN2, tmp_path / "bad.gguf", metadata={"qwen2.attention.head_count": (V.UINT32, 8)})
    # 8 heads over a width of 64 means heads of 8: K of 2 heads x 8 = 16, but the file's is 32 wide.
    with pytest.raises(IncompleteModel, match=r"blk.0.attn_k.weight has shape \[64, 32\] .* \[64, 16\]"):
        Model.open(bad)
    cut = _rewrite(QWEN2, tmp_path / "cut.gguf", drop={"blk.1.ffn_down.weight"})
    with pytest.raises(IncompleteModel, match="no tensor blk.1.ffn_down.weight"):
        Model.open(cut)


def test_rope_scaling_the_engine_does_not_implement_is_refused(tmp_path):
    longrope = _rewrite(QWEN2, tmp_path / "longrope.gguf", metadata={"qwen2.rope.scaling.type": (V.STRING, "longrope")})
    with pytest.raises(UnsupportedArchitecture, match="longrope"):
        Model.open(longrope)
