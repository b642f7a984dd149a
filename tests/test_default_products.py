"""The engine's default products (not `exact_products`): how they are grouped changes no number that should not.

- A Q4_1/Q5_1 product takes Q8_1's block-sum error as extra input columns against the block offsets
  (`weights.with_offsets`): one product lands where llama.cpp's exact one does (`quantdot.matmul`, bit for
  bit ggml's), closer than the rounded input alone.
- Matrices sharing an input (q/k/v, gate/up) multiplied as one stacked matrix (`Meter.linears`) give each
  output the bits the matrices give alone.
- `ggml_math.v_expf`'s shortcut and its general path agree, and the shortcut hands over when it must.
- SiLU's exp: ggml's own with exact products, else numpy's rounded from float64 (`ggml_math.rounded_expf`),
  the same for every shape of pass and within 3 steps of ggml's.
- RoPE and attention's softmax: ggml's fused products and own exp where the layers' products follow ggml's
  (exact products, or every layer matrix in float64: an F32 file), else numpy's float32 rounding and
  `rounded_expf` in ggml's sums (`Model.exact_elementwise`).
- A matrix held by columns (`ops.linear_columns`, the output head) gives a row the same bits whatever the
  number of rows in the pass, held whole or a block at a time.
- A long pass's attention taken a block of queries at a time, each over the cells it sees, gives the whole pass's
  bits.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_quantdot import activations, random_rows

from walkthrough.engine import op_diff
from walkthrough.engine.glassbox import ggml_math, ops, quantdot
from walkthrough.engine.glassbox.meter import Meter
from walkthrough.engine.glassbox.model import Model
from walkthrough.engine.glassbox.weights import Weights, dequantize_rows, with_offsets
from walkthrough.inspect.gguf import open_gguf

TINY = "assets/tiny-clinical-moe.gguf"


@pytest.mark.parametrize("qtype", sorted(quantdot.WITH_OFFSET, key=lambda t: t.value), ids=lambda t: t.name)
def test_offsets_as_extra_columns_land_on_llama_cpps_product(qtype):
    n_out, n_in = 96, 512
    raw = random_rows(qtype, n_out, n_in)
    x = activations(5, n_in)
    exact = quantdot.matmul(x, quantdot.pack(raw, qtype, n_in))  # [5, n_out], ggml's bits
    w = dequantize_rows(raw, qtype, n_in, "w")  # [n_out, n_in]
    rounded, err = quantdot.rounded_q8_1(x)
    folded = ops.linear(np.concatenate([rounded, err], axis=1), with_offsets(w, quantdot.block_offsets(raw, qtype, n_in)))
    plain = ops.linear(rounded, w)
    scale = np.abs(exact).max()
    assert np.abs(folded - exact).max() < 1e-5 * scale
    assert np.abs(plain - exact).max() > 10 * np.abs(folded - exact).max()  # the extra columns are what close it


def _meter(model: Model) -> Meter:
    return model.meter()


def test_stacked_products_are_the_products_alone():
    model = Model(open_gguf(TINY))
    x = np.random.default_rng(3).standard_normal((9, model.config.n_embd)).astype(np.float32)
    names = [f"blk.0.attn_{p}.weight" for p in "qkv"]
    biases = [f"blk.0.attn_{p}.bias" for p in "qkv"]
    for rows in (x, x[:1]):  # a prefill's rows and a decode's row
        stacked_meter = _meter(model)
        together = stacked_meter.linears(names, rows, biases)
        alone_meter = _meter(model)
        alone = [alone_meter.linear(n, rows, b) for n, b in zip(names, biases)]
        assert all(np.array_equal(a, b) for a, b in zip(together, alone))
        assert stacked_meter.bytes_by_group == alone_meter.bytes_by_group
        assert stacked_meter.flops == alone_meter.flops and stacked_meter.written == alone_meter.written
    assert any(key[0] == "stacked" for key in model.weights.cached())  # they were multiplied as one


def test_a_matrix_off_the_row_group_is_not_stacked_on(monkeypatch):
    model = Model(open_gguf(TINY))
    x = np.ones((2, model.config.n_embd), np.float32)
    monkeypatch.setattr(ops, "ROW_SLAB", 48)  # q's 128 rows are then no whole number of groups
    names = [f"blk.0.attn_{p}.weight" for p in "qk"]
    alone = [_meter(model).linear(n, x) for n in names]
    together = _meter(model).linears(names, x, [None, None])
    assert all(np.array_equal(a, b) for a, b in zip(together, alone))
    assert not any(key[0] == "stacked" for key in model.weights.cached())


def test_v_expf_shortcut_is_the_general_path():
    rng = np.random.default_rng(4)
    for scale in (0.01, 1.0, 10.0, 60.0):
        x = (rng.standard_normal(200_000) * scale).astype(np.float32)
        with np.errstate(over="ignore", invalid="ignore"):
            assert np.array_equal(ggml_math.v_expf(x), ggml_math.v_expf_general(x))


def test_v_expf_hands_a_halfway_sum_to_the_general_path(monkeypatch):
    x = np.linspace(-5, 5, 1001, dtype=np.float32)
    taken = []
    general = ggml_math.v_expf_general
    monkeypatch.setattr(ggml_math, "_rounds_right", lambda s: False)
    monkeypatch.setattr(ggml_math, "v_expf_general", lambda a: taken.append(a) or general(a))
    assert np.array_equal(ggml_math.v_expf(x), general(x))
    assert len(taken) == 1


def test_the_default_silu_is_numpys_exp_and_the_exact_one_ggmls():
    rng = np.random.default_rng(11)
    gate = (rng.standard_normal((7, 1539)) * 4).astype(np.float32)  # rows of 8 + a tail of 3
    up = rng.standard_normal(gate.shape).astype(np.float32)
    exact = ops.gated_unit("silu", True)(gate, up)
    assert np.array_equal(exact, ggml_math.silu(gate) * up)  # ggml's v_expf and libm's tail
    rounded = ops.gated_unit("silu", False)(gate, up)
    e = np.exp(-gate.astype(np.float64)).astype(np.float32)  # the nearest float32 of e^-x, all but always
    assert np.array_equal(rounded, gate / (np.float32(1) + e) * up)
    assert not np.array_equal(rounded, exact)  # the two exps differ in the last bits
    assert op_diff.compare("silu", 0, ggml_math.silu(gate, exact=False), ggml_math.silu(gate)).max_ulps <= 3


def test_the_default_silu_gives_a_value_the_same_bits_in_any_pass():
    rng = np.random.default_rng(12)
    x = (rng.standard_normal((40, 1536)) * 6).astype(np.float32)  # more values than one chunk
    x[0, :4] = [-200, 200, -90, 0]  # e^-x beyond float32: silu is 0 (no numpy warning)
    with np.errstate(over="raise"):
        whole = ggml_math.silu(x, exact=False)
    assert whole[0, 0] == 0 and whole[0, 1] == 200 and whole[0, 2] == 0 and whole[0, 3] == 0
    rows = np.concatenate([ggml_math.silu(x[i : i + 3], exact=False) for i in range(0, len(x), 3)])
    strided = ggml_math.silu(np.asfortranarray(x), exact=False)
    assert np.array_equal(whole, rows) and np.array_equal(whole, strided)


def _rope_inputs(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """x [5, 6, 64] and the angles of positions 0..4 for 64 rotated dims, as a pass makes them."""
    x = (np.random.default_rng(seed).standard_normal((5, 6, 64)) * 3).astype(np.float32)
    cos, sin = ops.rope_angles(np.arange(5), 64, 10000.0)  # [5, 32] each
    return x, cos, sin


@pytest.mark.parametrize("neox", [False, True], ids=["adjacent pairs", "neox halves"])
def test_the_default_rope_rounds_each_step_and_the_exact_one_fuses(neox):
    x, cos, sin = _rope_inputs(13)
    pairs = (slice(0, 32), slice(32, 64)) if neox else (slice(0, 64, 2), slice(1, 64, 2))
    a, b = x[..., pairs[0]], x[..., pairs[1]]
    c, s = cos[:, None], sin[:, None]
    plain = ops.rope(x, cos, sin, neox, exact=False)
    assert np.array_equal(plain[..., pairs[0]], a * c - b * s) and np.array_equal(plain[..., pairs[1]], a * s + b * c)
    fused = ops.rope(x, cos, sin, neox)
    assert np.array_equal(fused[..., pairs[0]], ggml_math.fma32(a, c, -(b * s)))
    assert not np.array_equal(plain, fused)  # the fused sums differ in their last bits
    assert np.allclose(plain, fused, rtol=0, atol=4 * np.spacing(np.abs(x).max()))


def test_the_default_softmax_takes_numpys_exp_in_ggmls_sums():
    rng = np.random.default_rng(14)
    scores = (rng.standard_normal((2, 3, 4, 21)) * 4).astype(np.float32)  # [h_kv, group, n, L]: L no multiple of 8
    scores[..., 0, 5:] = -np.inf  # a row that sees 5 cells
    top = scores.max(axis=-1, keepdims=True)
    e = np.where(scores > -np.inf, np.exp((scores - top).astype(np.float64)), 0).astype(np.float32)
    padded = np.concatenate([e, np.zeros((*e.shape[:-1], 3), np.float32)], axis=-1)  # to 24 cells, 3 registers
    total = ggml_math.sum_in_order(ggml_math.hsum8(padded.reshape(*e.shape[:-1], 3, 8)).astype(np.float64))
    want = e * (1.0 / total).astype(np.float32)[..., None]
    rounded = ops.cache_softmax(scores, exact=False)
    assert np.array_equal(rounded, want)
    exact = ops.cache_softmax(scores)
    assert not np.array_equal(rounded, exact)  # ggml's exp differs in the last bits
    assert op_diff.compare("kq_soft_max", 0, rounded, exact).max_ulps <= 4


def test_rope_and_softmax_follow_ggml_where_the_layers_products_do(monkeypatch):
    """An F32 file's layers multiply in float64 and take ggml's RoPE and softmax; a quantized file's default pass
    takes numpy's rounding in both (other bits than ggml's kernels give, close to them), exact products ggml's."""
    from walkthrough.engine.glassbox.session import Session

    f32 = Model(open_gguf("tests/fixtures/arch/ref-gemma4-f32.gguf"))
    assert f32.exact_elementwise and f32.meter().exact_elementwise
    quantized = open_gguf(TINY)  # Q8_0 layers with an F32 router: some layer products are float32 sums
    assert Model(quantized, exact_products=True).meter().exact_elementwise
    default, ggmls = Model(quantized), Model(quantized)
    assert not default.exact_elementwise and not default.meter().exact_elementwise
    ggmls.exact_elementwise = True
    asked: list[tuple[str, bool]] = []  # (kernel, exact) as each pass called them

    def recorded(kernel: str):
        run = getattr(ops, kernel)
        return lambda *a, exact=True: asked.append((kernel, exact)) or run(*a, exact=exact)

    for kernel in ("rope", "cache_softmax"):
        monkeypatch.setattr(ops, kernel, recorded(kernel))
    seen = []
    for model in (default, ggmls):
        asked.clear()
        points: dict[str, list[np.ndarray]] = {}
        model.probe = lambda name, a, points=points: points.setdefault(name, []).append(np.array(a))
        Session(model, kv_type="f32").feed(list(range(3, 40)), phase="prefill")
        assert sorted(set(asked)) == [("cache_softmax", model.exact_elementwise), ("rope", model.exact_elementwise)]
        seen.append(points)
    ours, theirs = seen[0]["Qcur-0"][-1], seen[1]["Qcur-0"][-1]  # layer 0's roped queries, the same input
    assert np.array_equal(seen[0]["Qcur-0"][0], seen[1]["Qcur-0"][0])
    assert not np.array_equal(ours, theirs)
    assert np.abs(ours - theirs).max() <= 4 * np.spacing(np.abs(theirs).max())  # a few steps of the largest


def test_weights_cache_a_stacked_matrix_once():
    w = Weights(open_gguf(TINY))
    names = ("blk.0.attn_q.weight", "blk.0.attn_k.weight")
    a = w.stacked(names)
    assert a.shape == (128 + 64, 128)
    assert w.stacked(names) is a
    assert np.array_equal(a[:128], w.get(names[0])) and np.array_equal(a[128:], w.get(names[1]))


@pytest.mark.parametrize("by_columns", [False, True], ids=["by rows", "by columns"])
def test_a_matrix_too_large_for_the_budget_gives_the_bits_of_a_whole_one(monkeypatch, by_columns):
    """A Q4_1 matrix multiplied a block at a time (`Weights.row_blocks`, `Weights.column_blocks`) as one held whole;
    by columns (the head's way, `ops.linear_columns`) the same product in other bits."""
    from real_weights_support import find_smollm2

    path = find_smollm2()
    if path is None:
        pytest.skip("SmolLM2 Q4_1 is not on this machine (SMOLLM2_GGUF)")
    from walkthrough.engine.glassbox import weights as weights_module

    f = open_gguf(path)
    name = "blk.0.ffn_gate.weight"  # 1,536 rows of 576 Q4_1 values
    x = np.random.default_rng(6).standard_normal((3, 576)).astype(np.float32)
    whole_model = Model(f)
    whole = whole_model.meter().linear(name, x, by_columns=by_columns)
    assert whole_model.weights.holds_columns(name, offsets=True) == by_columns
    if by_columns:
        by_rows = whole_model.meter().linear(name, x)
        assert np.allclose(whole, by_rows, rtol=1e-4, atol=1e-4 * np.abs(whole).max())
    monkeypatch.setattr(weights_module, "BLOCK_BYTES", 700 * 576 * 4)  # blocks of about 700 rows (whole column groups by columns)
    small = Model(f, max_cache_bytes=1 << 20)  # the matrix's 3.5 MB is over a share of it: never held whole
    for rows in (x, x[:1]):
        assert np.array_equal(small.meter().linear(name, rows, by_columns=by_columns), whole[: len(rows)])
        assert np.array_equal(whole_model.meter().linear(name, rows, by_columns=by_columns), whole[: len(rows)])
    held = [key for key in small.weights.cached() if name in repr(key) and key[0] != "offsets"]
    assert not held  # its values went by blocks (only its small block offsets are kept)


@pytest.mark.parametrize("d_in, d_out", [(37, 300), (594, 1000), (1584, 576), (2053, 513)])
def test_a_matrix_by_columns_gives_a_row_the_same_bits_in_any_pass(d_in, d_out):
    rng = np.random.default_rng(d_in)
    w = rng.standard_normal((d_out, d_in)).astype(np.float32)
    wt = np.zeros((d_in, ops.padded_columns(d_out)), np.float32)
    wt[:, :d_out] = w.T  # as `Weights.columns` holds it
    x = rng.standard_normal((33, d_in)).astype(np.float32)
    alone = np.concatenate([ops.linear_columns(row[None], wt, d_out) for row in x])  # [33, d_out], decode's way
    for n in (2, 5, 9, 33):
        assert np.array_equal(ops.linear_columns(x[:n], wt, d_out), alone[:n])
    assert np.allclose(alone, x @ w.T, rtol=1e-4, atol=1e-4 * np.abs(alone).max())  # the same product


@pytest.mark.parametrize("d_in, d_out", [(37, 300), (612, 200), (1633, 576)])
def test_a_matrix_by_rows_gives_a_row_the_same_bits_in_any_pass(d_in, d_out):
    rng = np.random.default_rng(d_in)
    w = rng.standard_normal((d_out, d_in)).astype(np.float32)
    x = rng.standard_normal((33, d_in)).astype(np.float32)
    assert d_out > ops.ROW_SLAB  # a pass of several rows takes the matrix a slab at a time
    alone = np.concatenate([ops.linear(row[None], w) for row in x])  # [33, d_out], decode's way
    for n in (2, 5, 33):
        assert np.array_equal(ops.linear(x[:n], w), alone[:n])
    assert np.allclose(alone, x @ w.T, rtol=1e-4, atol=1e-4 * np.abs(alone).max())  # the same product


def test_a_tall_stack_by_columns_gives_each_matrix_its_own_bits(tmp_path):
    """Gate and up, 200 outputs each over 64 inputs: the stack is tall (`ops.tall`) and held by columns, each
    part padded to whole column groups; every output is what its matrix alone gives by columns, 1 row or 5."""
    from llama_support import write_llama

    model = Model(open_gguf(write_llama(tmp_path / "l.gguf", n_embd=64, n_ff=200, n_layers=1)))
    names = ["blk.0.ffn_gate.weight", "blk.0.ffn_up.weight"]
    assert ops.tall(400, 64) and not ops.tall(200, 64) and 200 % ops.COLUMN_GROUP
    x = np.random.default_rng(8).standard_normal((5, 64)).astype(np.float32)
    for rows in (x, x[:1]):
        together = model.meter().linears(names, rows, [None, None])
        alone = [model.meter().linear(name, rows, by_columns=True) for name in names]
        assert all(np.array_equal(a, b) for a, b in zip(together, alone))
    assert model.weights.column_starts(tuple(names)) == [0, 208, 416]


@pytest.mark.parametrize("exact_softmax", [True, False], ids=["ggml's exp", "numpy's exp"])
@pytest.mark.parametrize("kv_format", ["f32", "f16"])
@pytest.mark.parametrize("window", [0, 40])
def test_attention_by_blocks_of_queries_gives_the_whole_pass_bits(monkeypatch, kv_format, window, exact_softmax):
    rng = np.random.default_rng(window + len(kv_format))
    start, n = 30, 77  # a pass after 30 cached cells: blocks of 32, 32 and 13 queries
    q = rng.standard_normal((n, 6, 64)).astype(np.float32)
    k, v = (rng.standard_normal((start + n, 2, 64)).astype(np.float32) for _ in range(2))
    positions = np.arange(start, start + n)
    assert n > 2 * ops.ATTENTION_ROW_BLOCK  # the pass is taken in blocks
    out, weights = ops.attention(q, k, v, positions, 0.125, kv_format, window=window, exact_softmax=exact_softmax)
    monkeypatch.setattr(ops, "ATTENTION_ROW_BLOCK", 10**6)  # the whole pass at once
    whole_out, whole_weights = ops.attention(q, k, v, positions, 0.125, kv_format, window=window,
                                             exact_softmax=exact_softmax)
    assert np.array_equal(out.view(np.uint32), whole_out.view(np.uint32))
    assert np.array_equal(weights.view(np.uint32), whole_weights.view(np.uint32))
    cells = np.arange(start + n)[None, :]
    seen = (cells <= positions[:, None]) & ((positions[:, None] - cells < window) if window else True)  # [n, L]
    assert np.all(weights[:, ~seen] == 0) and np.all(weights[:, seen] > 0)
