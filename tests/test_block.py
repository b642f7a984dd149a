"""One stored block: layouts add up, decoded fields rebuild gguf.quants' values for every type, requantization."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from gguf import quants
from gguf.constants import GGML_QUANT_SIZES
from gguf.constants import GGMLQuantizationType as Q

from walkthrough.errors import WalkthroughError
from walkthrough.inspect.block import FLOAT_BLOCK, parse_block_spec, read_block
from walkthrough.inspect.block_fields import GRID_TYPES, decode
from walkthrough.inspect.block_layout import LAYOUTS, bits_per_weight, field_offsets
from walkthrough.inspect.gguf import open_gguf
from walkthrough.inspect.kquants import QK_K, WRITERS
from walkthrough.inspect.requant import (
    OUTLIER_TIMES,
    file_size_at,
    round_block,
    round_stored_block,
    round_trip,
    size_at,
    writable_types,
)

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "walkthrough" / "assets" / "tiny-clinical-moe.gguf"
REFERENCE = ROOT.parent / "shared" / "fixtures" / "reference"
DEQUANTIZABLE = [Q.F32, Q.F16] + list(quants._type_traits)  # every type gguf.quants dequantizes


def _random_block(qtype: Q, rng: np.random.Generator) -> np.ndarray:
    """Random bytes of one block, with F16 scale fields set to finite numbers (random bits could be inf/NaN)."""
    _block, size = GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size, dtype=np.uint8)
    for spec in LAYOUTS[qtype]:
        a, b = field_offsets(qtype)[spec.name]
        if "(F16)" in spec.meaning:
            raw[a:b] = np.frombuffer(np.float16(rng.uniform(-2, 2)).tobytes(), np.uint8)
    return raw


def test_every_dequantizable_type_has_a_layout_adding_up_to_its_block_bytes():
    for qtype in DEQUANTIZABLE:
        block, size = GGML_QUANT_SIZES[qtype]
        assert sum(f.nbytes for f in LAYOUTS[qtype]) == size, qtype.name
        bits = bits_per_weight(qtype)
        assert bits.total == size * 8 / block
        assert sum(bits.by_field.values()) == pytest.approx(bits.total)


def test_bits_per_weight_arithmetic_of_known_types():
    # ggml-common.h: block_q4_K is 2 + 2 + 12 + 128 bytes for 256 values, block_q8_0 2 + 32 for 32.
    assert bits_per_weight(Q.Q4_K).explain() == "d 16 + dmin 16 + scales 96 + qs 1024 bits = 1152 bits / 256 values = 4.5 bits per weight"
    assert bits_per_weight(Q.Q8_0).total == 8.5


@pytest.mark.parametrize("qtype", [t for t in DEQUANTIZABLE if t not in (Q.F32, Q.F16, Q.BF16)], ids=lambda t: t.name)
def test_decoded_fields_rebuild_the_values_gguf_quants_dequantizes(qtype):
    rng = np.random.default_rng(int(qtype))
    for _ in range(20):
        raw = _random_block(qtype, rng)
        with np.errstate(over="ignore"):  # a random MXFP4 exponent byte can make values overflow, in both
            expected = quants.dequantize(raw.reshape(1, -1), qtype).reshape(-1)
            decoded = decode(qtype, raw)
            rebuilt = decoded.values()
        if qtype in GRID_TYPES:  # codebook types: only the F16 scale is decoded
            assert rebuilt is None
            if "d" in decoded.fields:
                assert decoded.fields["d"][0] == np.float32(raw[:2].view(np.float16)[0])
            continue
        np.testing.assert_array_equal(rebuilt, expected)


@pytest.mark.parametrize("qtype", [Q.F32, Q.F16, Q.BF16], ids=lambda t: t.name)
def test_float_fields_rebuild_the_values(qtype):
    rng = np.random.default_rng(7)
    x = rng.normal(size=FLOAT_BLOCK).astype(np.float32)
    raw = quants.quantize(x, qtype).view(np.uint8) if qtype != Q.F32 else x.view(np.uint8)
    fields = decode(qtype, raw).fields
    e_bits, m_bits = {Q.F32: (8, 23), Q.F16: (5, 10), Q.BF16: (8, 7)}[qtype]
    bias = (1 << (e_bits - 1)) - 1
    sign, exp, man = fields["sign"], fields["exponent"], fields["mantissa"]
    rebuilt = (-1.0) ** sign * np.where(exp == 0, man / 2**m_bits * 2.0 ** (1 - bias),
                                        (1 + man / 2**m_bits) * 2.0 ** (exp - bias))
    np.testing.assert_array_equal(rebuilt.astype(np.float32), quants.dequantize(raw, qtype).reshape(-1))


def _files():
    paths = [TINY] + sorted(REFERENCE.glob("ref-*.gguf"))
    return [p for p in paths if p.exists()]


@pytest.mark.parametrize("path", _files(), ids=lambda p: p.name)
def test_real_blocks_match_the_engine_dequantization(path):
    with open_gguf(path) as f:
        for name, t in list(f.tensors.items())[:12]:
            block = read_block(f, name, 0)
            last = read_block(f, name, block.n_blocks - 1)
            full = quants.dequantize(np.array(f.tensor_bytes(name)), t.ggml_type).reshape(-1)
            np.testing.assert_array_equal(block.values, full[: block.block_size])
            np.testing.assert_array_equal(last.values, full[last.index * block.block_size:][: last.block_size])
            rebuilt = block.decoded.values()
            if rebuilt is not None:
                np.testing.assert_array_equal(rebuilt, block.values)
        assert file_size_at(f, None) == f.file_size  # every tensor at its stored type: the file's own size


def test_block_position_and_bad_specs():
    with open_gguf(TINY) as f:
        t = f.tensors["blk.0.attn_q.weight"]
        block = read_block(f, t.name, 5)
        assert (block.row, block.column) == divmod(5 * 32, t.shape[0])
        assert block.file_offset == t.offset + 5 * GGML_QUANT_SIZES[t.ggml_type][1]
        with pytest.raises(WalkthroughError, match="blocks 0.."):
            read_block(f, t.name, block.n_blocks)
        with pytest.raises(WalkthroughError, match="no tensor named"):
            read_block(f, "nope", 0)
    assert parse_block_spec("blk.0.attn_q.weight:3") == ("blk.0.attn_q.weight", 3)
    assert parse_block_spec("output.weight") == ("output.weight", 0)


def test_rounding_to_other_types():
    rng = np.random.default_rng(3)
    x = rng.normal(0, 0.02, 256).astype(np.float32)
    rounds = {r.qtype: r for r in round_block(x)}
    assert {Q.F16, Q.Q8_0, Q.Q5_1, Q.Q4_0, Q.Q4_1} <= set(rounds) == set(writable_types())
    q4 = rounds[Q.Q4_0]
    # Q4_0 of the first 32 values, worked out by hand: d = -max/8 (signed max by magnitude), codes round to nearest.
    b = x[:32]
    big = b[np.argmax(np.abs(b))]
    d = np.float32(np.float16(big / -8))
    codes = np.clip(np.trunc(b / (big / -8) + 8.5), 0, 15)
    np.testing.assert_allclose(q4.values[:32], d * (codes - 8), rtol=0, atol=1e-7)
    assert q4.max_error <= abs(float(d)) * 1.01  # no value further than one step
    assert rounds[Q.F32].rms == 0.0
    assert rounds[Q.Q8_0].rms < rounds[Q.Q4_0].rms
    # One outlier stretches the shared scale: the other values' error grows with it, by about OUTLIER_TIMES.
    assert q4.outlier_rms > 3 * q4.clean_rms
    assert rounds[Q.F16].outlier_rms is None  # no shared scale: nothing else to disturb
    assert OUTLIER_TIMES > 1


SMOLLM2 = Path(os.environ["SMOLLM2_GGUF"]) if os.environ.get("SMOLLM2_GGUF") else None


@pytest.mark.parametrize("path, tensor, index", [
    (TINY, "blk.0.attn_q.weight", 3),  # Q8_0, rows of 128
    (TINY, "blk.0.attn_q.weight", 511),  # the last block: the 256 values move back to the tensor's end
    pytest.param(SMOLLM2, "blk.0.attn_q.weight", 17, marks=pytest.mark.skipif(
        SMOLLM2 is None, reason="SMOLLM2_GGUF not set")),  # Q4_1, rows of 576
], ids=["tiny", "tiny-last", "smollm2"])
def test_k_quant_rows_round_256_real_values_beside_a_32_value_block(path, tensor, index):
    with open_gguf(path) as f:
        block = read_block(f, tensor, index)
        t = f.tensors[tensor]
        whole = np.asarray(quants.dequantize(np.array(f.tensor_bytes(tensor)), t.ggml_type), np.float32).reshape(-1)
        rounds = {r.qtype: r for r in round_stored_block(f, block)}
    assert block.block_size == 32 and t.shape[0] % QK_K  # the case the window is for
    first = min(index * 32, whole.size - QK_K)
    for qtype in WRITERS:  # Q6_K..Q2_K: every k-quant row is there, from 256 real values of the tensor
        r = rounds[qtype]
        assert r.values is not None and r.window is not None and r.window.start == first
        np.testing.assert_array_equal(r.original, whole[first:first + QK_K])
        np.testing.assert_array_equal(r.values, round_trip(whole[first:first + QK_K], qtype))
        assert f"values {first:,}..{first + QK_K - 1:,}" in r.window.describe()
    for qtype in (Q.Q8_0, Q.Q4_0):  # the block's own types round the block, no window
        assert rounds[qtype].window is None
        np.testing.assert_array_equal(rounds[qtype].original, block.values)
    # Fewer bits, more error (Q5_K and Q4_K can beat Q6_K on values stored as Q4_1: their 32-value sub-blocks
    # with a minimum hold a Q4_1 block's 16 levels almost exactly, as SmolLM2 shows).
    errors = [rounds[q].rms for q in (Q.Q6_K, Q.Q3_K, Q.Q2_K)]
    assert errors == sorted(errors)


def test_sizes_at_other_types():
    with open_gguf(TINY) as f:
        t = f.tensors["blk.0.attn_q.weight"]
        assert size_at(t, Q.Q4_0) == t.n_elements // 32 * 18
        assert size_at(t, Q.TQ1_0) is None  # rows of 128 do not split into blocks of 256
        assert file_size_at(f, Q.Q4_0) < file_size_at(f, None) < file_size_at(f, Q.F16)


def test_cli_block_json_and_errors(capsys):
    import json

    from walkthrough.cli import main

    assert main(["inspect", str(TINY), "--block", "blk.1.attn_k.weight:2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    with open_gguf(TINY) as f:
        block = read_block(f, "blk.1.attn_k.weight", 2)
    assert out["values"] == block.values.astype(np.float64).tolist()
    assert bytes.fromhex(out["bytes_hex"]) == block.raw.tobytes()
    assert out["bits_per_weight"]["total"] == 8.5
    q4 = next(r for r in out["rounded"] if r["type"] == "Q4_0")
    assert q4["tensor_bytes"] == block.n_blocks * 18
    assert main(["inspect", str(TINY), "--block", "blk.1.attn_k.weight:2"]) == 0
    assert "8.5 bits per weight" in capsys.readouterr().out
    assert main(["inspect", str(TINY), "--block", "blk.1.attn_k.weight:99999"]) == 2
    assert "blocks 0.." in capsys.readouterr().err


def test_cli_tables_fit_80_columns_and_name_what_file_means(monkeypatch, capsys):
    """Every line of `inspect --block` at 80 columns is whole (no cell cut to '…'), on the tiny model and on a
    real file whose sizes run to hundreds of MiB; the sizes say 'this tensor' and 'whole file' and what the
    whole file counts."""
    import os

    from rich.cells import cell_len

    from walkthrough.cli import main

    monkeypatch.setenv("COLUMNS", "80")
    paths = [TINY] + [Path(p) for p in [os.environ.get("SMOLLM2_GGUF", "")] if p and Path(p).exists()]
    for path in paths:
        assert main(["inspect", str(path), "--block", "blk.0.attn_q.weight"]) == 0
        out = capsys.readouterr().out
        assert max(cell_len(line) for line in out.splitlines()) <= 80
        assert "…" not in out, path.name
        with open_gguf(path) as f:
            from walkthrough.render.format import human_bytes
            assert human_bytes(file_size_at(f, Q.Q8_0)) in out
        words = " ".join(out.split())
        assert "this tensor" in words and "whole file" in words and "the others and the header as they are" in words
