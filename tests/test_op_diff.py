"""The op-by-op differ's parts: the comparison (`engine.op_diff`) and the numpy engine's probe (`Meter.look`)."""

from __future__ import annotations

import numpy as np
import pytest

from walkthrough.engine import op_diff
from walkthrough.engine.glassbox.model import Model
from walkthrough.engine.glassbox.session import Session


def test_neighbouring_floats_are_one_ulp_apart():
    a = np.float32([1.0, 2.0, -0.0, 3.5])
    b = a.copy()
    b[1] = np.nextafter(np.float32(2.0), np.float32(3.0))
    b[2] = np.float32(0.0)  # -0 and +0 are equal
    d = op_diff.compare("x", 0, a, b)
    assert (d.differing, d.max_ulps, d.size) == (1, 1, 4)
    assert d.max_abs == pytest.approx(2.0 ** -22)
    assert not d.exact and "1 of 4 values differ" in d.describe()


def test_ulps_count_across_zero_and_nans_in_the_same_place_agree():
    tiny = np.float32(np.finfo(np.float32).smallest_subnormal)
    d = op_diff.compare("x", 0, np.float32([tiny, np.nan]), np.float32([-tiny, np.nan]))
    assert (d.differing, d.max_ulps) == (1, 2)


def test_attention_maps_are_cropped_to_the_cache_and_masked():
    positions = np.arange(3)
    ours = np.arange(2 * 3 * 3, dtype=np.float32).reshape(2, 3, 3)  # [h, n, L]
    theirs = np.full((1, 2, 3, 8), 99, np.float32)  # [1, h, n, n_kv]: llama.cpp's padded cache
    theirs[..., :3] = ours
    theirs[0, 1, 0, 2] = -5  # a hidden (future) position: ignored
    point = next(p for p in op_diff.LAYER_POINTS if p.name == "kq")
    d = op_diff.compare("kq", 0, *op_diff.aligned(point, ours, theirs, positions))
    assert d.exact and d.size == 18
    theirs[0, 1, 2, 1] += 1  # a visible position
    assert not op_diff.compare("kq", 0, *op_diff.aligned(point, ours, theirs, positions)).exact


def test_first_difference_follows_the_computing_order():
    same = np.ones((2, 4), np.float32)
    ours = {"attn_norm-0": [same], "Qcur-0": [same, same], "kqv_out-0": [same]}
    theirs = {"attn_norm-0": [same], "Qcur-0": [same, same * 2, same * 2], "kqv_out-0": [same * 3]}
    diffs = op_diff.layer_diffs(ours, theirs, 0, np.arange(2))
    assert [d.label for d in diffs] == ["attn_norm", "Qcur", "Qcur (roped)", "kqv_out"]
    assert op_diff.first_difference(diffs).label == "Qcur (roped)"  # the last Qcur node of each side


def test_a_point_agrees_with_a_neighbouring_node_of_its_name_but_never_the_far_end():
    x = np.ones((2, 4), np.float32)
    ours = {"Qcur-0": [x + 1, x * 3]}  # the projection with its bias, the roped result
    theirs = {"Qcur-0": [x, x + 1, x * 3, x * 6]}  # projection, + bias, roped, scaled (gemma4, phi3)
    diffs = op_diff.layer_diffs(ours, theirs, 0, np.arange(2))
    assert [(d.label, d.exact) for d in diffs] == [("Qcur", True), ("Qcur (roped)", True)]
    ours = {"Qcur-0": [x * 6, x]}  # the projection as the last node, the result as the first: no match
    diffs = op_diff.layer_diffs(ours, theirs, 0, np.arange(2))
    assert [(d.label, d.exact) for d in diffs] == [("Qcur", False), ("Qcur (roped)", False)]
    assert diffs[0].max_abs == 5 and diffs[1].max_abs == 5  # reported against the point's own node


def test_a_name_that_labels_only_the_projection_and_its_reshapes_has_no_roped_point():
    x = np.arange(8, dtype=np.float32)
    ours = {"Qcur-0": [x.reshape(2, 4), x.reshape(2, 4) * 2]}
    theirs = {"Qcur-0": [x.reshape(1, 1, 2, 4), x.reshape(1, 2, 2, 2)]}  # lfm2: projection, reshape
    diffs = op_diff.layer_diffs(ours, theirs, 0, np.arange(2))
    assert [(d.label, d.exact) for d in diffs] == [("Qcur", True)]


@pytest.fixture(scope="module")
def llama_ref(fixtures_dir):
    return Model.open(fixtures_dir / "reference" / "ref-llama-f32.gguf")


def test_the_probe_sees_every_point_under_llama_cpps_names_and_changes_nothing(llama_ref):
    ids = [1, 5, 9, 3]
    plain = Session(llama_ref, kv_type="f32").feed(ids, phase="prefill", all_logits=True).all_logits
    seen: dict[str, list[np.ndarray]] = {}
    llama_ref.probe = lambda name, a: seen.setdefault(name, []).append(np.array(a))
    try:
        probed = Session(llama_ref, kv_type="f32").feed(ids, phase="prefill", all_logits=True).all_logits
    finally:
        llama_ref.probe = None
    assert np.array_equal(plain, probed)
    n_layers = llama_ref.config.n_layers
    for layer in range(n_layers):
        names = {p.name for p in op_diff.LAYER_POINTS if p.common} - {"ffn_geglu"}  # llama's gate is SiLU
        assert {f"{n}-{layer}" for n in names} <= set(seen)
        assert len(seen[f"Qcur-{layer}"]) == 2  # the projection, then the roped queries
    assert seen["result_output"][-1].shape == plain.shape
    weights = seen["kq_soft_max-0"][0]  # [h, n, L]: causal, rows summing to 1
    assert weights.shape == (llama_ref.config.n_head, len(ids), len(ids))
    assert np.allclose(weights.sum(axis=-1), 1, atol=1e-6) and np.all(np.triu(weights[0], 1) == 0)
